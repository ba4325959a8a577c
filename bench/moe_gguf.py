"""Tessera against llama.cpp on the same Gemma-4-26B-A4B-shaped GGUF (mixture of experts, docs/moe.md):
decode and prefill speed of both engines, and decode against the roofline of the bytes a token reads.

  .venv/bin/python bench/moe_gguf.py [--layers 2] [--vocab 16384] [--types bf16,q4_0,q4_k_m]
                                     [--prompt 256] [--decode 17] [--runs 3] [--threads 2]

The model: bench/e2e/checkpoint.py's `gemma4_26b_a4b` (26B-A4B's real widths, 128 experts, top 8) with
`--layers` decoder layers and a `--vocab` vocabulary, random bf16 weights from a fixed seed (the checkpoint
bench/moe_decode.py uses, under bench/.work/). llama.cpp's converter (convert_hf_to_gguf.py from the
llama-cpp-python sdist, `bash bench/setup_peers.sh --llama-only`) writes the bf16 GGUF; llama.cpp's own
quantizer (llama_model_quantize, no importance matrix) writes Q4_0 / Q4_K_M from it. Both engines run
every file; all files are written once and reused.

Runs: each a whole process holding /tmp/tessera-cpu.lock (bench/e2e/engines.py), engines alternating within
every repeat and type. One run prefills `--prompt` random ids in one chunk and then generates `--decode`
greedy tokens: prefill tok/s = prompt / time to the first token; decode tok/s = (decode - 1) / the time of
the forwards after the first token. Tessera: `tessera run --model FILE`, bf16 KV, attention at precision
bf16, for the bf16 file `--dtype bf16` (the converter keeps the small router matrix f32; this rounds it
to bf16, as the checkpoint holds it) and matmuls at precision bf16 (quantized matrices run their own kernels). llama.cpp:
llama-cpp-python in bench/.peers/venv (bench/e2e/worker.py), bf16 KV, flash attention, n_batch 512, its
extra CPU buffer types (AMX, repacked quantized matmuls) off for the quantized files by default, where they
crashed on an AMX CPU (bench/PEERS.md); `--llama-extra-bufts on` turns them on.

Bytes per decode token, from the file's own tensor sizes: every tensor except the expert stacks (the
tied embedding once, as the LM head), top_k / num_experts of each `_exps` stack, plus the KV cache read at
the mean decode context. Roofline tok/s = read bandwidth measured in this run (bench/e2e/roofline.py,
under the lock, best of its one- and multi-stream probes) / bytes per token. Prefill GFLOP/s counts each
token's 2 x (dense + top_k experts') weights, attention excluded (bench/moe_decode.py's count).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from e2e import checkpoint, engines, roofline  # noqa: E402
from moe_decode import active_bytes, step_flops  # noqa: E402

PEERS_PY = os.path.join(HERE, ".peers", "venv", "bin", "python")
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:7.0f} s] {msg}", flush=True)


def gguf_active_bytes(path, cfg, context):
    """(bytes a decode token reads, bytes of every expert) from the file's tensors, KV at bf16."""
    sys.path.insert(0, os.path.join(engines.SDIST, "gguf-py"))
    import gguf  # the sdist's gguf-py, matching its converter
    dense = experts = 0
    for t in gguf.GGUFReader(path).tensors:
        if "_exps." in t.name and t.name.endswith(".weight"):
            experts += int(t.n_bytes)
        else:
            dense += int(t.n_bytes)
    kv = active_bytes(dict(cfg, vocab_size=0), context, weight_elem=0, kv_elem=2)[0]
    return dense + experts * cfg["top_k_experts"] / cfg["num_experts"] + kv, experts


def run_llamacpp(gguf_file, ids, decode, threads, extra_bufts, timeout):
    a = dict(engine="llamacpp", model=gguf_file, ids=list(map(int, ids)), decode=decode, threads=threads,
             context=len(ids) + decode, kv_type=30, batch=512, flash_attn=True, extra_bufts=extra_bufts)
    rc, so, se, rss, wall = engines.run_measured(
        [PEERS_PY, os.path.join(HERE, "e2e", "worker.py"), json.dumps(a)], timeout)
    line = [l for l in so.splitlines() if l.startswith("RESULT ")]
    if rc != 0 or not line:
        return {"error": f"rc {rc}: {engines.tail(se + so)}", "wall_s": wall}
    r = json.loads(line[-1][len("RESULT "):])
    r["foreign_cores"] = engines.LAST_FOREIGN[0]
    return r


def prepare(args):
    cfg = checkpoint.gemma4_26b_a4b_config(args.layers, args.vocab)
    d = os.path.join(args.work, f"gemma4_26b_a4b_L{args.layers}_V{args.vocab}")
    info = checkpoint.make_checkpoint(d, cfg, log=log, dtype="bf16")
    files = {}
    os.makedirs(os.path.join(d, "gguf"), exist_ok=True)
    bf16, why = engines.prepare_llamacpp(d, os.path.join(d, "gguf", "model.bf16.gguf"), log, outtype="bf16")
    if not bf16:
        sys.exit(f"llama.cpp's converter failed: {why}")
    for t in args.types.split(","):
        if t == "bf16":
            files[t] = bf16
            continue
        # llama.cpp's quantizer from its own venv (engines.prepare_llamacpp_quant runs this interpreter)
        out = os.path.join(d, "gguf", f"model.{t}.gguf")
        q, why = engines._make_file(out, [PEERS_PY, "-c", engines.QUANTIZE_SCRIPT, bf16, out + ".part",
                                          str(engines.QUANT_FTYPES[t]), str(args.threads)], "quantize", log, True)
        if q:
            files[t] = q
        else:
            log(f"{t}: llama.cpp's quantizer failed: {why}")
    return cfg, info, files


