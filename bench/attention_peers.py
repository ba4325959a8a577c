"""Attention at Gemma shapes: Tessera vs onnxruntime CPU, measured in the same run beside this
machine's roofline (docs/architecture.md, "Performance").

  .venv/bin/python bench/attention_peers.py [--threads 2] [--reps 5] [--long] [--precision f32|bf16|both]

Roofline: read bandwidth (numpy sum over 512 MiB, `threads` copies in parallel is not possible in
numpy, so the probe is single-stream *and* a 2-thread C++ probe is not used here: see
BENCHMARKS.md) and f32 GEMM rate (numpy matmul, OpenBLAS). Decode: one query vs 1k/8k/32k keys,
K/V bf16 in a Tessera DenseStore (read in place), onnxruntime GroupQueryAttention float32 with a
shared past/present buffer (ORT CPU has no bf16 GQA; its bytes are counted at f32). Prefill:
S = 2048/4096 (8192 with --long) with a 256-token image block, causal and sliding window 1024:
Tessera's structured mask vs ORT Attention (opset 23) with the equivalent float bias.
Tessera runs at each --precision (bf16: bf16 K/V, q and the softmax weights rounded to bf16).
Medians of --reps runs; ratios are ORT time / Tessera time (> 1: Tessera faster).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
import tessera  # noqa: E402
import tessera.kv as tkv  # noqa: E402


def median_time(fn, reps):
    fn()  # warm-up (first call sizes scratch)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def roofline(reps):
    a = np.ones(512 * 1024 * 1024 // 4, dtype=np.float32)
    t = median_time(lambda: a.sum(), reps)
    bw = a.nbytes / t / 1e9
    n = 1024
    x = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    tg = median_time(lambda: x @ x, reps)
    return bw, 2 * n ** 3 / tg / 1e9


def ort_session(model_bytes, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def gqa_model(hq, hkv, d, max_seq):
    from onnx import TensorProto, helper
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens_k", "total"],
                            ["y", "present_k", "present_v"], domain="com.microsoft", num_heads=hq,
                            kv_num_heads=hkv, scale=1.0 / np.sqrt(d))
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("q", f, [1, 1, hq * d]), helper.make_tensor_value_info("k", f, [1, 1, hkv * d]),
              helper.make_tensor_value_info("v", f, [1, 1, hkv * d]),
              helper.make_tensor_value_info("pk", f, [1, hkv, max_seq, d]),
              helper.make_tensor_value_info("pv", f, [1, hkv, max_seq, d]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
              helper.make_tensor_value_info("total", TensorProto.INT32, [])]
    outputs = [helper.make_tensor_value_info("y", f, None), helper.make_tensor_value_info("present_k", f, None),
               helper.make_tensor_value_info("present_v", f, None)]
    g = helper.make_graph([node], "gqa", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m.SerializeToString()


def attention_bias_model(hq, hkv, d, s):
    from onnx import TensorProto, helper
    node = helper.make_node("Attention", ["q", "k", "v", "bias"], ["y"], scale=1.0 / np.sqrt(d))
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("q", f, [1, hq, s, d]), helper.make_tensor_value_info("k", f, [1, hkv, s, d]),
              helper.make_tensor_value_info("v", f, [1, hkv, s, d]), helper.make_tensor_value_info("bias", f, [1, 1, s, s])]
    g = helper.make_graph([node], "attn", inputs, [helper.make_tensor_value_info("y", f, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    return m.SerializeToString()


def decode_rows(args, bw):
    rng = np.random.default_rng(1)
    rows = []
    for hq, hkv, d in [(16, 8, 256), (16, 1, 512)]:
        for ctx in [1024, 8192, 32768]:
            store = tkv.DenseStore(1, hkv, d, ctx + 1, dtype="bf16")
            chunk = 2048
            for j in range(0, ctx, chunk):
                n = min(chunk, ctx - j)
                kk = rng.standard_normal((1, hkv, n, d), dtype=np.float32)
                store.append(kk, kk, (np.arange(n) + j)[None])
            q = rng.standard_normal((1, hq, 1, d), dtype=np.float32)
            qpos = np.array([[ctx - 1]])
            t_prec = {pr: median_time(lambda: tkv.attend(store, q, qpos, num_threads=args.threads, precision=pr),
                                      args.reps) for pr in args.precisions}
            kv_bytes = 2 * hkv * ctx * d * 2
            sess = ort_session(gqa_model(hq, hkv, d, ctx + 1), args.threads)
            pk = rng.standard_normal((1, hkv, ctx + 1, d), dtype=np.float32)
            pv = pk.copy()
            feeds = {"q": q.reshape(1, 1, hq * d), "k": pk[:, :, :1].reshape(1, 1, hkv * d),
                     "v": pv[:, :, :1].reshape(1, 1, hkv * d), "pk": pk, "pv": pv,
                     "seqlens_k": np.array([ctx], np.int32), "total": np.array(ctx + 1, np.int32)}
            t_ort = median_time(lambda: sess.run(None, feeds), args.reps)
            for pr, t_tess in t_prec.items():
                rows.append((f"decode {hq}q/{hkv}kv x {d} {pr}", ctx, t_tess * 1e3, kv_bytes / t_tess / 1e9,
                             100 * kv_bytes / t_tess / 1e9 / bw, t_ort * 1e3, t_ort / t_tess))
    return rows


def prefill_rows(args, gemm):
    rng = np.random.default_rng(2)
    rows = []
    hq, hkv, d = 16, 8, 256
    for s in [2048, 4096] + ([8192] if args.long else []):
        q = rng.standard_normal((1, hq, s, d), dtype=np.float32)
        k = rng.standard_normal((1, hkv, s, d), dtype=np.float32)
        blk = np.full((1, s), -1, np.int32)
        blk[0, s // 2: s // 2 + 256] = 0
        for name, window in [("causal+image", (-1, -1)), ("window 1024+image", (1023, -1))]:
            kw = dict(window=window, q_block=blk, k_block=blk)
            vis = tessera.attention_bias(1, s, s, **kw) == 0
            pairs = int(vis.sum())
            flops = 4 * hq * d * pairs
            # f32: f32 K/V; bf16: bf16 K/V (converted inside the call, O(S D)) and bf16 products.
            kv = {"f32": {}, "bf16": dict(kv_dtype="bf16", precision="bf16")}
            t_prec = {pr: median_time(lambda: tessera.attention(q, k, k, num_threads=args.threads, **kw, **kv[pr]),
                                      args.reps) for pr in args.precisions}
            bias = tessera.attention_bias(1, s, s, masked_value=np.finfo(np.float32).min, **kw)
            sess = ort_session(attention_bias_model(hq, hkv, d, s), args.threads)
            t_ort = median_time(lambda: sess.run(None, {"q": q, "k": k, "v": k, "bias": bias}), max(1, args.reps // 2))
            for pr, t_tess in t_prec.items():
                rows.append((f"prefill {name} {pr}", s, t_tess * 1e3, flops / t_tess / 1e9,
                             100 * flops / t_tess / 1e9 / gemm, t_ort * 1e3, t_ort / t_tess))
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--long", action="store_true")
    p.add_argument("--precision", choices=["f32", "bf16", "both"], default="both",
                   help="Tessera's attention precision (bf16: bf16 K/V, q and weights rounded to bf16)")
    args = p.parse_args()
    args.precisions = ["f32", "bf16"] if args.precision == "both" else [args.precision]
    import onnxruntime
    bw, gemm = roofline(args.reps)
    print(f"machine: {os.cpu_count()} cores; threads {args.threads}; onnxruntime {onnxruntime.__version__}; "
          f"tessera SIMD {os.environ.get('TESSERA_SIMD', 'default')}")
    print(f"roofline: read bandwidth {bw:.1f} GB/s (numpy sum, 1 stream), f32 GEMM {gemm:.1f} GFLOP/s (numpy)\n")
    print(f"{'case':32s} {'S/keys':>7s} {'tessera ms':>11s} {'GB/s|GFLOP/s':>13s} {'% roof':>7s} "
          f"{'ORT ms':>9s} {'ORT/tess':>9s}")
    for r in decode_rows(args, bw) + prefill_rows(args, gemm):
        print(f"{r[0]:32s} {r[1]:7d} {r[2]:11.3f} {r[3]:13.1f} {r[4]:7.0f} {r[5]:9.3f} {r[6]:9.2f}")
    print("\ndecode: GB/s of bf16 K/V read by Tessera (% of read bandwidth); ORT GQA reads f32 K/V (2x the bytes).")
    print("prefill: GFLOP/s on visible pairs (4 Hq D pairs) and % of the numpy GEMM rate; ORT uses the float bias.")
    print("f32 / bf16: Tessera's precision (bf16 rounds q and the softmax weights to bf16, AVX-512-BF16 where the "
          "CPU has it); onnxruntime always computes f32.")


if __name__ == "__main__":
    main()
