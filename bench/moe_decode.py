"""Decode of a Gemma-4-26B-A4B-shaped model (mixture of experts, docs/moe.md) against the roofline of the
bytes a decode step actually reads: the dense part plus top_k / num_experts of the experts; and prefill as
GFLOP/s of the whole step beside the f32 FMA peak's order of magnitude (numpy's GEMM rate, measured here).

  .venv/bin/python bench/moe_decode.py [--layers 2] [--vocab 16384] [--steps 16] [--runs 3]
                                                  [--threads 2] [--prompt 32] [--prefill 256]

The model: bench/e2e/checkpoint.py's `gemma4_26b_a4b` (26B-A4B's real widths, expert count and top-k) with
`--layers` decoder layers (1 sliding, then 1 global, ...) and a `--vocab` vocabulary (the real 262144 would make
the LM head most of the bytes of a model this shallow); random bf16 weights from a fixed seed, under bench/.work/,
written once and reused.

Tessera through its Python API: bf16 weights repacked at load, matmul and attention precision bf16, bf16 KV
cache. Decode seconds per token = (generate(prompt, 1 + steps) - generate(prompt, 1)) / steps, each a fresh
session; median over `--runs`.

Bytes per decode token: every decoder weight except the experts, the router included; top_k of the num_experts
experts' gate/up/down (the kernel reads only the chosen experts); the LM head (the tied embedding); the KV cache
read at the mean context of the timed steps. The dense-read figure (every expert) is printed for contrast. The
roofline: read bandwidth measured in this run (bench/e2e/roofline.py, best of the one- and multi-stream probes)
/ bytes per token. Prefill: generate(`--prefill` random tokens, 1) in one chunk, median over `--runs`; its FLOPs
count every token's 2 * (dense weights + top_k experts' weights) multiply-adds, attention excluded. No peer is run: llama.cpp's side needs a GGUF of this model, which Tessera cannot read yet.
"""
import argparse
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
from e2e import checkpoint, roofline  # noqa: E402


def active_bytes(cfg, context, weight_elem=2, kv_elem=2):
    """(bytes a decode token reads, bytes if every expert were read)."""
    H, E, K, Ie = cfg["hidden_size"], cfg["num_experts"], cfg["top_k_experts"], cfg["moe_intermediate_size"]
    L, I, Hq = cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["num_attention_heads"]
    dense = cfg["vocab_size"] * H  # LM head (tied embedding)
    kv = 0
    for kind, kv_heads, D, window in roofline.layer_geometry(cfg):
        k_eq_v = cfg.get("attention_k_eq_v") and kind == "full_attention"
        dense += Hq * D * H * 2 + kv_heads * D * H * (1 if k_eq_v else 2)   # q, o; k (v)
        kv += 2 * kv_heads * D * (min(context, window) if window else context)
    dense += L * (3 * I * H + E * H)   # dense MLP, router
    experts = L * 3 * Ie * H
    return (dense + K * experts) * weight_elem + kv * kv_elem, (dense + E * experts) * weight_elem + kv * kv_elem


def step_flops(cfg, tokens):
    """2 x the multiply-adds of the Linear layers (dense part, router, top_k experts, LM head of the last token)."""
    w_active, _ = active_bytes(dict(cfg, vocab_size=0), 0, weight_elem=1, kv_elem=0)
    return 2 * (tokens * w_active + cfg["vocab_size"] * cfg["hidden_size"])


def prefill_seconds(tessera, model_dir, prompt, threads):
    m = tessera.Model.load(model_dir, dtype="auto", max_context=len(prompt) + 8, max_chunk=len(prompt),
                           kv_dtype="bfloat16", attention_precision="bfloat16", matmul_precision="bfloat16",
                           num_threads=threads)
    t = time.perf_counter()
    m.generate([prompt], 1, stop_tokens=[])
    return time.perf_counter() - t


def decode_seconds(tessera, model_dir, prompt, steps, threads):
    m = tessera.Model.load(model_dir, dtype="auto", max_context=len(prompt) + steps + 8, kv_dtype="bfloat16",
                           attention_precision="bfloat16", matmul_precision="bfloat16", num_threads=threads)
    times = {}
    for n in (1, 1 + steps):
        t = time.perf_counter()
        out = m.generate([prompt], n, stop_tokens=[])
        times[n] = time.perf_counter() - t
        assert len(out[0]) == n
    return (times[1 + steps] - times[1]) / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--prefill", type=int, default=256)
    args = ap.parse_args()

    import tessera
    cfg = checkpoint.gemma4_26b_a4b_config(args.layers, args.vocab)
    d = os.path.join(HERE, ".work", f"gemma4_26b_a4b_L{args.layers}_V{args.vocab}")
    info = checkpoint.make_checkpoint(d, cfg, dtype="bf16")
    prompt = checkpoint.prompt_ids(args.prompt, args.vocab, checkpoint.special_ids(cfg))

    bw1, gemm = roofline.one_stream()
    bw2 = roofline.multi_stream(args.threads)
    bw = max(bw1, bw2)
    secs = [decode_seconds(tessera, d, prompt, args.steps, args.threads) for _ in range(args.runs)]
    med = statistics.median(secs)
    long_prompt = checkpoint.prompt_ids(args.prefill, args.vocab, checkpoint.special_ids(cfg), seed=11)
    pre = statistics.median(prefill_seconds(tessera, d, long_prompt, args.threads) for _ in range(args.runs))
    active, everything = active_bytes(cfg, args.prompt + args.steps // 2)

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor())
    print(f"machine: {cpu}, {os.cpu_count()} cores, {args.threads} threads; date {time.strftime('%Y-%m-%d')}")
    print(f"model: 26B-A4B widths, {args.layers} layers, vocab {args.vocab}, bf16 checkpoint "
          f"{info['total_bytes'] / 2**30:.2f} GiB; prompt {args.prompt}, {args.steps} decode steps, {args.runs} runs")
    print(f"read bandwidth: {bw1:.1f} GB/s one stream, {bw2:.1f} GB/s {args.threads} streams; roofline uses {bw:.1f}")
    print()
    print(f"{'':28} {'MB/token':>10} {'roofline tok/s':>15} {'measured tok/s':>15} {'% of roofline':>14}")
    print(f"{'active (top-k experts)':28} {active / 1e6:10.1f} {bw * 1e9 / active:15.1f} {1 / med:15.2f} "
          f"{100 * (1 / med) / (bw * 1e9 / active):13.1f}%")
    print(f"{'dense read (all experts)':28} {everything / 1e6:10.1f} {bw * 1e9 / everything:15.1f} {'':>15} "
          f"{100 * (1 / med) / (bw * 1e9 / everything):13.1f}%")
    print(f"decode ms/token per run: {', '.join(f'{1e3 * s:.1f}' for s in secs)} (median {1e3 * med:.1f})")
    print(f"prefill {args.prefill} tokens: {pre:.2f} s, {args.prefill / pre:.1f} tok/s, "
          f"{step_flops(cfg, args.prefill) / pre / 1e9:.1f} GFLOP/s in the Linear layers "
          f"(numpy f32 GEMM in this run: {gemm:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
