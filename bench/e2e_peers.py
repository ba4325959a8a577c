"""End to end: Tessera vs onnxruntime-genai vs llama.cpp on the same random-weight checkpoint
(issue "CPU performance", part 3). One command, after `bash bench/setup_peers.sh`:

  python3 bench/e2e_peers.py [--quick] [--only gemma3|gemma4] [--engines tessera,ortgenai,llamacpp]
                             [--cells check,d1024] [--repeat 5]
                             [--threads 2] [--decode-steps 32] [--dtype f32|bf16|q8_0|q4_0|q4_k_m|...]

(it re-executes itself with bench/.peers/venv/bin/python, the peers' venv). Checkpoints
(bench/e2e/checkpoint.py: a Gemma-3-1B shape and the Gemma-4-12B width with 6 layers, f32 random
weights, fixed seed) and each peer's conversion of them (onnxruntime-genai's model builder, fp32 cpu;
llama.cpp's convert_hf_to_gguf.py, f32) are written under bench/.work/ once and reused.

Per checkpoint and engine, each in its own process holding /tmp/tessera-cpu.lock, same thread count,
f32 weights and f32 KV cache everywhere:
- check: greedy tokens on a short prompt vs Tessera's (agreement reported, never fatal);
- prefill tok/s at 512 and 4096 prompt tokens;
- decode tok/s at 1k and 8k context (prefill that many tokens, then time --decode-steps steps); the
  8k run's prefill is reported too, and its peak RSS is Tessera's "8192-token prefill" figure;
- % of the decode roofline: bandwidth measured in this run / (weights + KV bytes per token);
- peak RSS (max over the engine's runs; VmHWM of the peer's worker, Python + numpy included, or
  ru_maxrss of Tessera's CLI process).
--dtype bf16: the same checkpoints rounded to bf16 (a bf16 safetensors copy for Tessera, llama.cpp's
--outtype bf16 GGUF), bf16 KV; Tessera at attention and matmul precision bf16 (a bf16 model's
roundings, AVX-512-BF16 where present); onnxruntime-genai skipped (no bf16 on CPU).
--dtype q8_0|q4_0|q4_k_m|q5_k_m|q4_1|q5_1: llama.cpp's f32 GGUF quantized by llama.cpp's own quantizer
(q5_k_m of the Gemma-3 shape holds Q5_1 where rows of 1152 are not whole 256-blocks); both engines
run that one file (Tessera: `tessera run --model file.gguf`), bf16 KV, attention at precision bf16;
the roofline counts the file's tensor bytes; onnxruntime-genai skipped.
--quick: 2 layers, vocab 8192, prompts 128/512, decode at 256/1024, 8 steps (minutes, development).
Prompts are random ids in [16, 255999), avoiding Gemma's specials and multimodal ids.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from e2e.peers_venv import reexec_in_peers_venv  # noqa: E402

reexec_in_peers_venv("bench/e2e_peers.py")

from e2e import checkpoint, engines, roofline  # noqa: E402

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:7.0f} s] {msg}", flush=True)


def plan(quick):
    if quick:
        return dict(layers={"gemma3": 2, "gemma4": 2}, vocab=8192, prefill=[128, 512], decode=[256, 1024], steps=8,
                    check=(24, 12))
    return dict(layers={"gemma3": 26, "gemma4": 6}, vocab=262144, prefill=[512, 4096], decode=[1024, 8192], steps=32,
                check=(32, 16))


def agreement(ref, got):
    lead = 0
    for a, b in zip(ref, got):
        if a != b:
            break
        lead += 1
    return lead, sum(a == b for a, b in zip(ref, got)), min(len(ref), len(got))


def tessera_kv_f32_bytes(binary, model, context):
    """Tessera's own KV plan (`tessera inspect`, max_chunk 256, f32 column) at `context`."""
    out = subprocess.run([binary, "inspect", "--model", model], capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == str(context):
            return float(parts[1]) * 2**20
    return None


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def median_result(rs):
    """One cell from its repeats: medians of the timed seconds, the worst peak RSS and foreign load."""
    good = [r for r in rs if "error" not in r]
    if not good:
        return rs[0]
    out = dict(good[0])
    for k in ("prefill_s", "decode_s"):
        if all(k in r for r in good):
            out[k] = statistics.median(r[k] for r in good)
    for k in ("maxrss_kb", "foreign_cores"):
        if any(k in r for r in good):
            out[k] = max(r.get(k) or 0 for r in good)
    out["repeats"] = len(good)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["gemma3", "gemma4"])
    ap.add_argument("--engines", default=",".join(engines.ENGINES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-steps", type=int)
    ap.add_argument("--work", default=os.path.join(HERE, ".work"))
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "release", "tessera"))
    ap.add_argument("--tessera-chunk", type=int, default=256, help="tessera run --max-chunk (its default)")
    ap.add_argument("--tessera-matmul-precision", choices=["int8"],
                    help="quantized dtypes: tessera run --matmul-precision int8 (one byte per activation in "
                         "prefill too, llama.cpp's numerics); default: Tessera's f32 (two bytes)")
    ap.add_argument("--dtype", choices=["f32", "bf16"] + list(engines.QUANT_FTYPES), default="f32",
                    help="bf16: a bf16 copy of each checkpoint, bf16 KV; Tessera at attention and matmul precision "
                         "bf16, llama.cpp on its bf16 GGUF (onnxruntime-genai has no bf16 on CPU: skipped); the "
                         "quantized types: one llama.cpp-quantized GGUF for both engines")
    ap.add_argument("--llama-batch", type=int, default=512, help="llama.cpp n_batch = n_ubatch")
    ap.add_argument("--llama-flash-attn", choices=["on", "off"], default="on")
    ap.add_argument("--llama-extra-bufts", choices=["on", "off"], default="on",
                    help="llama.cpp's extra CPU buffer types (AMX / repacked quantized matmuls); llama-cpp-python "
                         "0.3.36 segfaults in its AMX path on quantized GGUFs on AMX CPUs: off there")
    ap.add_argument("--retry-failed", action="store_true", help="retry exports/conversions that failed before")
    ap.add_argument("--prepare-only", action="store_true", help="write checkpoints and conversions, measure nothing")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per measured run")
    ap.add_argument("--max-foreign", type=float, default=0.25,
                    help="rerun a measurement when other processes kept more than this many cores busy")
    ap.add_argument("--retries", type=int, default=2,
                    help="reruns of a disturbed measurement shorter than 4 min (keeps the quietest)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure every cell this many times (engines alternating) and report medians")
    ap.add_argument("--cells", default="",
                    help="only these runs, comma-separated (check, p512, p4096, d1024, d8192); default all")
    args = ap.parse_args()
    cells = {c for c in args.cells.split(",") if c}
    eng = [e for e in args.engines.split(",") if e]
    quant = args.dtype in engines.QUANT_FTYPES
    if args.tessera_matmul_precision and not quant:
        ap.error("--tessera-matmul-precision int8 concerns quantized weights: use it with a quantized --dtype")
    if args.dtype != "f32" and "ortgenai" in eng:
        eng.remove("ortgenai")
        log(f"onnxruntime-genai skipped at --dtype {args.dtype} (its CPU export is f32 here: bench/PEERS.md)")
    for e in eng:
        if e not in engines.ENGINES:
            sys.exit(f"unknown engine {e}; choose from {','.join(engines.ENGINES)}")
    P = plan(args.quick)
    steps = args.decode_steps or P["steps"]
    shapes = [args.only] if args.only else ["gemma3", "gemma4"]
    os.makedirs(args.work, exist_ok=True)

    rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    log(f"tessera {args.tessera} (tree {rev}), threads {args.threads}, decode steps {steps}, engines {eng}")
    probes = []

    def probe():  # bandwidth at the start and after each checkpoint's runs; the roofline uses the best
        with engines.cpu_lock() as lk:
            b0 = engines.busy_seconds()
            t = time.time()
            bw1, gemm = roofline.one_stream()
            bw2 = roofline.multi_stream(args.threads)
            foreign = max(0.0, (engines.busy_seconds() - b0) / (time.time() - t) - 1.0)  # probe ~1 core
        probes.append({"one_stream": bw1, "multi_stream": bw2, "gemm_gflops": gemm, "foreign_cores_approx": foreign})
        log(f"read bandwidth: {bw1:.1f} GB/s one stream (median), {bw2:.1f} GB/s {args.threads} streams (best); "
            f"numpy f32 GEMM {gemm:.1f} GFLOP/s (lock waited {lk.waited:.0f} s)")
        return max(max(p["one_stream"], p["multi_stream"]) for p in probes)

    bw = probe() if not args.prepare_only else 0.0
    report = {"bandwidth_probes": probes, "threads": args.threads, "steps": steps, "quick": args.quick,
              "tree": rev, "shapes": {}}
    tables = []
    for shape in shapes:
        cfg = checkpoint.SHAPES[shape](layers=P["layers"][shape], vocab=P["vocab"])
        tag = f"{shape}-L{P['layers'][shape]}-V{P['vocab']}"
        base = os.path.join(args.work, tag)
        hf = os.path.join(base, "hf")
        t = time.time()
        info = checkpoint.make_checkpoint(hf, cfg, log=log)
        log(f"{tag}: checkpoint ready ({info['total_bytes'] / 2**30:.2f} GiB, {time.time() - t:.0f} s)")
        with open(os.path.join(hf, "config.json")) as f:
            saved_cfg = json.load(f)
        avoid = checkpoint.special_ids(saved_cfg)
        vocab = checkpoint.text_config(cfg)["vocab_size"]
        models, notes = {}, []
        bf16 = args.dtype == "bf16"
        src = checkpoint.bf16_copy(hf, os.path.join(base, "hf-bf16"), log) if bf16 else hf
        qfile = None
        if quant:  # one quantized file for both engines
            qpath = os.path.join(base, f"model.{args.dtype}.gguf")
            f32, why = (None, None) if os.path.exists(qpath) else \
                engines.prepare_llamacpp(hf, os.path.join(base, "model.f32.gguf"), log, args.retry_failed)
            qfile, why = (qpath, None) if os.path.exists(qpath) else \
                engines.prepare_llamacpp_quant(f32, qpath, args.dtype, args.threads, log, args.retry_failed) \
                if f32 else (None, why)
            if not qfile:
                notes.append(f"quantized file: {why}")
                log(f"{tag}: no {args.dtype} file: {why}")
        for e in eng:
            t = time.time()
            if quant:
                if qfile:
                    models[e] = qfile
                continue
            if e == "tessera":
                m, why = engines.prepare_tessera(src, os.path.join(base, "tessera-bf16" if bf16 else "tessera"))
            elif e == "ortgenai":
                m, why = engines.prepare_ortgenai(hf, os.path.join(base, "ortgenai"), args.threads, log,
                                                  args.retry_failed)
            else:
                m, why = engines.prepare_llamacpp(hf, os.path.join(base, f"model.{args.dtype}.gguf"), log,
                                                  args.retry_failed, outtype=args.dtype)
            if m:
                models[e] = m
            else:
                notes.append(f"{e}: {why}")
                log(f"{tag}: {e} unavailable: {why}")
        weight_bytes = engines.gguf_tensor_bytes(qfile) if qfile else info["text_weight_bytes"] // (2 if bf16 else 1)
        kv_elem = 2 if bf16 or quant else 4
        if args.prepare_only:
            log(f"{tag}: prepared {sorted(models)}" + "".join(f"; {n}" for n in notes))
            continue

        def warm(e):  # page cache holds the file an mmap engine will touch (not timed)
            path = os.path.join(src, "model.safetensors") if e == "tessera" and not quant else models[e]
            if e == "ortgenai":
                return
            with open(path, "rb") as f:
                while f.read(1 << 26):
                    pass

        def run(e, ids, decode):
            if e == "tessera":
                mp = ("--matmul-precision", args.tessera_matmul_precision) if args.tessera_matmul_precision else ()
                return engines.run_tessera(args.tessera, models[e], ids, decode, args.threads, args.tessera_chunk,
                                           args.timeout, dtype=args.dtype, extra=mp)
            extra = {"batch": args.llama_batch, "flash_attn": args.llama_flash_attn == "on",
                     "extra_bufts": args.llama_extra_bufts == "on",
                     "kv_type": 30 if bf16 or quant else 0} if e == "llamacpp" \
                else {"window": checkpoint.text_config(saved_cfg)["sliding_window"]}
            return engines.run_peer(e, models[e], ids, decode, args.threads, args.timeout, extra)

        res = {e: {} for e in models}
        cn, csteps = P["check"]
        runs = [("check", cn, csteps)] + [(f"p{n}", n, 1) for n in P["prefill"]] + \
               [(f"d{n}", n, steps) for n in P["decode"]]
        for name, n, dec in runs:  # run-major: engines alternate, so drift hits all alike
            if cells and name not in cells:
                continue
            ids = checkpoint.prompt_ids(n, vocab, avoid)
            samples = {e: [] for e in models}
            for rep in range(args.repeat):  # repeats alternate engines too
                for e in models:
                    r = None
                    for attempt in range(1 + args.retries):
                        warm(e)
                        ri = run(e, ids, dec)
                        if r is None or ("error" in r and "error" not in ri) or \
                                ri.get("foreign_cores", 0) < r.get("foreign_cores", 0):
                            r = ri
                        if "error" in ri or ri.get("foreign_cores", 0) <= args.max_foreign or ri["wall_s"] > 240:
                            break
                        log(f"{tag} {name} {e}: other processes kept {ri['foreign_cores']:.2f} cores busy; rerunning")
                        time.sleep(15)
                    samples[e].append(r)
                    where = f"{tag} {name}{f' #{rep + 1}' if args.repeat > 1 else ''} {e}"
                    if "error" in r:
                        log(f"{where}: FAILED {r['error']}")
                        continue
                    msg = f"{where}: prefill {n} in {r['prefill_s']:.3f} s ({n / r['prefill_s']:.1f} tok/s)"
                    if dec > 1:
                        msg += f", decode {dec - 1} in {r['decode_s']:.3f} s ({(dec - 1) / r['decode_s']:.2f} tok/s)"
                    if "cpu_ratio" in r:
                        msg += f", cpu/wall {r['cpu_ratio']:.2f}, {r['threads_seen']} OS threads"
                    msg += f", foreign load {r.get('foreign_cores', 0):.2f} cores"
                    ref_t = (samples.get("tessera") or [{}])[0].get("tokens") if name == "check" else None
                    if name == "check" and e != "tessera" and ref_t:
                        lead, same, tot = agreement(ref_t, r["tokens"])
                        msg += f", greedy vs Tessera: {lead}/{tot} leading ({same}/{tot} positions)"
                    log(msg + f", peak RSS {r['maxrss_kb'] / 2**20:.2f} GiB, wall {r['wall_s']:.0f} s")
            for e in models:
                res[e][name] = median_result(samples[e])

        # --- table -----------------------------------------------------------------------------------
        bw = probe()
        report["bandwidth_gbs"] = bw
        ctx_rss = P["decode"][-1]
        kv_t = tessera_kv_f32_bytes(args.tessera, models.get("tessera", os.path.join(base, "tessera")), ctx_rss) \
            if "tessera" in models else None
        if kv_t and (bf16 or quant):
            kv_t /= 2
        lines = [f"### {tag}{' at ' + args.dtype if args.dtype != 'f32' else ''}: "
                 f"{'Gemma-3-1B shape' if shape == 'gemma3' else 'Gemma-4-12B width, 6 layers'}"
                 f"{' (quick)' if args.quick else ''}",
                 "",
                 f"{args.dtype} weights {weight_bytes / 2**30:.2f} GiB (text decoder), {'bf16' if quant else args.dtype} KV, "
                 f"{args.threads} threads{', Tessera at attention and matmul precision bf16' if bf16 else ''}"
                 f"{', Tessera at attention precision bf16' if quant else ''}"
                 f"{', matmul precision ' + args.tessera_matmul_precision if args.tessera_matmul_precision else ''}, "
                 f"roofline bandwidth {bw:.1f} GB/s. Decode roofline: "
                 + ", ".join(f"{roofline.decode_roofline(bw, weight_bytes, saved_cfg, n + steps // 2, kv_elem):.2f} "
                             f"tok/s @{n}"
                             for n in P["decode"]),
                 ""]
        pre, dn = P["prefill"], P["decode"]
        hdr = ["engine"] + [f"prefill tok/s @{n}" for n in pre] + [f"prefill tok/s @{dn[-1]}"] + \
              [f"decode tok/s @{n}" for n in dn] + [f"% roofline @{n}" for n in dn] + ["peak RSS GiB", "greedy vs Tessera"]
        lines += ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
        ref = res.get("tessera", {}).get("check", {}).get("tokens")
        for e in models:
            R = res[e]
            ok = lambda k: R.get(k) if R.get(k) and "error" not in R[k] else None  # noqa: E731
            star = lambda k: "*" if ok(k) and ok(k).get("foreign_cores", 0) > args.max_foreign else ""  # noqa: E731
            row = [e]
            for n in pre:
                row.append(fmt(n / ok(f"p{n}")["prefill_s"] if ok(f"p{n}") else None) + star(f"p{n}"))
            k8 = f"d{dn[-1]}"
            row.append(fmt(dn[-1] / ok(k8)["prefill_s"] if ok(k8) else None) + star(k8))
            dec = []
            for n in dn:
                r = ok(f"d{n}")
                dec.append((steps - 1) / r["decode_s"] if r else None)
                row.append(fmt(dec[-1], 2) + star(f"d{n}"))
            for n, d in zip(dn, dec):
                roof = roofline.decode_roofline(bw, weight_bytes, saved_cfg, n + steps // 2, kv_elem)
                row.append(fmt(100 * d / roof if d else None, 0))
            rss = [r["maxrss_kb"] for r in R.values() if r and "maxrss_kb" in r and "error" not in r]
            row.append(fmt(max(rss) / 2**20 if rss else None, 2))
            c = ok("check")
            if e == "tessera" or not c or not ref:
                row.append("(reference)" if e == "tessera" else "—")
            else:
                lead, same, tot = agreement(ref, c["tokens"])
                row.append(f"{lead}/{tot} leading ({same}/{tot} positions)")
            lines.append("| " + " | ".join(row) + " |")
            failed = [f"{k}: {v['error']}" for k, v in R.items() if v and "error" in v]
            if failed:
                notes.append(f"{e} failed runs: " + "; ".join(failed))
        rt = res.get("tessera", {}).get(f"d{ctx_rss}")
        if rt and "error" not in rt and kv_t:
            budget = weight_bytes + kv_t
            lines += ["", f"Tessera peak RSS over the {ctx_rss}-token prefill (+{steps} decode): "
                          f"{rt['maxrss_kb'] * 1024 / 2**30:.2f} GiB vs weights + KV {budget / 2**30:.2f} GiB "
                          f"(weights {weight_bytes / 2**30:.2f} + KV plan {kv_t / 2**30:.2f}, `tessera inspect` "
                          f"f32{' / 2' if bf16 or quant else ''} @{ctx_rss}): {100 * (rt['maxrss_kb'] * 1024 / budget - 1):+.0f}% "
                          f"(target ≤ +25%)"]
        for e in models:
            d = res[e].get("check", {})
            if d and "tokens" in d:
                lines.append(f"- check tokens {e}: {d['tokens']}")
        lines.append(f"- `*`: other processes kept more than {args.max_foreign} cores busy during that run "
                     f"(after {args.retries} reruns); read it as a lower bound")
        if notes:
            lines += [""] + [f"- note: {n}" for n in notes]
        table = "\n".join(lines)
        tables.append(table)
        print("\n" + table + "\n", flush=True)
        report["shapes"][tag] = {"config": saved_cfg, "weight_bytes": weight_bytes, "tessera_kv_bytes": kv_t,
                                 "results": res, "notes": notes}
    if args.prepare_only:
        return
    out = os.path.join(args.work, f"results-{'quick' if args.quick else 'full'}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    log(f"done; results in {out}")
    print("\n\n".join(tables))


if __name__ == "__main__":
    main()
