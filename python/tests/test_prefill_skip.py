"""Prefill skips (docs/runtime.md "Prefill skips") through the Python API, on the tiny checkpoints
whose last layers share K/V (num_kv_shared_layers > 0 in their config): a generation's prefill runs
those layers on each row's last prompt token only. With the skips and without them
(TESSERA_PREFILL_SKIP=0, read when a session is made: every generate call makes one), greedy
generation equals transformers' (the goldens' gen_tokens, image block included), chunked or not,
and sampled generation over a batch of two rows of different lengths is the same on both paths.
forward() reads every token's logits: it never skips (its agreement with transformers is
test_model_conformance.py's).
"""
import json
import os

import pytest

import tessera
from helpers.models import MODELS_DIR, NAMES, load_golden, mm_kwargs


def shared_layers(name):
    with open(os.path.join(MODELS_DIR, name, "config.json")) as f:
        cfg = json.load(f)
    return (cfg.get("text_config") or cfg).get("num_kv_shared_layers") or 0


SHARED = [n for n in NAMES if shared_layers(n) > 0]


def test_some_checkpoints_share_kv():
    assert SHARED == ["gemma4_text", "gemma4"]


def load(name, chunk):
    return tessera.Model.load(os.path.join(MODELS_DIR, name), max_batch=2, max_context=64, max_chunk=chunk)


@pytest.fixture(params=[True, False], ids=["skip", "full"])
def skip(request, monkeypatch):
    if not request.param:
        monkeypatch.setenv("TESSERA_PREFILL_SKIP", "0")
    else:
        monkeypatch.delenv("TESSERA_PREFILL_SKIP", raising=False)
    return request.param


@pytest.mark.parametrize("chunk", [8, 32])
@pytest.mark.parametrize("name", SHARED)
def test_greedy_generation_matches_transformers(name, chunk, skip):
    z = load_golden(name)
    out = load(name, chunk).generate(z["gen_prompt"], 32, stop_tokens=[], **mm_kwargs(z, "gen_"))
    assert out[0] == z["gen_tokens"].tolist()


@pytest.mark.parametrize("name", SHARED)
def test_sampled_batch_is_the_same_on_both_paths(name, monkeypatch):
    z = load_golden(name)
    runs = []
    for env in ("1", "0"):
        monkeypatch.setenv("TESSERA_PREFILL_SKIP", env)
        model = load(name, 8)
        # the goldens' two rows: the second left-padded (shorter); gemma4's hold image blocks
        runs.append(model.generate(z["input_ids"], 12, attention_mask=z["attention_mask"], stop_tokens=[],
                                   temperature=1.0, top_p=0.9, seed=11, **mm_kwargs(z)))
    assert runs[0] == runs[1]
    assert len(runs[0]) == 2 and all(len(r) == 12 for r in runs[0])
