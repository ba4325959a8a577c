"""A Gemma 3 decoder exported by onnxruntime-genai's model builder, run in onnxruntime three ways
(docs/onnxruntime.md), prefill with an image block then decode, measured in one run:

  .venv/bin/python bench/ort_decoder.py [--layers 4] [--vocab 8192] [--prompt 1024] [--decode 16]
                                        [--threads 2] [--reps 3] [--builder-python PY]

- tessera: the export rewritten by tessera.ort_rewrite (com.tessera.TesseraGroupQueryAttention,
  block_ids: the exact image mask), caches shared in place (IO binding, fixed capacity).
- gqa: the export as it is (com.microsoft.GroupQueryAttention; its sliding_window_cache ring
  dropped so every cache is linear), the same shared caches, no image mask: causal only, not the
  same result. The speed exporters give up today.
- attn+bias: every GroupQueryAttention replaced by com.microsoft.RotaryEmbedding on q and k plus
  ONNX Attention (opset 23) with past/present and a dense float bias input per layer kind (full,
  sliding) built from the mask: the exporters' fallback, exact, caches concatenated every step.
Shape: Gemma-3-1B's layer (hidden 1152, 4 q heads / 1 kv head x 256, window 512, random f32
weights, bench/e2e/checkpoint.py) with --layers layers and a --vocab vocabulary. The prompt has a
256-token image block in its middle. Medians of --reps prefills and of the --decode steps of each;
tessera's and attn+bias's logits are compared (they compute the same mask). The model builder
comes from `bash bench/setup_peers.sh --builder` or --builder-python.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import tessera  # noqa: E402
from tessera.ort_rewrite import rewrite  # noqa: E402
from ort_custom_op import session  # noqa: E402  (one session setup for both benches)

BLOCK = 256


def export(args, work):
    import checkpoint
    hf, out = os.path.join(work, "hf"), os.path.join(work, "onnx")
    if not os.path.exists(os.path.join(out, "model.onnx")):
        checkpoint.make_checkpoint(hf, checkpoint.gemma3_config(layers=args.layers, vocab=args.vocab))
        done = subprocess.run([args.builder_python, os.path.join(ROOT, "bench", "e2e", "ortgenai_build.py"), "-i", hf,
                               "-o", out, "-p", "fp32", "-e", "cpu", "-c", os.path.join(work, "cache")],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the model builder failed:\n{done.stderr[-4000:]}")
    return onnx.load(os.path.join(out, "model.onnx"))


def plain_gqa(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for node in m.graph.node:
        keep = [a for a in node.attribute if a.name != "sliding_window_cache"]
        del node.attribute[:]
        node.attribute.extend(keep)
    return m


def attention_with_bias(model):
    """GroupQueryAttention -> RotaryEmbedding (q, k) + Attention(23) with a bias input per layer kind."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    nodes = []
    for node in g.node:
        if node.op_type != "GroupQueryAttention":
            nodes.append(node)
            continue
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        q, k, v, pk, pv = node.input[:5]
        cos, sin = node.input[7], node.input[8]
        sliding = a.get("local_window_size", -1) > 0
        rq, rk = node.name + "/rot_q", node.name + "/rot_k"
        nodes.append(helper.make_node("RotaryEmbedding", [q, "position_ids", cos, sin], [rq], domain="com.microsoft",
                                      num_heads=a["num_heads"], interleaved=a.get("rotary_interleaved", 0)))
        nodes.append(helper.make_node("RotaryEmbedding", [k, "position_ids", cos, sin], [rk], domain="com.microsoft",
                                      num_heads=a["kv_num_heads"], interleaved=a.get("rotary_interleaved", 0)))
        attrs = dict(q_num_heads=a["num_heads"], kv_num_heads=a["kv_num_heads"], scale=a["scale"])
        if a.get("softcap", 0.0):
            attrs["softcap"] = a["softcap"]
        nodes.append(helper.make_node("Attention", [rq, rk, v, "bias_sliding" if sliding else "bias_full", pk, pv],
                                      list(node.output[:3]), name=node.name, **attrs))
    del g.node[:]
    g.node.extend(nodes)
    g.input.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]))
    for n in ("bias_full", "bias_sliding"):
        g.input.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, "sequence_length", "total_sequence_length"]))
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = max(o.version, 23)
    return m


def bias(blocks, past, window):
    """[1, 1, S, T]: 0 where visible (window AND (causal OR same block)), float min elsewhere."""
    S = len(blocks)
    T = past + S
    kb = np.concatenate([np.zeros(past, np.int32), blocks])
    qp, kp = np.arange(past, T)[:, None], np.arange(T)[None, :]
    vis = ((window < 0) | (qp - kp < window)) & ((kp <= qp) | ((blocks[:, None] > 0) & (blocks[:, None] == kb[None])))
    return np.where(vis, 0.0, np.finfo(np.float32).min).astype(np.float32)[None, None]


