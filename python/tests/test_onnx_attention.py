# Conformance of tessera.onnx.attention (ONNX `Attention`, opsets 23 and 24; opset 25 in
# test_onnx_attention_opset25.py) against
# onnxruntime 1.32.0 (CPUExecutionProvider) and, for inputs onnxruntime's CPU kernel refuses,
# against the ONNX reference implementation (onnx 1.23.2, onnx.reference.ReferenceEvaluator).
#
# onnxruntime 1.32.0 CPU refuses three mask forms the ONNX spec and reference accept:
#   * a mask whose last dim is shorter than total_sequence_length (the reference pads it with
#     -inf / False), including a last dim of 1;
#   * a mask whose q_sequence_length dim is 1 (broadcast over queries);
#   * a rank-1 mask [T];
# and it refuses the scale attribute <= 0. It also disagrees with the spec and the reference in
# one accepted case: is_causal=1 with past_key and a single query after several new keys (S_q = 1
# < S_kv), see test_ort_causal_offset_single_query_with_past; that case goes to the reference.
#
# The reference (onnx 1.23.2) derives the causal frontier's S_q from the *mask's* shape
# (_apply_causal: `q_len, kv_len = base.shape[-2:]`), so with is_causal=1 a mask broadcast over
# queries gives every query the frontier of query 0, and a rank-1 mask raises. The spec says the
# frontier is computed independently of attn_mask; Tessera follows the spec, and the reference is
# given the same mask materialized over queries (identical by broadcasting) for those cases.
# Those are tested against the reference (test_reference_only_masks); test_ort_refuses_... records
# the refusal so a future onnxruntime that accepts them is noticed.
#
# Tolerance: ATOL = RTOL = 1e-5, float32 against float32 in another summation order (see
# helpers/tolerances.py); D <= 512 terms per score, observed <= 1e-6.
from __future__ import annotations

import numpy as np
import pytest

import tessera
from helpers.inputs import attention_feeds as make_feeds
from helpers.ort_graphs import ATTENTION_OUTPUTS as OUTPUTS
from helpers.ort_graphs import run_attention_ort as run_ort
from helpers.ort_graphs import run_attention_reference as run_reference
from helpers.tolerances import ATOL, RTOL, assert_outputs_close


def run_tessera(opset, feeds, attrs, kernel="auto"):
    return tessera.onnx.attention(
        feeds["Q"], feeds["K"], feeds["V"], feeds.get("attn_mask"), feeds.get("past_key"), feeds.get("past_value"),
        feeds.get("nonpad_kv_seqlen"), is_causal=attrs.get("is_causal", 0), q_num_heads=attrs.get("q_num_heads"),
        kv_num_heads=attrs.get("kv_num_heads"), scale=attrs.get("scale"), softcap=attrs.get("softcap", 0.0),
        opset=opset, kernel=kernel)


def assert_same(got, want, what=""):
    assert_outputs_close(OUTPUTS, got, want, what)


# ---------------------------------------------------------------------------------------------
# Q/K/V layouts, GQA ratios, head sizes, is_causal without cache (top-left, also S_q != S_kv).

SHAPES = [  # B, Hq, Hkv, S_q, S_kv, D, Dv
    (1, 1, 1, 1, 1, 8, 8),
    (2, 4, 4, 5, 5, 16, 16),
    (2, 4, 2, 3, 7, 8, 8),       # S_q < S_kv
    (1, 6, 3, 9, 4, 16, 24),     # S_q > S_kv, Dv != D
    (2, 8, 1, 4, 6, 32, 32),     # kv_num_heads = 1 (MQA)
    (1, 4, 2, 70, 130, 64, 64),  # crosses the kernels' 64-query / 64-key tiles
    (1, 2, 1, 1, 200, 64, 64),   # one query (decode kernel, split keys)
    (1, 2, 1, 5, 9, 256, 256),
    (1, 2, 2, 4, 6, 512, 512),
]


@pytest.mark.parametrize("opset", [23, 24])
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("is_causal", [0, 1])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_qkv_layouts_and_heads(shape, is_causal, rank, opset):
    feeds, attrs = make_feeds(sum(shape) * 10 + rank, *shape, rank=rank)
    attrs["is_causal"] = is_causal
    assert_same(run_tessera(opset, feeds, attrs), run_ort(opset, feeds, attrs), f"{shape}")


