"""Every public entry point may be called from any Python thread at any time (docs/reliability.md):
loading (which repacks weights on the shared thread pool), forward, generate and attention running at once
give each caller exactly the result it gets alone (bitwise)."""
import os
import threading

import numpy as np

import tessera
from helpers.inputs import qkv
from helpers.models import MODELS_DIR

THREADS = 2   # the shared pool every call below uses


def _load(name="gemma4_unified", repack=True):
    return tessera.Model.load(os.path.join(MODELS_DIR, name), max_batch=2, max_context=64, max_chunk=32,
                              num_threads=THREADS, repack=repack)


def _inputs():
    z = np.load(os.path.join(MODELS_DIR, "gemma4_unified", "golden.npz"))
    kw = {k: z[k] for k in ("mm_token_type_ids", "image_embeds")}
    gen = {k: z["gen_" + k] for k in ("mm_token_type_ids", "image_embeds")}
    return z["input_ids"], z["attention_mask"], kw, (z["gen_prompt"], gen)


def _attention_case(seed):
    return qkv(np.random.default_rng(seed), B=1, Hq=4, Hkv=2, S_q=80, S_kv=80, D=32, Dv=32, draw=np.float32)


def _attend(case):
    return tessera.attention(*case, window=(30, 0), kernel="prefill", num_threads=THREADS)


def test_load_forward_generate_attention_at_once_match_alone():
    ids, mask, kw, prompt = _inputs()
    model = _load()
    want_logits = model.forward(ids, mask, **kw)
    want_tokens = model.generate(prompt[0], 8, **prompt[1])
    cases = [_attention_case(s) for s in range(3)]
    want_attn = [_attend(c) for c in cases]
    errors, start = [], threading.Barrier(4)

    def run(fn):
        try:
            start.wait()
            for _ in range(4):
                fn()
        except Exception as e:  # noqa: BLE001 -- reported below with the thread's work
            errors.append(f"{fn.__name__}: {e!r}")

    def loads():
        m = _load()
        assert m.repacked
        np.testing.assert_array_equal(m.forward(ids, mask, **kw), want_logits)

    def forwards():
        assert np.array_equal(model.forward(ids, mask, **kw), want_logits), "forward changed under concurrency"

    def generates():
        assert model.generate(prompt[0], 8, **prompt[1]) == want_tokens, "generate changed under concurrency"

    def attentions():
        for c, w in zip(cases, want_attn):
            assert np.array_equal(_attend(c), w), "attention changed under concurrency"

    workers = [threading.Thread(target=run, args=(f,)) for f in (loads, forwards, generates, attentions)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=300)
        assert not t.is_alive(), "a thread did not finish: deadlock"
    assert not errors, errors


def test_models_loaded_in_parallel_are_identical():
    ids, mask, kw, _ = _inputs()
    out = [None] * 3

    def load(i):
        out[i] = _load().forward(ids, mask, **kw)

    workers = [threading.Thread(target=load, args=(i,)) for i in range(3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=300)
    for o in out:
        assert o is not None and np.array_equal(o, out[0])