def run(kind, sess, info, steps, blocks, capacity):
    """Prefill + decode; returns (logits per step, seconds per step)."""
    layers, hkv, d, window = info
    caches = {f"{i}.{kv}": np.zeros((1, hkv, capacity if kind != "attn" else 0, d), np.float32)
              for i in range(layers) for kv in ("key", "value")}
    values = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in caches.items()}
    total, logits, times = 0, [], []
    for ids, blk in zip(steps, blocks):
        past, total = total, total + len(ids)
        io = sess.io_binding()
        io.bind_cpu_input("input_ids", np.array([ids], np.int64))
        io.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        if kind == "tessera":
            io.bind_cpu_input("block_ids", np.array([blk], np.int32))
        if kind == "attn":
            io.bind_cpu_input("position_ids", np.arange(past, total, dtype=np.int64)[None])
            io.bind_cpu_input("bias_full", bias(np.array(blk, np.int32), past, -1))
            io.bind_cpu_input("bias_sliding", bias(np.array(blk, np.int32), past, window))
        io.bind_output("logits")
        for name, value in values.items():
            io.bind_ortvalue_input(f"past_key_values.{name}", value)
            if kind == "attn":
                io.bind_output(f"present.{name}")
            else:
                io.bind_ortvalue_output(f"present.{name}", value)
        t0 = time.perf_counter()
        sess.run_with_iobinding(io)
        times.append(time.perf_counter() - t0)
        outs = io.get_outputs()
        logits.append(outs[0].numpy()[0, -1])
        if kind == "attn":
            values = dict(zip(values, outs[1:]))
    return logits, times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--prompt", type=int, default=1024)
    p.add_argument("--decode", type=int, default=16)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--builder-python", default=os.path.join(ROOT, "bench", ".peers", "builder-venv", "bin", "python"))
    p.add_argument("--work", default=os.path.join(ROOT, "bench", ".work", "ort_decoder"))
    args = p.parse_args()
    work = os.path.join(args.work, f"gemma3-{args.layers}l-{args.vocab}v")
    model = export(args, work)
    import checkpoint
    cfg = checkpoint.text_config(checkpoint.gemma3_config(layers=args.layers, vocab=args.vocab))
    info = (args.layers, cfg["num_key_value_heads"], cfg["head_dim"], cfg["sliding_window"])
    rng = np.random.default_rng(0)
    prompt = rng.integers(10, args.vocab - 10, args.prompt).tolist()
    blk = [0] * args.prompt
    mid = args.prompt // 2
    blk[mid - BLOCK // 2: mid + BLOCK // 2] = [1] * BLOCK
    steps = [prompt] + [[int(t)] for t in rng.integers(10, args.vocab - 10, args.decode)]
    blocks = [blk] + [[0]] * args.decode
    capacity = args.prompt + args.decode
    variants = {"tessera": session(rewrite(model), args.threads, custom=True),
                "gqa": session(plain_gqa(model), args.threads),
                "attn": session(attention_with_bias(model), args.threads)}
    results = {}
    for kind, sess in variants.items():
        run(kind, sess, info, steps[:2], blocks[:2], capacity)  # warm-up
        runs = [run(kind, sess, info, steps, blocks, capacity) for _ in range(args.reps)]
        prefill = statistics.median(r[1][0] for r in runs)
        decode = statistics.median(t for r in runs for t in r[1][1:])
        results[kind] = (prefill, decode, runs[0][0])
    diff = max(float(np.abs(a - b).max()) for a, b in zip(results["tessera"][2], results["attn"][2]))
    print(f"machine: {os.cpu_count()} cores; threads {args.threads}; onnxruntime {ort.__version__}; "
          f"Gemma-3-1B layer x {args.layers}, vocab {args.vocab}, f32; prompt {args.prompt} with a {BLOCK}-token "
          f"image block; {args.decode} decode steps; medians of {args.reps}")
    print(f"tessera vs attn+bias logits: max |diff| {diff:.2e} (same mask)\n")
    t = results["tessera"]
    print(f"{'variant':12s} {'prefill ms':>11s} {'vs tessera':>11s} {'decode ms/token':>16s} {'vs tessera':>11s}")
    for kind in ("tessera", "gqa", "attn"):
        pre, dec, _ = results[kind]
        print(f"{kind:12s} {pre * 1e3:11.1f} {pre / t[0]:11.2f} {dec * 1e3:16.2f} {dec / t[1]:11.2f}")
    print("\nvs tessera: the variant's time / tessera's (> 1: tessera faster). gqa has no image mask.")


if __name__ == "__main__":
    main()
