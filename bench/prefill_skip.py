"""Time to first token with and without the prefill skips (docs/runtime.md "Prefill skips") on a
Gemma-4-E2B-shaped model, beside llama.cpp on the same weights.

  .venv/bin/python bench/prefill_skip.py [--prompts 512,2048] [--runs 3] [--threads 2]
                                                    [--engines tessera,llamacpp] [--quick]

The model: bench/e2e/checkpoint.py's `gemma4_e2b` (E2B's real widths and 35 layers, 20 of them
KV-shared; random bf16 weights, fixed seed) under bench/.work/, and llama.cpp's bf16 GGUF of it
(convert_hf_to_gguf.py from the llama-cpp-python sdist that `bash bench/setup_peers.sh --llama-only`
fetches; run with this interpreter, which has torch and transformers). Both written once, reused.
With llama.cpp, both engines read that one GGUF (Tessera with --dtype bf16: the converter keeps a few
small matrices f32, and rounding them gives back the checkpoint's bf16 values); once it exists the
checkpoint's model.safetensors may be deleted (its READY and config.json stay), which the 9 GB of a
second copy of the weights on a small disk may need. Without llama.cpp, Tessera reads the checkpoint.

Runs, each a whole process holding /tmp/tessera-cpu.lock, alternating within every repeat and
prompt length: Tessera without the skips (TESSERA_PREFILL_SKIP=0), Tessera with them, llama.cpp
(llama-cpp-python in bench/.peers/venv, bench/e2e/worker.py). Tessera: `tessera run`, bf16 weights
repacked at load, bf16 KV, attention and matmuls at precision bf16, max_chunk 256, one new token; its
"prefill N tokens in X s" is the time to first token (the first token is sampled from those logits).
llama.cpp: bf16 GGUF, bf16 KV, n_batch 512, flash attention; the timed llm.eval(prompt) likewise.
Prompts: the same random ids for every engine. Reports medians over the repeats, the first generated
token of each engine, the other processes' CPU load during each run, and writes JSON to
bench/.work/prefill_skip.json.
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
from e2e import checkpoint, engines  # noqa: E402

PEERS_PY = os.path.join(HERE, ".peers", "venv", "bin", "python")
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:7.0f} s] {msg}", flush=True)


def run_llamacpp(gguf, ids, threads, timeout):
    a = dict(engine="llamacpp", model=gguf, ids=list(map(int, ids)), decode=1, threads=threads,
             context=len(ids) + 1, kv_type=30, batch=512, flash_attn=True)
    rc, so, se, rss, wall = engines.run_measured([PEERS_PY, os.path.join(HERE, "e2e", "worker.py"), json.dumps(a)],
                                                 timeout)
    line = [l for l in so.splitlines() if l.startswith("RESULT ")]
    if rc != 0 or not line:
        return {"error": f"rc {rc}: {engines.tail(se + so)}", "wall_s": wall}
    r = json.loads(line[-1][len("RESULT "):])
    r["wall_s"], r["foreign_cores"] = wall, engines.LAST_FOREIGN[0]
    return r


def run_tessera(binary, model, ids, threads, skip, timeout):
    env = dict(os.environ, TESSERA_PREFILL_SKIP="1" if skip else "0")
    extra = ("--dtype", "bf16") if model.endswith(".gguf") else ()
    return engines.run_tessera(binary, model, ids, 1, threads, 256, timeout, dtype="bf16", env=env, extra=extra)


def cell(rs):
    good = [r for r in rs if "error" not in r]
    if not good:
        return {"error": rs[0].get("error", "no run")}
    return {"ttft_s": statistics.median(r["prefill_s"] for r in good), "runs": [r["prefill_s"] for r in good],
            "first_token": good[0]["tokens"][0] if good[0].get("tokens") else None,
            "foreign_cores": max(r.get("foreign_cores") or 0 for r in good),
            "maxrss_gib": max(r.get("maxrss_kb") or 0 for r in good) / 2**20}


def prepare(work, quick, engs):
    cfg = checkpoint.gemma4_e2b_config(layers=10 if quick else 35, vocab=8192 if quick else 262144)
    tag = "gemma4_e2b" + ("-quick" if quick else "")
    hf = os.path.join(work, tag, "hf-bf16")
    t = time.time()
    info = checkpoint.make_checkpoint(hf, cfg, log=log, dtype="bf16")
    log(f"{tag}: checkpoint ready ({info['total_bytes'] / 2**30:.2f} GiB bf16, {time.time() - t:.0f} s)")
    tess, _ = engines.prepare_tessera(hf, os.path.join(work, tag, "tessera"))
    gguf, why = None, "not asked for"
    if "llamacpp" in engs:
        if not os.path.exists(PEERS_PY):
            why = "llama.cpp not installed (bash bench/setup_peers.sh --llama-only)"
        else:
            gguf, why = engines.prepare_llamacpp(hf, os.path.join(work, tag, "model.bf16.gguf"), log, outtype="bf16")
    if not gguf and "llamacpp" in engs:
        log(f"llama.cpp skipped: {why}")
    if gguf:
        tess = gguf
    with open(os.path.join(hf, "config.json")) as f:
        avoid = checkpoint.special_ids(json.load(f))
    return cfg, tess, gguf, why, avoid


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", default="512,2048")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engines", default="tessera,llamacpp")
    ap.add_argument("--quick", action="store_true", help="10 layers, vocab 8192 (a smoke test of the script)")
    ap.add_argument("--work", default=os.path.join(HERE, ".work"))
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "release", "tessera"))
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()
    engs = args.engines.split(",")
    lengths = [int(x) for x in args.prompts.split(",")]
    cfg, tess, gguf, why, avoid = prepare(args.work, args.quick, engs)
    vocab = cfg["vocab_size"]
    variants = [v for v in ("tessera-full", "tessera-skip", "llamacpp")
                if v.split("-")[0] in engs and (v != "llamacpp" or gguf)]
    rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    report = {"tree": rev, "threads": args.threads, "cpu": platform.processor() or platform.machine(),
              "date": time.strftime("%Y-%m-%d %H:%M"), "llamacpp_skipped": None if gguf else why,
              "load_before": os.getloadavg(), "cells": {}}
    raw = {(n, v): [] for n in lengths for v in variants}
    for rep in range(args.runs):
        for n in lengths:
            ids = checkpoint.prompt_ids(n, vocab, avoid)
            for v in variants:
                if v == "llamacpp":
                    r = run_llamacpp(gguf, ids, args.threads, args.timeout)
                else:
                    r = run_tessera(args.tessera, tess, ids, args.threads, v.endswith("skip"), args.timeout)
                raw[(n, v)].append(r)
                state = r.get("error") or f"TTFT {r['prefill_s']:.2f} s, others' load {r['foreign_cores']:.2f} cores"
                log(f"run {rep + 1}/{args.runs}, {n} tokens, {v}: {state}")
    report["load_after"] = os.getloadavg()
    print(f"\n| prompt | {' | '.join(variants)} | skip speed-up |\n|---|" + "---|" * (len(variants) + 1))
    for n in lengths:
        cells = {v: cell(raw[(n, v)]) for v in variants}
        report["cells"][str(n)] = cells
        ttft = {v: c.get("ttft_s") for v, c in cells.items()}
        gain = ttft["tessera-full"] / ttft["tessera-skip"] if ttft.get("tessera-full") and ttft.get("tessera-skip") \
            else None
        row = " | ".join(f"{ttft[v]:.2f} s" if ttft[v] else cells[v]["error"][:60] for v in variants)
        print(f"| {n} | {row} | {f'{gain:.2f}x' if gain else '—'} |")
    for n in lengths:
        cells = report["cells"][str(n)]
        print(f"{n} tokens, first token: " + ", ".join(f"{v} {cells[v].get('first_token')}" for v in variants) +
              "; others' load (cores, worst run): " +
              ", ".join(f"{v} {cells[v].get('foreign_cores', 0):.2f}" for v in variants))
    with open(os.path.join(args.work, "prefill_skip.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report["cells"], indent=1))


if __name__ == "__main__":
    main()
