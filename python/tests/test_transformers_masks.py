"""Tessera's structured mask == the attention masks transformers builds for Gemma 3 / Gemma 4 (multimodal).

(a) goldens: tests/testdata/masks/*.npz hold masks recorded from transformers' own models by
    python/scripts/make_mask_goldens.py; tessera.attention_bias with tessera.hf arguments must equal them
    exactly (no torch needed).
(b) live (needs torch + transformers): the golden cases are regenerated in-process and must equal both the
    committed files and Tessera; randomized cases (fixed seeds) are compared with Tessera.
(c) tessera.attention with the same arguments == numpy softmax attention (helpers/reference.py) using
    transformers' float mask as an additive bias (so the kernels use the mask that attention_bias exports).
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os

import numpy as np
import pytest

import tessera
import tessera.hf as hf
from helpers import reference
from helpers.inputs import qkv
from helpers.models import REPO

GOLDEN_DIR = os.path.join(REPO, "tests", "testdata", "masks")
SCRIPT = os.path.join(REPO, "python", "scripts", "make_mask_goldens.py")
GOLDENS = sorted(glob.glob(os.path.join(GOLDEN_DIR, "*.npz")))
FMIN = np.finfo(np.float32).min


def _load(path):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    return arrays, json.loads(str(arrays["meta"]))


def _layers(arrays, meta):
    """Yields (label, tessera kwargs, B, S_q, S_kv, transformers float mask, transformers bool mask)."""
    am = arrays.get("attention_mask")
    tt = arrays.get("token_type_ids")
    B = int(arrays["batch"])
    for s, st in enumerate(meta["steps"]):
        for kind, lay in st["layers"].items():
            args = hf.gemma_mask_args(
                None if am is None else am[:, :st["total"]],
                tt[:, :st["total"]] if (tt is not None and st["token_types_passed"]) else None,
                model=meta["tessera_model"], layer=kind, sliding_window=meta["sliding_window"],
                bidirectional=meta["bidirectional"], batch=B, q_offset=st["q_offset"], q_len=st["q_len"],
                kv_offset=lay["kv_offset"], kv_len=lay["kv_len"])
            label = f"{meta['name']} step {s} ({st['q_offset']}+{st['q_len']}) {kind}"
            yield label, args, B, st["q_len"], lay["kv_len"], arrays[f"s{s}_{kind}_float"], arrays[f"s{s}_{kind}_bool"]


def _describe_diff(got_vis, ref_vis):
    b, _, i, j = np.argwhere(got_vis != ref_vis)[0]
    return (f"{int((got_vis != ref_vis).sum())} entries differ; first at batch {b}, query {i}, key {j}: "
            f"tessera visible={bool(got_vis[b, 0, i, j])}, transformers visible={bool(ref_vis[b, 0, i, j])}")


def _check_arrays(arrays, meta):
    n = 0
    for label, args, B, S_q, S_kv, ref_f, ref_b in _layers(arrays, meta):
        assert ref_f.shape == (B, 1, S_q, S_kv) and ref_b.shape == ref_f.shape, label
        got = tessera.attention_bias(B, S_q, S_kv, masked_value=FMIN, **args)
        got_vis = got == 0
        assert np.array_equal(got_vis, ref_b), f"{label}: visible pattern differs: {_describe_diff(got_vis, ref_b)}"
        assert got.dtype == ref_f.dtype == np.float32, label
        assert np.array_equal(got, ref_f), f"{label}: float mask differs"
        n += 1
    return n


# ---------------------------------------------------------------------------------------------- (a) goldens

def test_goldens_exist_and_are_small():
    assert len(GOLDENS) >= 10, f"expected the committed goldens in {GOLDEN_DIR}"
    total = sum(os.path.getsize(p) for p in GOLDENS)
    assert total < 1_000_000, f"goldens take {total} bytes"


@pytest.mark.parametrize("path", GOLDENS, ids=[os.path.basename(p)[:-4] for p in GOLDENS])
def test_golden_mask_equals_transformers(path):
    arrays, meta = _load(path)
    assert meta["transformers"] and meta["torch"], "versions must be recorded"
    # The recorded float form is transformers' eager mask: 0 / float32 min only, and bool == (float == 0).
    for k, v in arrays.items():
        if k.endswith("_float"):
            assert np.all((v == 0) | (v == FMIN)), k
            assert np.array_equal(arrays[k[:-6] + "_bool"], v == 0), k
    assert _check_arrays(arrays, meta) >= 2


def test_goldens_cover_the_cases():
    """The committed set must keep exercising the cases the mapping has to get right."""
    metas = [_load(p) for p in GOLDENS]
    flags = {(m["tessera_model"], m["hf"], str(m["bidirectional"])) for _, m in metas}
    for want in [("gemma3", "gemma3", "False"), ("gemma3", "gemma3_text", "True"), ("gemma4", "gemma4", "vision"),
                 ("gemma4", "gemma4", "None"), ("gemma4", "gemma4", "all"),
                 ("gemma4_unified", "gemma4_unified", "vision"), ("gemma4_unified_forward", "gemma4_unified", "vision")]:
        assert want in flags, want
    # gemma4_unified goldens follow generation (path "generate"), through chunked prefill and decode too
    unified = [(a, m) for a, m in metas if m["tessera_model"] == "gemma4_unified"]
    assert all(m["path"] in ("generate", "create_masks_for_generate") for _, m in unified)
    assert any(sum(not st["decode"] for st in m["steps"]) > 1 for _, m in unified)
    assert any(st["decode"] for _, m in unified for st in m["steps"])
    left = right = hole = chunked = decode = small_w = large_w = adjacent = edge_blocks = 0
    for arrays, m in metas:
        S = m["prefill_len"]
        am = arrays.get("attention_mask")
        if am is not None:
            for row in am[:, :S].astype(bool):
                valid = np.flatnonzero(row)
                left |= not row[0]
                right |= not row[-1]
                hole |= valid.size > 0 and row[0] and valid[-1] - valid[0] + 1 != valid.size
        chunked |= sum(not st["decode"] for st in m["steps"]) > 1
        decode |= any(st["decode"] for st in m["steps"])
        tt = arrays.get("token_type_ids")
        if tt is not None:
            tt = tt[:, :S]
            blocks = hf.blocks_from_token_types(tt, (1,) if m["hf"] == "gemma3" else (1, 2))
            longest = hf.max_block_length(blocks)
            small_w |= m["sliding_window"] < longest
            large_w |= m["sliding_window"] > longest
            adjacent |= bool(np.any((tt[:, :-1] == 1) & (tt[:, 1:] == 2)))
            edge_blocks |= bool(np.any(blocks[:, 0] >= 0)) and bool(np.any(blocks[:, -1] >= 0))
    assert left and right and hole and chunked and decode and small_w and large_w and adjacent and edge_blocks


# ---------------------------------------------------------------------------------------------- tessera.hf unit

def test_blocks_from_token_types_runs():
    t = np.array([[1, 1, 0, 1, 2, 2, 3, 1], [0, 0, 0, 0, 0, 0, 0, 0]])
    assert hf.blocks_from_token_types(t, (1, 2)).tolist() == [[0, 0, -1, 1, 1, 1, -1, 2], [-1] * 8]
    assert hf.blocks_from_token_types(t, (1,)).tolist() == [[0, 0, -1, 1, -1, -1, -1, 2], [-1] * 8]
    assert hf.blocks_from_token_types(t, (1, 2)).dtype == np.int32


def test_padding_args_left_and_right():
    k_pos, kv_valid, hole = hf.padding_args(np.array([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [0, 1, 0, 1, 0]], bool))
    imax = np.iinfo(np.int32).max
    assert kv_valid.tolist() == [5, 3, 4]
    assert k_pos.tolist() == [[imax, imax, 2, 3, 4], [0, 1, 2, 3, 4], [imax, 1, imax, 3, 4]]
    assert hole.tolist() == [[1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 1, 0, 0]]


def test_gemma_mask_args_rejects_bad_input():
    with pytest.raises(ValueError):
        hf.gemma_mask_args(np.ones((1, 4)), model="gemma5", layer="full")
    with pytest.raises(ValueError):
        hf.gemma_mask_args(np.ones((1, 4)), model="gemma4", layer="sliding")
    with pytest.raises(ValueError):
        hf.gemma_mask_args(np.ones((1, 4)), model="gemma4", layer="full", bidirectional=True)


def test_gemma4_unified_forward_sliding_needs_blocks_ignore_window():
    """Gemma4UnifiedModel.forward's own sliding mask is (causal & window) | block. With the default composition
    window & (causal | block), once an image is longer than the window no (causal, window) choice reproduces
    it; MaskSpec.blocks_ignore_window expresses it structurally. This pins that finding to the recorded
    transformers mask (generation does not use it: see the next test)."""
    arrays, meta = _load(os.path.join(GOLDEN_DIR, "gemma4_unified_forward_w4.npz"))
    ref = arrays["s0_sliding_bool"]
    B, _, S_q, S_kv = ref.shape
    args = hf.gemma_mask_args(arrays["attention_mask"], arrays["token_type_ids"], model="gemma4_unified_forward",
                              layer="sliding", sliding_window=meta["sliding_window"], bidirectional="vision")
    assert args["blocks_ignore_window"] and "bias" not in args
    np.testing.assert_array_equal(tessera.attention_bias(B, S_q, S_kv, **args) == 0, ref)
    base = {k: v for k, v in args.items() if k not in ("blocks_ignore_window", "window", "causal")}
    for causal in (True, False):
        for left in range(-1, S_kv + 1):
            for right in range(-1, S_kv + 1):
                got = tessera.attention_bias(B, S_q, S_kv, causal=causal, window=(left, right), **base) == 0
                assert not np.array_equal(got, ref), (causal, left, right)


def _unified_pair(generate_arrays, forward_arrays):
    """Per layer kind: (generation's mask, the forward's own mask) for the same inputs."""
    for k in ("attention_mask", "token_type_ids"):
        assert np.array_equal(generate_arrays[k], forward_arrays[k]), f"the two recordings must share {k}"
    return {kind: (generate_arrays[f"s0_{kind}_bool"], forward_arrays[f"s0_{kind}_bool"])
            for kind in ("full", "sliding")}


def _assert_generation_rule_differs_from_forward(pair, args_for):
    """gemma4_unified: transformers' two paths disagree on both layer kinds (blocks on global layers; blocks past
    the window on sliding ones), and model="gemma4_unified" reproduces generation's, not the forward's."""
    for kind, (gen, fwd) in pair.items():
        assert not np.array_equal(gen, fwd), (
            f"{kind}: transformers' forward and generation masks now agree for gemma4_unified; the golden split "
            f"between them (docs/attention.md) must be revisited")
        B, _, S_q, S_kv = gen.shape
        got = tessera.attention_bias(B, S_q, S_kv, **args_for(kind)) == 0
        np.testing.assert_array_equal(got, gen, err_msg=kind)
        assert not np.array_equal(got, fwd), kind
    gen_full = pair["full"][0]
    assert not np.any(np.triu(gen_full, 1)), "generation's global layers are causal: no key after its query"


def test_gemma4_unified_generation_mask_is_not_the_forward_mask():
    g, gm = _load(os.path.join(GOLDEN_DIR, "gemma4_unified_vision_w4.npz"))
    f, _ = _load(os.path.join(GOLDEN_DIR, "gemma4_unified_forward_w4.npz"))
    assert gm["path"] == "generate"
    _assert_generation_rule_differs_from_forward(
        _unified_pair(g, f),
        lambda kind: hf.gemma_mask_args(g["attention_mask"], g["token_type_ids"], model="gemma4_unified", layer=kind,
                                        sliding_window=gm["sliding_window"], bidirectional="vision"))


# ---------------------------------------------------------------------------------------------- (b) live

@pytest.fixture(scope="module")
def script():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("make_mask_goldens", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _case_names():
    spec = importlib.util.spec_from_file_location("_cases", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)   # the script imports torch only inside functions
    return [c["name"] for c in mod.CASES]


CASE_NAMES = _case_names()


def test_every_case_has_a_golden():
    assert sorted(CASE_NAMES) == sorted(os.path.basename(p)[:-4] for p in GOLDENS)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_live_case_matches_golden_and_tessera(script, name):
    case = next(c for c in script.CASES if c["name"] == name)
    arrays = script.case_arrays(case)
    meta = json.loads(str(arrays["meta"]))
    old, old_meta = _load(os.path.join(GOLDEN_DIR, name + ".npz"))
    assert set(old) == set(arrays), name
    for k in arrays:
        if k != "meta":
            assert np.array_equal(old[k], arrays[k]), (
                f"{name}/{k}: transformers {meta['transformers']} (torch {meta['torch']}) builds a different mask "
                f"than the golden recorded with transformers {old_meta['transformers']}")
    assert _check_arrays(arrays, meta) >= 2


def test_live_gemma4_unified_generation_mask_is_not_the_forward_mask(script):
    """The same check on masks transformers builds now (not the recorded ones)."""
    cases = {c["name"]: c for c in script.CASES}
    g = script.case_arrays(cases["gemma4_unified_vision_w4"])
    f = script.case_arrays(cases["gemma4_unified_forward_w4"])
    gm = json.loads(str(g["meta"]))
    _assert_generation_rule_differs_from_forward(
        _unified_pair(g, f),
        lambda kind: hf.gemma_mask_args(g["attention_mask"], g["token_type_ids"], model="gemma4_unified", layer=kind,
                                        sliding_window=gm["sliding_window"], bidirectional="vision"))


def _random_case(rng, i):
    hf_model = ["gemma3", "gemma3_text", "gemma4", "gemma4_unified"][i % 4]
    if hf_model == "gemma3":
        bidir = False
    elif hf_model == "gemma3_text":
        bidir = bool(rng.integers(2))
    else:
        bidir = [None, "vision", "vision", "all"][rng.integers(4)]
    B = int(rng.integers(1, 4))
    S = int(rng.integers(1, 40))
    chars = ".i" if hf_model == "gemma3" else ".iva"
    types = []
    for _ in range(B):
        row = ""
        while len(row) < S:
            c = chars[rng.integers(len(chars))]
            row += c * int(rng.integers(1, 12 if c != "." else 6))
        types.append(row[:S])
    attn = []
    for _ in range(B):
        kind = rng.integers(5)
        n = int(rng.integers(0, S))
        if kind == 0:
            row = "1" * S
        elif kind == 1:
            row = "0" * n + "1" * (S - n)
        elif kind == 2:
            row = "1" * (S - n) + "0" * n
        else:
            row = "".join("0" if rng.random() < 0.25 else "1" for _ in range(S))
        attn.append(row)
    path = "forward"
    tessera_model = "gemma3" if hf_model.startswith("gemma3") else hf_model
    if hf_model == "gemma4_unified":   # generation's mask, or the forward's own (reproduced for comparison)
        path, tessera_model = ("generate", hf_model) if rng.random() < 0.6 else ("forward", "gemma4_unified_forward")
    if hf_model.startswith("gemma4") and rng.random() < 0.2:
        path = "create_masks_for_generate"
        tessera_model = "gemma4" if hf_model == "gemma4" else "gemma4_unified"
    case = dict(name=f"random{i}", hf=hf_model, tessera_model=tessera_model, bidirectional=bidir,
                window=int(rng.integers(1, 14)), types=None if hf_model == "gemma3_text" else types,
                attn=None if (rng.random() < 0.15 and hf_model != "gemma3_text") else attn, path=path)
    if path != "create_masks_for_generate" and S > 2 and rng.random() < 0.4:
        case["chunks"] = sorted(set(rng.integers(1, S, size=int(rng.integers(1, 3))).tolist())) + [S]
    if path != "create_masks_for_generate" and rng.random() < 0.4:
        case["decode"] = int(rng.integers(1, 3))
    if case["window"] == 1 and ("chunks" in case or "decode" in case):
        case["window"] = 2   # transformers' sliding cache keeps W - 1 = 0 keys and fails for W = 1
    return case


@pytest.mark.parametrize("seed", range(8))
def test_live_random_cases(script, seed):
    rng = np.random.default_rng(1000 + seed)
    for i in range(12):
        case = _random_case(rng, i)
        arrays = script.case_arrays(case)
        try:
            _check_arrays(arrays, json.loads(str(arrays["meta"])))
        except AssertionError as e:
            raise AssertionError(f"seed {seed} case {case}: {e}") from None


# ---------------------------------------------------------------------------------------------- (c) kernels

@pytest.mark.parametrize("path", GOLDENS, ids=[os.path.basename(p)[:-4] for p in GOLDENS])
def test_attention_kernels_use_the_transformers_mask(path):
    arrays, meta = _load(path)
    rng = np.random.default_rng(7)
    Hq, Hkv, D = 4, 2, 16
    for label, args, B, S_q, S_kv, ref_f, ref_b in _layers(arrays, meta):
        q, k, v = qkv(rng, B, Hq, Hkv, S_q, S_kv, D, D, draw=np.float32)
        scale = 1.0 / np.sqrt(D)
        # Transformers' eager attention: its float mask (0 / float32 min) is only added to the scores.
        want = reference.attention(q, k, v, None, scale, bias=ref_f, out_dtype=np.float64)
        has_key = ref_b[:, 0].any(axis=-1)            # [B, S_q]; rows with no visible key: HF averages all
        rows = np.broadcast_to(has_key[:, None, :, None], want.shape)   # values, Tessera returns zeros
        for kernel in ("reference", "prefill", "decode"):
            out = tessera.attention(q, k, v, scale=scale, kernel=kernel, **args)
            np.testing.assert_allclose(out[rows], want[rows], rtol=2e-5, atol=2e-5, err_msg=f"{label} {kernel}")
            assert np.all(out[~rows] == 0), f"{label} {kernel}: fully masked rows must be zero"
