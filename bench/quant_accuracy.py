"""Accuracy of quantized GGUFs against the unquantized model (issue "Quantized weights", Accuracy):
over one fixed sequence, the mean per-token KL(unquantized || quantized) and the top-1 agreement,
for Tessera and llama.cpp running the same llama.cpp-quantized file.

  .venv/bin/python bench/quant_accuracy.py [--shape gemma3|gemma4] [--types q8_0,q4_0,q4_k_m]
                                           [--tokens 512] [--threads 2]

The files are the end-to-end bench's (make them first: `python3 bench/e2e_peers.py --only gemma3
--dtype q4_0 --prepare-only`, one call per type). The reference is Tessera on the f32 safetensors
checkpoint (equal to transformers' logits, python/tests) with the same bf16 KV cache and attention
precision. Tessera is measured twice: one prefill of the whole sequence (at the default matmul
precision: the int8 GEMM with two bytes per Linear input where the CPU has AVX-512 VNNI, else
dequantized f32 panels) and token by token (max_chunk 1: decode's row-dot, Linear inputs
rounded to int8 blocks as llama.cpp rounds them); with --int8 also one prefill at matmul precision
int8 (Linear inputs rounded to one int8 per block in prefill too, llama.cpp's numerics).
llama.cpp (the peers venv, extra buffer types off: bench/PEERS.md) evaluates the sequence in
batches of 512 with every position's logits.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
from e2e import checkpoint, engines  # noqa: E402

LLAMA_LOGITS = r"""
import sys, json, numpy as np, llama_cpp
path, ids, threads, out, bench = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
sys.path.insert(0, bench)
from e2e import worker
worker.no_extra_buffer_types()
llm = llama_cpp.Llama(model_path=path, n_ctx=len(ids), n_threads=threads, n_threads_batch=threads, n_batch=512,
                      n_ubatch=512, logits_all=True, verbose=False, flash_attn=True, type_k=30, type_v=30)
llm.eval(ids)
np.save(out, np.asarray(llm.scores[:len(ids)], dtype=np.float32))
"""


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def compare(ref_lp, ref_top, logits):
    lq = log_softmax(logits.astype(np.float64))
    kl = (np.exp(ref_lp) * (ref_lp - lq)).sum(-1)
    return float(kl.mean()), float((logits.argmax(-1) == ref_top).mean())


def tessera_logits(path, ids, threads, chunk=None, matmul_precision="float32"):
    import tessera

    kw = dict(max_chunk=chunk) if chunk else {}
    kw["matmul_precision"] = matmul_precision
    m = tessera.Model.load(path, dtype="auto", max_context=len(ids), num_threads=threads, kv_dtype="bfloat16",
                           attention_precision="bfloat16", **kw)
    t = time.time()
    out = m.forward(np.asarray([ids]))[0]
    return out, time.time() - t


def llama_logits(path, ids, threads):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "logits.npy")
        t = time.time()
        r = subprocess.run([os.path.join(engines.PEERS, "venv", "bin", "python"), "-c", LLAMA_LOGITS, path,
                            json.dumps(ids), str(threads), out, HERE], capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            return None, f"rc {r.returncode}: {engines.tail(r.stderr)}"
        return np.load(out), time.time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=["gemma3", "gemma4"], default="gemma3")
    ap.add_argument("--types", default="q8_0,q4_0,q4_k_m")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--int8", action="store_true", help="also Tessera's prefill at matmul precision int8")
    ap.add_argument("--work", default=os.path.join(HERE, ".work"))
    args = ap.parse_args()
    layers = {"gemma3": 26, "gemma4": 6}[args.shape]
    base = os.path.join(args.work, f"{args.shape}-L{layers}-V262144")
    hf = os.path.join(base, "hf")
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    vocab = checkpoint.text_config(cfg)["vocab_size"]
    ids = [2] + checkpoint.prompt_ids(args.tokens - 1, vocab, checkpoint.special_ids(cfg))
    ref, secs = tessera_logits(hf, ids, args.threads)
    print(f"reference: Tessera on {hf} (f32), {len(ids)} tokens in {secs:.1f} s", flush=True)
    ref_lp = log_softmax(ref.astype(np.float64))
    ref_top = ref.argmax(-1)
    del ref
    rows = []
    for q in [t for t in args.types.split(",") if t]:
        path = os.path.join(base, f"model.{q}.gguf")
        if not os.path.exists(path):
            rows.append((q, "—", f"{path} missing (bench/e2e_peers.py --dtype {q} --prepare-only)"))
            continue
        runs = [("Tessera, one prefill", lambda: tessera_logits(path, ids, args.threads)),
                ("Tessera, token by token", lambda: tessera_logits(path, ids, args.threads, chunk=1)),
                ("llama.cpp", lambda: llama_logits(path, ids, args.threads))]
        if args.int8:
            runs.insert(1, ("Tessera, one prefill, matmul precision int8",
                            lambda: tessera_logits(path, ids, args.threads, matmul_precision="int8")))
        for name, run in runs:
            logits, secs = run()
            if logits is None:
                rows.append((q, name, f"failed: {secs}"))
                continue
            kl, top1 = compare(ref_lp, ref_top, logits)
            rows.append((q, name, f"{kl:.3e} | {100 * top1:.1f}%"))
            print(f"{q} {name}: KL {kl:.3e}, top-1 {100 * top1:.1f}% ({secs:.1f} s)", flush=True)
    print(f"\n{args.shape} shape, {len(ids)} tokens, {args.threads} threads, bf16 KV in both engines\n")
    print("| type | engine | mean KL vs f32 | top-1 agreement |\n| --- | --- | --- | --- |")
    for q, name, cells in rows:
        print(f"| {q} | {name} | {cells} |" if "|" in cells else f"| {q} | {name} | {cells} | |")


if __name__ == "__main__":
    main()