def summarize(rs, prompt, decode):
    good = [r for r in rs if "error" not in r]
    if not good:
        return {"error": rs[0].get("error", "no run")}
    pre = statistics.median(r["prefill_s"] for r in good)
    dec = statistics.median(r["decode_s"] for r in good)
    return {"prefill_tok_s": prompt / pre, "decode_tok_s": (decode - 1) / dec,
            "decode_ms": [1e3 * r["decode_s"] / (decode - 1) for r in good],
            "prefill_s": [r["prefill_s"] for r in good], "tokens": good[0]["tokens"],
            "foreign_cores": max(r.get("foreign_cores") or 0 for r in good)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=16384)
    ap.add_argument("--types", default="bf16,q4_0,q4_k_m")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--decode", type=int, default=17)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(HERE, ".work"))
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "release", "tessera"))
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--llama-extra-bufts", choices=("auto", "on", "off"), default="auto",
                    help="llama.cpp's extra CPU buffer types (repacked quantized matmuls); auto: off for the "
                         "quantized files, where they crashed on an AMX CPU (bench/PEERS.md)")
    args = ap.parse_args()
    if not os.path.exists(PEERS_PY):
        sys.exit("llama.cpp not installed (bash bench/setup_peers.sh --llama-only)")
    cfg, info, files = prepare(args)
    ids = checkpoint.prompt_ids(args.prompt, args.vocab, checkpoint.special_ids(cfg))
    rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    with engines.cpu_lock():
        bw1, gemm = roofline.one_stream()
        bw2 = roofline.multi_stream(args.threads)
    bw = max(bw1, bw2)
    load = [os.getloadavg()]
    raw = {(t, e): [] for t in files for e in ("tessera", "llamacpp")}
    for rep in range(args.runs):
        for t, f in files.items():
            for e in ("tessera", "llamacpp") if rep % 2 == 0 else ("llamacpp", "tessera"):
                if e == "tessera":
                    # (--dtype bf16: the converter keeps the router f32, which precision bf16 refuses)
                    r = engines.run_tessera(args.tessera, f, ids, args.decode, args.threads, args.prompt,
                                            args.timeout, dtype=t, extra=("--dtype", "bf16") if t == "bf16" else ())
                else:
                    extra = t == "bf16" if args.llama_extra_bufts == "auto" else args.llama_extra_bufts == "on"
                    r = run_llamacpp(f, ids, args.decode, args.threads, extra, args.timeout)
                raw[(t, e)].append(r)
                state = r.get("error") or (f"prefill {r['prefill_s']:.2f} s, decode "
                                           f"{1e3 * r['decode_s'] / (args.decode - 1):.1f} ms/token, "
                                           f"others' load {r['foreign_cores']:.2f} cores")
                log(f"run {rep + 1}/{args.runs}, {t}, {e}: {state}")
        load.append(os.getloadavg())
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor())
    print(f"\ntree {rev}; machine: {cpu}, {os.cpu_count()} cores, {args.threads} threads; "
          f"date {time.strftime('%Y-%m-%d %H:%M')}; load averages (1/5/15 min) before and after each repeat: "
          + "; ".join("/".join(f"{x:.1f}" for x in l) for l in load))
    print(f"model: 26B-A4B widths, {args.layers} layers, vocab {args.vocab}; prompt {args.prompt} tokens in one "
          f"chunk, {args.decode} generated; {args.runs} runs; llama.cpp extra buffer types {args.llama_extra_bufts}; "
          f"read bandwidth {bw1:.1f} GB/s one stream, "
          f"{bw2:.1f} GB/s {args.threads} streams (roofline uses {bw:.1f}); numpy f32 GEMM {gemm:.1f} GFLOP/s")
    flops = step_flops(dict(cfg, vocab_size=0), args.prompt)
    print("\n| file | engine | prefill tok/s | prefill GFLOP/s | decode tok/s | MB/token (active) | roofline tok/s "
          "| % of roofline | decode ms/token per run | first tokens |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    report = {"tree": rev, "bandwidth_gbs": [bw1, bw2], "load": load, "cells": {}}
    for t, f in files.items():
        act, _ = gguf_active_bytes(f, cfg, args.prompt + args.decode // 2)
        roof = bw * 1e9 / act
        for e in ("tessera", "llamacpp"):
            c = summarize(raw[(t, e)], args.prompt, args.decode)
            report["cells"][f"{t}/{e}"] = c
            if "error" in c:
                print(f"| {t} | {e} | {c['error'][:120]} | | | | | | | |")
                continue
            print(f"| {t} | {e} | {c['prefill_tok_s']:.1f} | {flops / (args.prompt / c['prefill_tok_s']) / 1e9:.1f} "
                  f"| {c['decode_tok_s']:.2f} | {act / 1e6:.1f} | {roof:.1f} | {100 * c['decode_tok_s'] / roof:.1f}% "
                  f"| {', '.join(f'{x:.1f}' for x in c['decode_ms'])} | {c['tokens'][:6]} |")
        ct, cl = report["cells"][f"{t}/tessera"], report["cells"][f"{t}/llamacpp"]
        if "error" not in ct and "error" not in cl:
            print(f"|  | Tessera / llama.cpp | {ct['prefill_tok_s'] / cl['prefill_tok_s']:.2f}x | "
                  f"| {ct['decode_tok_s'] / cl['decode_tok_s']:.2f}x | | | | | |")
    with open(os.path.join(args.work, "moe_gguf.json"), "w") as fo:
        json.dump(report, fo, indent=1)


if __name__ == "__main__":
    main()
