"""The image-block mask inside onnxruntime, three ways, measured in one run at Gemma shapes
(docs/onnxruntime.md):

  .venv/bin/python bench/ort_custom_op.py [--threads 2] [--reps 3]

- tessera: com.tessera.TesseraGroupQueryAttention (libtessera_ort.so) with block_ids: the exact
  image mask, past/present one buffer (IO binding of one OrtValue to both).
- gqa: com.microsoft.GroupQueryAttention, same shared buffer, but no image mask (causal only):
  the speed an exporter gives up when the image mask forces it off GQA. Not the same result.
- attn+bias: ONNX Attention (opset 23) with past_key/past_value and a dense float bias [1, 1, S, T]
  built from the mask: the exporters' fallback today; present is a new buffer every step.
All three are one attention node (no rotary) in a CPU session with `threads` intra-op threads
(the Tessera op's own pool has as many). Prefill: a first prompt of S tokens with a 256-token
image block in the middle. Decode: one token after `ctx` cached. Medians of --reps runs after a
warm-up, the three variants taking turns within every repeat; each row ends with the 1-minute
load average after it (the machine may be shared); ratios are the peer's time / tessera's (> 1:
tessera faster). Roofline: decode reads the f32 K/V once (GB/s against the numpy read probe), prefill's visible pairs cost 4·Hq·D flops each
(GFLOP/s against numpy's f32 GEMM).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
import tessera  # noqa: E402
from attention_peers import roofline  # noqa: E402

HQ, HKV, D, BLOCK = 16, 8, 256, 256
F, I32 = TensorProto.FLOAT, TensorProto.INT32


def session(model, threads, custom=False):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # Idle onnxruntime workers would otherwise spin and take the cores from the other sessions' pools.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if custom:
        so.register_custom_ops_library(tessera.onnx.onnxruntime_library())
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def model(nodes, inputs, opsets):
    outs = [helper.make_tensor_value_info(n, F, None) for n in ("y", "present_k", "present_v")]
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outs),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 10
    return m


def gqa_model(domain, op, threads, with_blocks):
    names = ["q", "k", "v", "pk", "pv", "seqlens_k", "total"] + (["", "", "blocks"] if with_blocks else [])
    attrs = {"num_threads": threads} if with_blocks else {}
    node = helper.make_node(op, names, ["y", "present_k", "present_v"], domain=domain, num_heads=HQ,
                            kv_num_heads=HKV, **attrs)
    shapes = {"q": (F, [1, "s", HQ * D]), "k": (F, [1, "s", HKV * D]), "v": (F, [1, "s", HKV * D]),
              "pk": (F, [1, HKV, "c", D]), "pv": (F, [1, HKV, "c", D]), "seqlens_k": (I32, [1]),
              "total": (I32, []), "blocks": (I32, [1, "s"])}
    inputs = [helper.make_tensor_value_info(n, *shapes[n]) for n in names if n]
    return model([node], inputs, [("", 21), (domain, 1)])


def attention_model():
    names = ["q", "k", "v", "bias", "pk", "pv"]
    node = helper.make_node("Attention", names, ["y", "present_k", "present_v"])
    inputs = [helper.make_tensor_value_info(n, F, None) for n in names]
    return model([node], inputs, [("", 23)])


def shared_runner(sess, q, k, v, cache_len, past_len, blocks=None):
    """run() for a GQA-shaped session on one shared past/present buffer pair, bound once."""
    pk = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, HKV, cache_len, D), np.float32))
    pv = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, HKV, cache_len, D), np.float32))
    S = q.shape[1]
    io = sess.io_binding()
    feeds = {"q": q, "k": k, "v": v, "seqlens_k": np.array([past_len + S - 1], np.int32),
             "total": np.array(past_len + S, np.int32)}
    if blocks is not None:
        feeds["blocks"] = blocks
    for n, a in feeds.items():
        io.bind_cpu_input(n, a)
    io.bind_ortvalue_input("pk", pk)
    io.bind_ortvalue_input("pv", pv)
    io.bind_output("y")
    io.bind_ortvalue_output("present_k", pk)
    io.bind_ortvalue_output("present_v", pv)
    return lambda: sess.run_with_iobinding(io)


def image_blocks(S):
    blk = np.zeros((1, S), np.int32)
    blk[0, S // 2 - BLOCK // 2: S // 2 + BLOCK // 2] = 1
    return blk


def dense_bias(S, T, blk):
    """[1, 1, S, T] float bias of the causal + image-block mask (query i at position T - S + i)."""
    qp = np.arange(T - S, T)[:, None]
    kp = np.arange(T)[None, :]
    kb = np.zeros(T, np.int32)
    kb[T - S:] = blk[0]
    qb = blk[0][:, None]
    visible = (kp <= qp) | ((qb > 0) & (qb == kb[None, :]))
    return np.where(visible, 0.0, np.finfo(np.float32).min).astype(np.float32)[None, None], int(visible.sum())


def case(args, sessions, S, past_len):
    rng = np.random.default_rng(S + past_len)
    q = rng.standard_normal((1, S, HQ * D), dtype=np.float32)
    k = rng.standard_normal((1, S, HKV * D), dtype=np.float32)
    v = rng.standard_normal((1, S, HKV * D), dtype=np.float32)
    T = past_len + S
    blk = image_blocks(S) if S > 1 else np.zeros((1, 1), np.int32)
    bias, pairs = dense_bias(S, T, blk)
    heads = lambda x, h: x.reshape(1, S, h, D).transpose(0, 2, 1, 3).copy()  # noqa: E731
    past = rng.standard_normal((1, HKV, past_len, D), dtype=np.float32)
    feeds = {"q": heads(q, HQ), "k": heads(k, HKV), "v": heads(v, HKV), "bias": bias, "pk": past, "pv": past}
    t_tess, t_gqa, t_attn = alternated([shared_runner(sessions["tessera"], q, k, v, T, past_len, blk),
                                        shared_runner(sessions["gqa"], q, k, v, T, past_len),
                                        lambda: sessions["attn"].run(None, feeds)], args.reps)
    return t_tess, t_gqa, t_attn, pairs


def alternated(fns, reps):
    """Medians of `reps` timed calls of each fn, the fns taking turns within every repeat (so a
    change in the machine's load meets all of them), after one warm-up call each."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, t in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    bw, gemm = roofline(args.reps)
    sessions = {"tessera": session(gqa_model("com.tessera", "TesseraGroupQueryAttention", args.threads, True),
                                   args.threads, custom=True),
                "gqa": session(gqa_model("com.microsoft", "GroupQueryAttention", args.threads, False), args.threads),
                "attn": session(attention_model(), args.threads)}
    print(f"machine: {os.cpu_count()} cores; threads {args.threads}; onnxruntime {ort.__version__}; "
          f"{HQ} q heads / {HKV} kv heads x {D}, f32")
    print(f"roofline: read bandwidth {bw:.1f} GB/s (numpy sum), f32 GEMM {gemm:.1f} GFLOP/s (numpy)\n")
    print(f"{'case':30s} {'tessera ms':>11s} {'GB/s|GFLOP/s':>13s} {'% roof':>7s} {'gqa ms':>9s} "
          f"{'gqa/tess':>9s} {'attn+bias ms':>13s} {'attn/tess':>10s}")
    for label, S, past_len in [("prefill S=1024 +image", 1024, 0), ("prefill S=2048 +image", 2048, 0),
                               ("decode ctx=1024", 1, 1024), ("decode ctx=4096", 1, 4096)]:
        t_tess, t_gqa, t_attn, pairs = case(args, sessions, S, past_len)
        if S > 1:
            rate = 4 * HQ * D * pairs / t_tess / 1e9
            roof = 100 * rate / gemm
        else:
            rate = 2 * HKV * (past_len + 1) * D * 4 / t_tess / 1e9
            roof = 100 * rate / bw
        print(f"{label:30s} {t_tess * 1e3:11.3f} {rate:13.1f} {roof:7.0f} {t_gqa * 1e3:9.3f} {t_gqa / t_tess:9.2f} "
              f"{t_attn * 1e3:13.3f} {t_attn / t_tess:10.2f}   load {os.getloadavg()[0]:.1f}")
    print("\ngqa computes causal attention without the image block (not the same result); tessera and "
          "attn+bias compute the exact mask.")


if __name__ == "__main__":
    main()
