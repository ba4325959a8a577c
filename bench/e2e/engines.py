"""Preparing and running each engine of the end-to-end benchmark (bench/e2e_peers.py).

Preparation is cached under the work dir (skipped when its output exists): the Tessera view of the
checkpoint (symlinks without tokenizer.model, so `tessera run` prints ids), the onnxruntime-genai
export (bench/e2e/ortgenai_build.py, fp32, cpu) and the llama.cpp GGUF (convert_hf_to_gguf.py from
the llama-cpp-python sdist, --outtype f32). A failed export leaves FAILED with its reason and is not
retried unless asked. Every measured run is its own process, started while holding the shared CPU
lock; its peak RSS is VmHWM of the peer's worker process (bench/e2e/worker.py) or, for Tessera's
CLI, RUSAGE_CHILDREN's ru_maxrss in a small worker that runs it.
"""
import fcntl
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PEERS = os.path.join(ROOT, "bench", ".peers")
SDIST = os.path.join(PEERS, "llama-sdist", "vendor", "llama.cpp")
LOCK = os.environ.get("TESSERA_CPU_LOCK", "/tmp/tessera-cpu.lock")
ENGINES = ("tessera", "ortgenai", "llamacpp")


class cpu_lock:
    """flock(2) on the shared lock file, as `flock /tmp/tessera-cpu.lock CMD` takes it."""

    def __enter__(self):
        self.f = open(LOCK, "a")
        t = time.time()
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # say so: under `flock LOCK python bench/...` this wait never ends
            print(f"[bench] waiting for {LOCK} (the benches take it themselves: do not wrap them in flock)",
                  file=sys.stderr, flush=True)
            fcntl.flock(self.f, fcntl.LOCK_EX)
        self.waited = time.time() - t
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def busy_seconds():
    """CPU seconds the whole machine spent busy so far (/proc/stat, all cores)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


LAST_FOREIGN = [0.0]  # cores busy with other processes during the last run_measured


def run_measured(cmd, timeout, env=None, lock=True):
    """Runs cmd; returns (rc, stdout, stderr, maxrss_kb, wall_s). LAST_FOREIGN[0] gets the CPU load
    of everything else on the machine meanwhile, in cores (machine busy time minus the run's own)."""
    import tempfile

    def go():
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            b0 = busy_seconds()
            t0 = time.perf_counter()
            p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
            deadline = t0 + timeout
            while True:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    p.kill()
                    pid, status, ru = os.wait4(p.pid, 0)
                    break
                time.sleep(0.05)
            p.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - t0
            own = ru.ru_utime + ru.ru_stime
            LAST_FOREIGN[0] = max(0.0, (busy_seconds() - b0 - own) / wall)
            out.seek(0)
            err.seek(0)
            return p.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"), ru.ru_maxrss, wall

    if not lock:
        return go()
    with cpu_lock():
        return go()


def tail(text, n=3):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:])[-400:]


# --- preparation ------------------------------------------------------------------------------------
def prepare_tessera(hf, out):
    os.makedirs(out, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        dst = os.path.join(out, f)
        if not os.path.lexists(dst):
            os.symlink(os.path.abspath(os.path.join(hf, f)), dst)  # (a relative hf would leave it dangling)
    return out, None


def prepare_ortgenai(hf, out, threads, log, retry=False):
    cfgp = os.path.join(out, "genai_config.json")
    failed = os.path.join(out, "FAILED")
    if os.path.exists(failed) and not retry:
        return None, open(failed).read().strip()
    if not os.path.exists(cfgp):
        os.makedirs(out, exist_ok=True)
        log(f"onnxruntime-genai: exporting {hf} -> {out} (fp32, cpu, prune_lm_head, shared_embeddings)")
        cmd = [sys.executable, os.path.join(HERE, "ortgenai_build.py"), "-i", hf, "-o", out, "-p", "fp32",
               "-e", "cpu", "-c", os.path.join(out, "..", "ortgenai-cache"),
               "--extra_options", "prune_lm_head=true", "shared_embeddings=true"]
        rc, so, se, rss, wall = run_measured(cmd, timeout=3 * 3600)
        log(f"onnxruntime-genai export: rc {rc}, {wall:.0f} s, peak RSS {rss / 2**20:.1f} GiB")
        if rc != 0 or not os.path.exists(cfgp):
            why = f"export failed (rc {rc}{', killed: out of memory?' if rc in (-9, 137) else ''}, " \
                  f"peak RSS {rss / 2**20:.1f} GiB): {tail(se + so)}"
            with open(failed, "w") as f:
                f.write(why + "\n")
            return None, why
    with open(cfgp) as f:
        gc = json.load(f)
    so = gc["model"]["decoder"].setdefault("session_options", {})
    if so.get("intra_op_num_threads") != threads:
        so["intra_op_num_threads"] = threads
        so["inter_op_num_threads"] = 1
        with open(cfgp, "w") as f:
            json.dump(gc, f, indent=4)
    return out, None


def _make_file(out_file, cmd, what, log, retry, env=None):
    """Runs cmd to write out_file + ".part", renamed into place on success; a failure leaves
    out_file + ".FAILED" with its reason, not retried unless asked."""
    failed = out_file + ".FAILED"
    if os.path.exists(failed) and not retry:
        return None, open(failed).read().strip()
    if not os.path.exists(out_file):
        rc, so, se, rss, wall = run_measured(cmd, timeout=3 * 3600, env=env)
        log(f"llama.cpp {what}: rc {rc}, {wall:.0f} s, peak RSS {rss / 2**20:.1f} GiB")
        if rc != 0:
            why = f"{what} failed (rc {rc}): {tail(se + so)}"
            with open(failed, "w") as f:
                f.write(why + "\n")
            return None, why
        os.replace(out_file + ".part", out_file)
    return out_file, None


def prepare_llamacpp(hf, out_file, log, retry=False, outtype="f32"):
    if not os.path.exists(out_file):
        log(f"llama.cpp: converting {hf} -> {out_file} (--outtype {outtype})")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(SDIST, "gguf-py"), SDIST]))
    cmd = [sys.executable, os.path.join(SDIST, "convert_hf_to_gguf.py"), hf, "--outtype", outtype,
           "--outfile", out_file + ".part"]
    return _make_file(out_file, cmd, "convert", log, retry, env)