# Every kernel through the adapter (auto picks decode for S_q = 1, prefill otherwise), so a
# conformance failure separates adapter mistakes (all kernels fail) from kernel ones.
@pytest.mark.parametrize("kernel", ["reference", "prefill", "decode"])
@pytest.mark.parametrize("shape", SHAPES[:7], ids=lambda s: "x".join(map(str, s)))
def test_each_kernel(shape, kernel):
    feeds, attrs = make_feeds(sum(shape), *shape, past=3, mask_shape=(shape[3], shape[4] + 3), mask_kind="float")
    attrs["is_causal"] = 1
    # One query after several new keys: onnxruntime 1.32.0 misplaces the causal frontier there
    # (see test_ort_causal_offset_single_query_with_past), so the reference is the peer.
    peer = run_reference if shape[3] == 1 and shape[4] > 1 else run_ort
    assert_same(run_tessera(24, feeds, attrs, kernel), peer(24, feeds, attrs), f"{shape}")


def test_causal_without_cache_is_top_left():
    # S_q = 3 < S_kv = 5, no past, no nonpad: offset 0, so query 0 sees key 0 only (Y = V[0]),
    # query 2 sees keys 0..2 -- not the bottom-right alignment (which would let query 0 see 3 keys).
    feeds, attrs = make_feeds(7, 1, 1, 1, 3, 5, 8)
    y = run_tessera(23, feeds, {"is_causal": 1})[0]
    np.testing.assert_allclose(y[0, 0, 0], feeds["V"][0, 0, 0], atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(y, run_ort(23, feeds, {"is_causal": 1})[0], atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------------------------------------
# attn_mask: bool and float, the broadcast shapes onnxruntime accepts.

B, HQ, HKV, SQ, SKV = 2, 4, 2, 5, 7
MASK_SHAPES = [
    (SQ, SKV),
    (HQ, SQ, SKV),
    (1, SQ, SKV),
    (B, HQ, SQ, SKV),
    (1, HQ, SQ, SKV),
    (B, 1, SQ, SKV),
    (1, 1, SQ, SKV),
]


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("mask_shape", MASK_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("is_causal", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
def test_mask_broadcast(mask_shape, mask_kind, is_causal, rank):
    feeds, attrs = make_feeds(len(mask_shape) * 10 + is_causal, B, HQ, HKV, SQ, SKV, 16, rank=rank,
                              mask_shape=mask_shape, mask_kind=mask_kind)
    attrs["is_causal"] = is_causal
    assert_same(run_tessera(23, feeds, attrs), run_ort(23, feeds, attrs))


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("is_causal", [0, 1])
def test_fully_masked_rows_are_zero(mask_kind, is_causal):
    feeds, attrs = make_feeds(3, B, HQ, HKV, SQ, SKV, 16, mask_shape=(B, 1, SQ, SKV), mask_kind=mask_kind,
                              fully_masked_rows=True)
    attrs["is_causal"] = is_causal
    got = run_tessera(23, feeds, attrs)
    assert not np.isnan(got[0]).any()
    assert np.all(got[0][:, :, 0, :] == 0)
    assert_same(got, run_ort(23, feeds, attrs))


# ---------------------------------------------------------------------------------------------
# past_key/past_value: present = concat; is_causal offset = past length.

@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("is_causal", [0, 1])
@pytest.mark.parametrize("past,S_q", [(3, 1), (4, 4), (6, 2), (80, 70), (0, 3)])
@pytest.mark.parametrize("with_mask", [False, True])
def test_past_key_value(past, S_q, is_causal, rank, with_mask):
    T = past + S_q
    feeds, attrs = make_feeds(past * 100 + S_q, 2, 4, 2, S_q, S_q, 16, rank=rank, past=past,
                              mask_shape=(2, 1, S_q, T) if with_mask else None, mask_kind="bool")
    attrs["is_causal"] = is_causal
    assert_same(run_tessera(24, feeds, attrs), run_ort(24, feeds, attrs), f"past={past}")


@pytest.mark.parametrize("S_kv", [2, 4])
def test_ort_causal_offset_single_query_with_past(S_kv):
    # is_causal with past_key, S_q = 1 < S_kv new keys: the spec and the reference put the query at
    # position P (offset = past length), so it sees keys 0..P. onnxruntime 1.32.0 CPU lets a single
    # query see all T = P + S_kv keys (offset T - 1) -- it uses the past length only for S_q > 1.
    # Tessera follows the spec. If the ORT assertion fails, ORT was fixed: compare with it instead.
    feeds, attrs = make_feeds(23, 1, 2, 1, 1, S_kv, 8, past=3)
    attrs["is_causal"] = 1
    want = run_reference(24, feeds, attrs)
    assert_same(run_tessera(24, feeds, attrs), want)
    assert not np.allclose(run_ort(24, feeds, attrs)[0], want[0], atol=ATOL, rtol=RTOL)


def test_causal_with_past_last_query_sees_everything():
    feeds, _ = make_feeds(11, 1, 1, 1, 2, 2, 8, past=3)
    y, pk, pv = run_tessera(23, feeds, {"is_causal": 1})
    np.testing.assert_array_equal(pk[:, :, :3], feeds["past_key"])
    np.testing.assert_array_equal(pv[:, :, 3:], feeds["V"])
    # Query 0 sits at position 3: keys 0..3 visible, key 4 not.
    no_last = run_tessera(23, {**feeds, "attn_mask": np.array([True] * 4 + [False])}, {"is_causal": 0})[0]
    np.testing.assert_allclose(y[0, 0, 0], no_last[0, 0, 0], atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------------------------------------
# nonpad_kv_seqlen (opset 24): padding keys invisible; is_causal offset = nonpad[b] - S_q.

@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("is_causal", [0, 1])
@pytest.mark.parametrize("nonpad", [[6, 6], [4, 6], [2, 5], [0, 3], [1, 0]], ids=str)
@pytest.mark.parametrize("with_mask", [False, True])
def test_nonpad_kv_seqlen(nonpad, is_causal, rank, with_mask):
    # S_q = 3: nonpad 2 and 1 give negative offsets (leading queries see no key -> zero rows).
    feeds, attrs = make_feeds(sum(nonpad), 2, 4, 2, 3, 6, 16, rank=rank, nonpad=nonpad,
                              mask_shape=(2, 4, 3, 6) if with_mask else None, mask_kind="float")
    attrs["is_causal"] = is_causal
    got = run_tessera(24, feeds, attrs)
    assert not np.isnan(got[0]).any()
    assert_same(got, run_ort(24, feeds, attrs), f"nonpad={nonpad}")


def test_nonpad_long_cache():
    # An external cache of 150 slots (3 key tiles), 70 new queries bottom-right aligned per row.
    feeds, attrs = make_feeds(5, 2, 4, 2, 70, 150, 32, nonpad=[150, 97])
    assert_same(run_tessera(24, feeds, {"is_causal": 1}), run_ort(24, feeds, {"is_causal": 1}))


# ---------------------------------------------------------------------------------------------
# scale and softcap.

@pytest.mark.parametrize("scale", [None, 0.05, 1.0, 0.0])
@pytest.mark.parametrize("softcap", [0.0, 0.5, 30.0])
@pytest.mark.parametrize("is_causal", [0, 1])
def test_scale_softcap(scale, softcap, is_causal):
    feeds, attrs = make_feeds(13, 2, 4, 2, 5, 8, 32, past=3, mask_shape=(5, 11), mask_kind="float")
    attrs.update(is_causal=is_causal, scale=scale, softcap=softcap)
    # onnxruntime 1.32.0 refuses scale <= 0 ("scale must be greater than 0 if specified"); the
    # spec allows 0 (the reference computes uniform weights), so scale 0 goes to the reference.
    # Negative scales are bad input (ONNX scales Q and K by sqrt(scale)): see test_bad_inputs.
    peer = run_ort if scale is None or scale > 0 else run_reference
    assert_same(run_tessera(24, feeds, attrs), peer(24, feeds, attrs))


# ---------------------------------------------------------------------------------------------
# Masks only the ONNX reference accepts (onnxruntime 1.32.0 CPU refuses them, see the top).

REFERENCE_ONLY = [  # mask shape for S_q = 4, T = past 2 + S_kv 5 = 7
    (4, 5),           # short: keys 5, 6 padded with -inf / False
    (2, 4, 4, 1),     # last dim 1: only key 0 can be visible
    (2, 1, 1, 7),     # broadcast over queries
    (7,),             # rank 1
    (4, 4, 3),        # short, per head
]


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("mask_shape", REFERENCE_ONLY, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("is_causal", [0, 1])
def test_reference_only_masks(mask_shape, mask_kind, is_causal):
    feeds, attrs = make_feeds(17, 2, 4, 2, 4, 5, 8, past=2, mask_shape=mask_shape, mask_kind=mask_kind)
    attrs["is_causal"] = is_causal
    mask = feeds["attn_mask"]
    materialized = np.ascontiguousarray(np.broadcast_to(mask, (mask.shape[:-2] if mask.ndim > 1 else ()) +
                                                        (4, mask.shape[-1])))
    assert_same(run_tessera(23, feeds, attrs), run_reference(23, {**feeds, "attn_mask": materialized}, attrs))


def test_reference_short_mask_with_nonpad():
    # Opset 24 external cache: mask shorter than the cache but longer than every nonpad.
    feeds, attrs = make_feeds(19, 2, 2, 2, 3, 9, 8, nonpad=[6, 4], mask_shape=(2, 1, 3, 6), mask_kind="float")
    for causal in (0, 1):
        attrs["is_causal"] = causal
        assert_same(run_tessera(24, feeds, attrs), run_reference(24, feeds, attrs))


@pytest.mark.parametrize("mask_shape", [(4, 5), (2, 1, 1, 7), (7,)], ids=str)
def test_ort_refuses_reference_only_masks(mask_shape):
    feeds, attrs = make_feeds(17, 2, 4, 2, 4, 5, 8, past=2, mask_shape=mask_shape, mask_kind="float")
    with pytest.raises(Exception):
        run_ort(23, feeds, attrs)


# ---------------------------------------------------------------------------------------------
# Bad input raises ValueError naming the operator, the argument and the value.

def _bad(match, **over):
    feeds, attrs = make_feeds(0, 2, 4, 2, 3, 5, 8)
    kw = dict(Q=feeds["Q"], K=feeds["K"], V=feeds["V"])
    kw.update(over)
    with pytest.raises(ValueError, match=match):
        tessera.onnx.attention(**kw)


def test_bad_inputs():
    r = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    _bad(r"onnx::Attention: Q must be 3-D or 4-D, got shape \[2, 12\]", Q=r(2, 12))
    _bad(r"same rank", K=r(2, 5, 16))
    _bad(r"3-D inputs need the q_num_heads", Q=r(2, 3, 32), K=r(2, 5, 16), V=r(2, 5, 16))
    _bad(r"q_num_heads 4 is not a multiple of kv_num_heads 3", K=r(2, 3, 5, 8), V=r(2, 3, 5, 8))
    _bad(r"K head size 4 differs from Q head size 8", K=r(2, 2, 5, 4))
    _bad(r"K has 5 keys but V has 6", V=r(2, 2, 6, 8))
    _bad(r"batch_size differs", K=r(1, 2, 5, 8))
    _bad(r"attn_mask of shape \[3, 3, 5\] does not broadcast .* q_num_heads is 4", attn_mask=r(3, 3, 5))
    _bad(r"attn_mask has 6 key columns, more than total_sequence_length 5", attn_mask=r(3, 6))
    _bad(r"attn_mask must have rank 1 to 4", attn_mask=r(1, 1, 1, 3, 5))
    _bad(r"nonpad_kv_seqlen\[1\] = 6 is outside \[0, 5\]", nonpad_kv_seqlen=np.array([2, 6]))
    _bad(r"nonpad_kv_seqlen must be \[2\]", nonpad_kv_seqlen=np.array([2]))
    _bad(r"nonpad_kv_seqlen needs opset 24", nonpad_kv_seqlen=np.array([2, 2]), opset=23)
    _bad(r"nonpad_kv_seqlen cannot be combined with past_key",
         nonpad_kv_seqlen=np.array([2, 2]), past_key=r(2, 2, 1, 8), past_value=r(2, 2, 1, 8))
    _bad(r"past_key and past_value must be given together", past_key=r(2, 2, 1, 8))
    _bad(r"past_value must be \[2, 2, 1, 8\], got \[2, 2, 2, 8\]", past_key=r(2, 2, 1, 8), past_value=r(2, 2, 2, 8))
    _bad(r"softcap must be finite and >= 0, got -1", softcap=-1.0)
    _bad(r"scale must be finite", scale=float("inf"))
    _bad(r"scale must be >= 0 \(Q and K are scaled by sqrt\(scale\)\), got -0.2", scale=-0.2)
    _bad(r"is_causal must be 0 or 1, got 2", is_causal=2)
    _bad(r"opset 22 is not supported \(23, 24 or 25\)", opset=22)
    _bad(r"head size 600 exceeds the supported maximum 512", Q=r(2, 4, 3, 600), K=r(2, 2, 5, 600))
    _bad(r"kv_num_heads 3 differs from K shape", kv_num_heads=3, opset=24)  # (opset 25 refuses head counts with 4-D)
    _bad(r"bias is NaN", attn_mask=np.full((3, 5), np.nan, np.float32))
