"""Memory and threads running out give errors, never an abort, a hang or the OOM killer (docs/reliability.md).

Sessions are planned before anything is allocated: options that need more than the process can use are refused at
Model.load with what was asked, what it needs and what there is. Failures are injected in child processes with an
address-space limit (RLIMIT_AS, as `ulimit -v`), so a regression kills the child, not pytest."""
import os
import subprocess
import sys
import textwrap

import pytest

import tessera
from helpers.models import BUILD_DIR, MODELS_DIR, REPO

MODEL = os.path.join(MODELS_DIR, "gemma3")
CLI = os.path.join(BUILD_DIR, "tessera")


def test_session_larger_than_the_machine_is_refused_at_load():
    with pytest.raises(MemoryError) as e:
        tessera.Model.load(MODEL, max_batch=4096, max_context=2**20)
    msg = str(e.value)
    for want in ("max_batch 4096", "max_context 1048576", "needs", "KV cache", "can use"):
        assert want in msg, (want, msg)


def _child(body, limit_extra_mib):
    """Runs `body` in a child Python whose address space is capped at its size after importing tessera plus
    `limit_extra_mib`. Returns (returncode, stdout + stderr)."""
    code = textwrap.dedent(f"""
        import resource, sys
        import numpy as np
        import tessera
        def vm_bytes():
            for line in open("/proc/self/status"):
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
        cap = vm_bytes() + {limit_extra_mib} * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        MODEL = {MODEL!r}
    """) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    return r.returncode, r.stdout + r.stderr


def test_python_survives_out_of_memory_and_thread_exhaustion():
    rc, out = _child("""
        try:  # fits the machine, not the address-space limit: refused at load, naming the limit
            tessera.Model.load(MODEL, max_context=2**22)
            print("NO ERROR for the large context")
        except MemoryError as e:
            print("context:", e)
        try:  # each thread needs a stack; 1000 of them do not fit
            tessera.Model.load(MODEL, max_context=64, num_threads=1000)
            print("NO ERROR for 1000 threads")
        except MemoryError as e:
            print("threads:", e)
        try:
            q = np.zeros((1, 2, 4, 8), np.float32)
            tessera.attention(q, q, q, num_threads=1000)
            print("NO ERROR for attention with 1000 threads")
        except MemoryError as e:
            print("attention:", e)
        m = tessera.Model.load(MODEL, max_context=64, num_threads=2)  # and the interpreter goes on
        print("generated", len(m.generate(np.array([[2, 40, 41]]), 3)[0]))
    """, limit_extra_mib=256)
    assert rc == 0, out
    assert "NO ERROR" not in out, out
    assert "context:" in out and "RLIMIT_AS" in out, out
    assert "threads:" in out and "could not start thread" in out, out
    assert "attention:" in out, out
    assert "generated" in out, out


def test_long_context_cache_costs_only_what_it_holds():
    rc, out = _child("""
        m = tessera.Model.load(MODEL, max_context=2**21, max_chunk=16)   # KV cache of about 1.5 GiB
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        m.forward(np.array([[2, 40, 41]]))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("grew_kib", after - before)
    """, limit_extra_mib=8192)
    assert rc == 0, out
    grew = int(out.split("grew_kib")[1].split()[0])
    assert grew < 200 * 1024, out   # a 3-token prompt touches a few pages of each store, not the cache


@pytest.mark.skipif(not os.path.exists(CLI), reason="the CLI is not built")
def test_cli_reports_thread_exhaustion_instead_of_aborting():
    r = subprocess.run(["bash", "-c", f"ulimit -v 600000; exec {CLI} run --model {MODEL} --ids 2,40,41 "
                                      f"--max-new-tokens 1 --threads 1000"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "could not start thread" in r.stderr, r.stderr
    r = subprocess.run([CLI, "run", "--model", MODEL, "--ids", "2,40,41", "--threads", "5000"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "1024" in r.stderr and "5000" in r.stderr, (r.returncode, r.stderr)
