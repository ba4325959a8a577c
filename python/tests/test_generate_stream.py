"""Streaming generation through the engine's one loop: Model.generate(on_token=...) and
Model.generate(stream=True) give the tokens of a plain generate() as they are produced, stop a row or
the whole run on request, and match transformers' greedy tokens on the multimodal tiny checkpoint."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import tessera
from helpers.models import MODELS_DIR

MODEL = os.path.join(MODELS_DIR, "gemma4")


@pytest.fixture(scope="module")
def case():
    z = np.load(os.path.join(MODEL, "golden.npz"))
    kwargs = {k: z["gen_" + k] for k in ("mm_token_type_ids", "image_embeds")}
    model = tessera.Model.load(MODEL, max_batch=2, max_context=64, max_chunk=32)
    return model, z, kwargs


def test_stream_yields_transformers_greedy_tokens_in_order(case):
    model, z, kw = case
    want = z["gen_tokens"].tolist()
    got = list(model.generate(z["gen_prompt"], 32, stop_tokens=[], stream=True, **kw))
    assert got == [(0, t) for t in want]


def test_on_token_sees_every_token_and_can_stop_one_row(case):
    model, z, kw = case
    prompt = np.concatenate([z["gen_prompt"], z["gen_prompt"]])
    plain = model.generate(prompt, 6, stop_tokens=[], **_batched(kw))
    seen = []
    out, reasons = model.generate(prompt, 6, stop_tokens=[], on_token=lambda r, t: seen.append((r, t)),
                                  return_finish_reasons=True, **_batched(kw))
    assert out == plain and reasons == ["length", "length"]
    assert [t for r, t in seen if r == 0] == out[0] and [t for r, t in seen if r == 1] == out[1]
    out, reasons = model.generate(prompt, 6, stop_tokens=[], on_token=lambda r, t: r != 0, return_finish_reasons=True,
                                  **_batched(kw))
    assert out[0] == plain[0][:1] and out[1] == plain[1]
    assert reasons == ["cancelled", "length"]


def test_closing_the_stream_stops_generation(case):
    model, z, kw = case
    it = model.generate(z["gen_prompt"], 1000, stop_tokens=[], stream=True, **kw)
    first = [next(it) for _ in range(3)]
    it.close()  # sets the cancel flag and joins the worker: must return promptly
    assert first == [(0, t) for t in z["gen_tokens"].tolist()[:3]]
    assert threading.active_count() < 50  # no stray worker left behind by repeated use
    for _ in range(5):
        it = model.generate(z["gen_prompt"], 1000, stop_tokens=[], stream=True, **kw)
        next(it)
        it.close()
    assert not any(t.name == "tessera-generate" for t in threading.enumerate())


def test_callback_errors_and_bad_arguments(case):
    model, z, kw = case

    def boom(row, token):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        model.generate(z["gen_prompt"], 8, on_token=boom, **kw)
    with pytest.raises(TypeError, match="on_token must be callable"):
        model.generate(z["gen_prompt"], 8, on_token=3, **kw)
    with pytest.raises(ValueError, match="not both"):
        model.generate(z["gen_prompt"], 8, on_token=print, stream=True, **kw)
    # Errors of the generation itself reach the consumer of the stream.
    with pytest.raises(ValueError, match="top_p"):
        list(model.generate(z["gen_prompt"], 8, top_p=2.0, stream=True, **kw))
    # The model still works afterwards.
    assert model.generate(z["gen_prompt"], 4, stop_tokens=[], **kw)[0] == z["gen_tokens"].tolist()[:4]


def _batched(kw):
    # Two copies of the one-row multimodal prompt: image rows twice, token types per row.
    return {k: np.concatenate([v, v]) for k, v in kw.items()}
