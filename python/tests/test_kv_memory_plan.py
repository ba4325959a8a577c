# tessera.kv.kv_memory_plan: which store each layer gets (dense, ring, shared) and its bytes,
# checked against closed forms for a Gemma 4 12B-like layout.
from __future__ import annotations

import pytest

import tessera.kv as kv

GIB = 1 << 30


def gemma4_12b(context, max_chunk=256, dtype="bf16"):
    layers = []
    for i in range(48):  # every 6th layer (and the last) full
        full = (i + 1) % 6 == 0 or i == 47
        layers.append(("full", 1, 512, 512, 0) if full else ("sliding", 8, 256, 256, 1024))
    return {"layers": layers, "batch": 1, "max_context": context, "max_chunk": max_chunk, "dtype": dtype,
            "num_kv_shared_layers": 0}


def test_kv_memory_plan_gemma4_12b():
    layers, total = kv.kv_memory_plan(gemma4_12b(32768))
    assert len(layers) == 48
    sliding = [p for p in layers if p["kind"] == "sliding"]
    full = [p for p in layers if p["kind"] == "full"]
    assert len(sliding) == 40 and len(full) == 8

    def closed_form(kv_heads, head_dim, slots):  # K + V in bf16, int32 position + block per slot
        return 2 * kv_heads * slots * head_dim * 2 + 8 * slots

    ring_slots = 1024 - 1 + 256
    for p in sliding:
        assert p["store"] == "ring" and p["slots"] == ring_slots and p["owner"] == p["layer"]
        assert 0 <= p["bytes"] - closed_form(8, 256, ring_slots) <= 4 * 63
    for p in full:
        assert p["store"] == "dense" and p["slots"] == 32768
        assert 0 <= p["bytes"] - closed_form(1, 512, 32768) <= 4 * 63
    expected = 40 * closed_form(8, 256, ring_slots) + 8 * closed_form(1, 512, 32768)
    assert 0 <= total - expected <= 48 * 4 * 63
    assert total == sum(p["bytes"] for p in layers)
    assert total <= 0.9 * GIB, f"{total / GIB:.3f} GiB"


def test_kv_memory_plan_sharing_and_errors():
    cfg = gemma4_12b(4096)
    cfg["num_kv_shared_layers"] = 20
    layers, total = kv.kv_memory_plan(cfg)
    shared = [p for p in layers if p["store"] == "shared"]
    assert len(shared) == 20 and all(p["bytes"] == 0 and p["slots"] == 0 for p in shared)
    assert all(layers[p["owner"]]["kind"] == p["kind"] and p["owner"] < 28 for p in shared)
    assert total == sum(p["bytes"] for p in layers)
    # A short context keeps sliding layers dense (the ring would not be smaller).
    small, _ = kv.kv_memory_plan({**gemma4_12b(1024), "max_chunk": 64})
    assert all(p["store"] == "dense" and p["slots"] == 1024 for p in small)
    # Dict layer specs and defaults.
    layers, total = kv.kv_memory_plan({"layers": [{"kind": "sliding", "kv_heads": 2, "head_dim": 64, "window": 8}],
                                       "max_context": 100, "max_chunk": 4, "dtype": "f32"})
    assert layers[0]["slots"] == 11 and total == 2 * 2 * 11 * 64 * 4 + 64 + 64
    with pytest.raises(ValueError, match=r"sliding window 0 < 1"):
        kv.kv_memory_plan({"layers": [("sliding", 1, 8, 8, 0)]})
    with pytest.raises(ValueError, match=r"max_chunk 9 is outside \[1, max_context\]"):
        kv.kv_memory_plan({"layers": [("full", 1, 8, 8)], "max_context": 8, "max_chunk": 9})
    with pytest.raises(ValueError, match=r"kind 'global'"):
        kv.kv_memory_plan({"layers": [("global", 1, 8, 8)]})
    with pytest.raises(ValueError, match=r"unknown config keys \['context'\]"):
        kv.kv_memory_plan({"layers": [("full", 1, 8, 8)], "context": 8})
