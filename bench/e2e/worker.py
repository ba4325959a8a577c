"""One measured run of a peer engine, in its own process (so its peak RSS is its own).

  python bench/e2e/worker.py '{"engine": "llamacpp"|"ortgenai", "model": PATH, "ids": [...],
                               "decode": N, "threads": T, "context": C}'

Prefills `ids`, then decodes `decode` greedy tokens (argmax), and prints one JSON line:
prefill_s, decode_s (the N-1 forwards after the first sampled token, as `tessera run` counts),
tokens (the greedy ids), cpu_ratio (process CPU time / wall time over prefill: shows how many
threads did the work), maxrss_kb (VmHWM at the end), threads_seen (OS threads of the process).
Imports only the engine's own package and numpy (no torch), so RSS is the engine's (plus the
Python interpreter and numpy, ~30 MB). Each peer first runs an untimed 8-token warm-up.
`{"engine": "exec", "cmd": [...]}` runs a command instead and reports its peak RSS (Tessera).
"""
import json
import os
import resource
import sys
import time

import numpy as np


def cpu_time():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def vm_hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def n_threads():
    return len(os.listdir("/proc/self/task"))


def no_extra_buffer_types():
    """Models loaded after this call go without llama.cpp's extra CPU buffer types (its AMX and
    repacked quantized matmuls): on the project's Intel VM llama-cpp-python 0.3.36 segfaults in the
    AMX path on quantized GGUFs (bench/PEERS.md)."""
    import llama_cpp.llama_cpp as C
    default = C.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    C.llama_model_default_params = params


def run_llamacpp(a):
    import llama_cpp
    if not a.get("extra_bufts", True):
        no_extra_buffer_types()
    llm = llama_cpp.Llama(model_path=a["model"], n_ctx=a["context"], n_threads=a["threads"],
                          n_threads_batch=a["threads"], n_batch=a.get("batch", 512),
                          n_ubatch=a.get("batch", 512), logits_all=False, verbose=False,
                          flash_attn=a.get("flash_attn", True), type_k=a.get("kv_type", 0),
                          type_v=a.get("kv_type", 0),  # GGML_TYPE_F32 (0) or GGML_TYPE_BF16 (30) KV
                          swa_full=False,  # sliding layers keep window + batch keys, as llama.cpp's CLI does
                          use_mmap=True)
    nv = llm.n_vocab()
    llm.eval(a["ids"][:8])  # warm-up (not timed): first graph build and allocations
    llm.reset()

    def last_logits():
        p = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(p, shape=(nv,))

    ids = a["ids"]
    c0, t0 = cpu_time(), time.perf_counter()
    llm.eval(ids)
    t1 = time.perf_counter()
    c1 = cpu_time()
    out = [int(np.argmax(last_logits()))]
    t2 = time.perf_counter()
    for _ in range(a["decode"] - 1):
        llm.eval([out[-1]])
        out.append(int(np.argmax(last_logits())))
    t3 = time.perf_counter()
    return dict(prefill_s=t1 - t0, decode_s=t3 - t2, tokens=out, cpu_ratio=(c1 - c0) / (t1 - t0),
                threads_seen=n_threads(), flash_attn=a.get("flash_attn", True))


def run_ortgenai(a):
    import onnxruntime_genai as og
    cfg = og.Config(a["model"])
    # intra-op threads of the decoder session (also written into genai_config.json by the export)
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": a["threads"], "inter_op_num_threads": 1}}}}))
    model = og.Model(cfg)
    ids = a["ids"]
    # the sliding layers' windowed cache needs a capacity of at least the window
    total = max(len(ids) + a["decode"], a.get("window", 0))

    def generator():
        p = og.GeneratorParams(model)
        p.set_search_options(max_length=total, min_length=total, do_sample=False, batch_size=1)
        return og.Generator(model, p)

    g = generator()  # warm-up (not timed): first run of the session
    g.append_tokens(np.asarray(ids[:8], dtype=np.int32))
    g.generate_next_token()
    g.generate_next_token()
    del g
    g = generator()
    c0, t0 = cpu_time(), time.perf_counter()
    g.append_tokens(np.asarray(ids, dtype=np.int32))
    t1 = time.perf_counter()
    c1 = cpu_time()
    # generate_next_token: pick the argmax of the current logits, then run the model on it
    g.generate_next_token()
    out = [int(g.get_next_tokens()[0])]
    t2 = time.perf_counter()
    for _ in range(a["decode"] - 1):
        g.generate_next_token()
        out.append(int(g.get_next_tokens()[0]))
    t3 = time.perf_counter()
    # the first generate_next_token above only samples (the prefill computed its logits): the
    # N-1 later calls are the N-1 decode forwards, as for the other engines
    return dict(prefill_s=t1 - t0, decode_s=t3 - t2, tokens=out, cpu_ratio=(c1 - c0) / (t1 - t0),
                threads_seen=n_threads())


def run_exec(a):
    """Runs a["cmd"] (Tessera's CLI) as this small process's child: its peak RSS is
    RUSAGE_CHILDREN's ru_maxrss here, free of the driver's own (a child forked from a big process
    starts with that process's high-water mark)."""
    import subprocess
    p = subprocess.run(a["cmd"], capture_output=True, text=True)
    return dict(rc=p.returncode, stdout=p.stdout, stderr=p.stderr[-4000:],
                maxrss_kb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def main():
    a = json.loads(sys.argv[1])
    if a["engine"] == "exec":
        print("RESULT " + json.dumps(run_exec(a)), flush=True)
        return
    r = {"llamacpp": run_llamacpp, "ortgenai": run_ortgenai}[a["engine"]](a)
    r["maxrss_kb"] = vm_hwm_kb()
    print("RESULT " + json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