# llama.cpp's llama_ftype numbers
QUANT_FTYPES = {"q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q5_k_m": 17, "q4_1": 3, "q5_1": 9}

QUANTIZE_SCRIPT = """
import sys, ctypes, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = int(sys.argv[3])
p.nthread = int(sys.argv[4])
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))
"""


def prepare_llamacpp_quant(f32_gguf, out_file, qtype, threads, log, retry=False):
    """llama.cpp's own quantizer (llama_model_quantize, no importance matrix) on the f32 GGUF: the
    file users get from `llama-quantize model.f32.gguf out.gguf Q4_K_M`. Both engines run it."""
    if not os.path.exists(out_file):
        log(f"llama.cpp: quantizing {f32_gguf} -> {out_file} ({qtype})")
    cmd = [sys.executable, "-c", QUANTIZE_SCRIPT, f32_gguf, out_file + ".part", str(QUANT_FTYPES[qtype]), str(threads)]
    return _make_file(out_file, cmd, "quantize", log, retry)


def gguf_tensor_bytes(path):
    """Bytes of a GGUF's tensors (the weights a decode step streams, the tied embedding once)."""
    sys.path.insert(0, os.path.join(SDIST, "gguf-py"))
    import gguf  # the sdist's gguf-py, matching its converter

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)


# --- one measured run -----------------------------------------------------------------------------------
TESSERA_LINE = re.compile(r"prefill (\d+) tokens in ([\d.]+) s .*decode (\d+) tokens in ([\d.]+) s")


def run_tessera(binary, model, ids, decode, threads, chunk, timeout, dtype="f32", env=None, extra=()):
    """dtype bf16: a bf16 checkpoint, bf16 KV, attention and matmuls at precision bf16. A quantized
    dtype (QUANT_FTYPES): `model` is the GGUF file, bf16 KV, attention at precision bf16.
    env: the environment of the run (None: this process's); extra: more `tessera run` arguments."""
    ctx = len(ids) + decode
    cmd = [binary, "run", "--model", model, "--ids", ",".join(map(str, ids)), "--max-new-tokens", str(decode),
           "--max-context", str(ctx), "--threads", str(threads),
           "--kv-dtype", dtype if dtype in ("f32", "bf16") else "bf16", "--no-stop",
           "--max-chunk", str(chunk), *extra]
    if dtype == "bf16":
        cmd += ["--attention-precision", "bf16", "--matmul-precision", "bf16"]
    elif dtype != "f32":
        cmd += ["--attention-precision", "bf16"]
    w = [sys.executable, os.path.join(HERE, "worker.py"), json.dumps({"engine": "exec", "cmd": cmd})]
    rc, wo, we, _, wall = run_measured(w, timeout, env=env)
    line = [l for l in wo.splitlines() if l.startswith("RESULT ")]
    if rc != 0 or not line:
        return {"error": f"worker rc {rc}: {tail(we + wo)}", "wall_s": wall}
    r = json.loads(line[-1][len("RESULT "):])
    rc, so, se, rss = r["rc"], r["stdout"], r["stderr"], r["maxrss_kb"]
    m = TESSERA_LINE.search(se)
    if rc != 0 or not m:
        return {"error": f"rc {rc}: {tail(se)}", "maxrss_kb": rss, "wall_s": wall}
    toks = [int(t) for t in so.split()]
    return {"prefill_s": float(m.group(2)), "decode_s": float(m.group(4)), "tokens": toks, "maxrss_kb": rss,
            "wall_s": wall, "foreign_cores": LAST_FOREIGN[0]}


def run_peer(engine, model, ids, decode, threads, timeout, extra=None):
    a = dict(engine=engine, model=model, ids=list(map(int, ids)), decode=decode, threads=threads,
             context=len(ids) + decode, **(extra or {}))
    rc, so, se, rss, wall = run_measured([sys.executable, os.path.join(HERE, "worker.py"), json.dumps(a)], timeout)
    line = [l for l in so.splitlines() if l.startswith("RESULT ")]
    if rc != 0 or not line:
        return {"error": f"rc {rc}{' (killed: out of memory?)' if rc in (-9, 137) else ''}: {tail(se + so)}",
                "maxrss_kb": rss, "wall_s": wall}
    r = json.loads(line[-1][len("RESULT "):])
    r["wall_s"], r["foreign_cores"] = wall, LAST_FOREIGN[0]  # maxrss_kb: the worker's own VmHWM
    return r
