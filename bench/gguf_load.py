"""Load time of one GGUF file: Tessera beside llama.cpp (issue 20), page cache warm and cold.

  python3 bench/gguf_load.py FILE.gguf [FILE.gguf ...] [--repeat 3] [--modes warm,cold] [--threads 2]
                             [--tessera build/release/tessera]

(re-executes itself with bench/.peers/venv/bin/python, where llama-cpp-python lives; after
`bash bench/setup_peers.sh --llama-only`). Per file, mode and repeat the engines take turns, each
in its own process, started while holding /tmp/tessera-cpu.lock:

- warm: the file is read once first (its pages in the page cache), as on a second start;
- cold: `sync; echo 3 > /proc/sys/vm/drop_caches` inside the same lock hold, just before the
  process starts (needs root; the run is skipped otherwise), as on the first start after boot.

Two figures per run:
- load: Tessera's `Model::Load` as `tessera run` reports it ("loaded ... in X s": the GGUF parsed,
  tensors mapped and checked, the tokenizer built from the metadata); llama.cpp's
  `llama_model_load_from_file` (mmap on, its extra CPU buffer types off as in the end-to-end bench:
  bench/PEERS.md). Each engine's "the model is ready", not necessarily the same work: Tessera
  checks every quantized block's scales on load, which reads every page of the file; how much of
  the file llama.cpp's loader reads or prefetches at this point is its own choice.
- first token: process start to the first token's logits of a one-token prompt (Tessera: the CLI
  process's wall time, a 64-position context; llama.cpp: model load + a 64-position context + one
  eval, timed in the worker, interpreter start-up and `import llama_cpp` excluded). This puts the
  page faults an mmap'd load defers back in.
Medians over the repeats.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from e2e.peers_venv import reexec_in_peers_venv  # noqa: E402

reexec_in_peers_venv("bench/gguf_load.py")

from e2e import engines  # noqa: E402

LLAMA_WORKER = r"""
import json, sys, time
t0 = time.perf_counter()
import llama_cpp
import llama_cpp.llama_cpp as C
a = json.loads(sys.argv[1])
C.llama_backend_init()
p = C.llama_model_default_params()
p.use_extra_bufts = False
p.use_mmap = True
t1 = time.perf_counter()
m = C.llama_model_load_from_file(a["model"].encode(), p)
t2 = time.perf_counter()
if not m:
    sys.exit("llama_model_load_from_file failed")
cp = C.llama_context_default_params()
cp.n_ctx = 64
cp.n_batch = 64
cp.n_ubatch = 64
cp.n_threads = cp.n_threads_batch = a["threads"]
ctx = C.llama_init_from_model(m, cp)
tok = (C.llama_token * 1)(2)
rc = C.llama_decode(ctx, C.llama_batch_get_one(tok, 1))
C.llama_get_logits_ith(ctx, -1)
t3 = time.perf_counter()
print("RESULT " + json.dumps({"load_s": t2 - t1, "first_s": t3 - t1, "import_s": t1 - t0, "rc": rc}), flush=True)
"""
TESSERA_LOAD = re.compile(r"loaded .* in ([\d.]+) s")


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 26):
            pass


def run_one(engine, path, args, cold):
    """One measured process inside one hold of the CPU lock (the cache drop in the same hold)."""
    with engines.cpu_lock():
        if cold:
            drop_caches()
        else:
            warm(path)
        if engine == "tessera":
            cmd = [args.tessera, "run", "--model", path, "--ids", "2", "--max-new-tokens", "1", "--max-context", "64",
                   "--threads", str(args.threads), "--no-stop"]
            rc, out, err, _, wall = engines.run_measured(cmd, args.timeout, lock=False)
            m = TESSERA_LOAD.search(err + out)
            if rc != 0 or not m:
                return {"error": engines.tail(err + out)}
            return {"load_s": float(m.group(1)), "first_s": wall, "foreign": engines.LAST_FOREIGN[0]}
        cmd = [sys.executable, "-c", LLAMA_WORKER, json.dumps({"model": path, "threads": args.threads})]
        rc, out, err, _, wall = engines.run_measured(cmd, args.timeout, lock=False)
        line = [l for l in out.splitlines() if l.startswith("RESULT ")]
        if rc != 0 or not line:
            return {"error": engines.tail(err + out)}
        r = json.loads(line[-1][len("RESULT "):])
        r["foreign"] = engines.LAST_FOREIGN[0]
        return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", default="warm,cold")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "release", "tessera"))
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if "cold" in modes and os.geteuid() != 0:
        print("cold runs need root (drop_caches): skipped", flush=True)
        modes.remove("cold")
    rows = []
    for path in args.files:
        size = os.path.getsize(path)
        for mode in modes:
            got = {"tessera": [], "llamacpp": []}
            for rep in range(args.repeat):
                for e in got:
                    r = run_one(e, path, args, mode == "cold")
                    got[e].append(r)
                    print(f"{os.path.basename(path)} {mode} #{rep + 1} {e}: " +
                          (r["error"] if "error" in r else
                           f"load {r['load_s']:.3f} s, first token {r['first_s']:.3f} s, "
                           f"other load {r['foreign']:.2f} cores"), flush=True)
            for e, rs in got.items():
                ok = [r for r in rs if "error" not in r]
                med = lambda k: statistics.median(r[k] for r in ok) if ok else None  # noqa: E731
                rows.append((os.path.basename(path), size / 2**30, mode, e, med("load_s"), med("first_s"), len(ok),
                             max((r["foreign"] for r in ok), default=0.0)))
    print("\n| file | GiB | page cache | engine | load s | first token s | runs | max other load (cores) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for f, gib, mode, e, ld, ft, n, fo in rows:
        fmt = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
        print(f"| {f} | {gib:.2f} | {mode} | {e} | {fmt(ld)} | {fmt(ft)} | {n} | {fo:.2f} |")


if __name__ == "__main__":
    main()
