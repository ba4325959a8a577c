# tessera.onnx.attention beyond opsets 23/24: opset 25's left/right windows (with past, external
# caches and masks of rank 1-4), qk_matmul_output modes 0-3, softmax_precision, 16-bit inputs,
# and the errors for what it refuses.
#
# Peers: onnxruntime 1.32.0 (CPUExecutionProvider) runs opset-25 windows, the qk_matmul_output
# modes and softmax_precision float / double; it writes -FLT_MAX where mode 2 masks a pair (the
# spec and the ONNX reference write -inf, as Tessera does; both are compared as "masked"). Where it
# does not implement something -- softmax_precision float16 (it expands the function body and
# answers within float16 noise of its own) and bfloat16 (refused), bfloat16 inputs -- the peer is
# a float64 numpy model of the same rounding (helpers/reference.py), checked tightly, and the
# ONNX reference evaluator (onnx 1.23.2), whose float16/bfloat16 arithmetic rounds every
# intermediate, within a few ulps of the softmax type.
#
# The ONNX reference differs from the spec in mode 0 with softcap: it returns the soft-capped
# scores there (mode 1's); the spec text and onnxruntime give the raw Q.K, as Tessera does.
#
# Tolerance: ATOL = RTOL = 1e-5 float32 against float32 (helpers/tolerances.py).
from __future__ import annotations

import numpy as np
import pytest

import tessera
from helpers import reference
from helpers.inputs import attention_feeds
from helpers.ort_graphs import ATTENTION_OUTPUTS
from helpers.ort_graphs import run_attention_ort as run_ort
from helpers.ort_graphs import run_attention_reference as run_reference
from helpers.tolerances import ATOL, RTOL, assert_outputs_close

QK_OUTPUTS = ATTENTION_OUTPUTS + ("qk_matmul_output",)
FLT_MAX = np.finfo(np.float32).max


def run_tessera(feeds, attrs, opset=25, kernel="auto"):
    return tessera.onnx.attention(
        feeds["Q"], feeds["K"], feeds["V"], feeds.get("attn_mask"), feeds.get("past_key"), feeds.get("past_value"),
        feeds.get("nonpad_kv_seqlen"), opset=opset, kernel=kernel, **attrs)


def feeds_for(seed, B=2, Hq=4, Hkv=2, S_q=5, S_kv=9, D=16, Dv=None, mask_kind="float", **kw):
    return attention_feeds(seed, B, Hq, Hkv, S_q, S_kv, D, Dv, mask_kind=mask_kind, **kw)


def compare_with_ort(feeds, attrs, got, qk=False, what=""):
    """Tessera's outputs against onnxruntime's: with nonpad_kv_seqlen, opset 25 allows no present
    outputs (the cache lives outside the node), so Y (and qk_matmul_output) only."""
    names = ("Y",) if "nonpad_kv_seqlen" in feeds else ATTENTION_OUTPUTS
    idx = [ATTENTION_OUTPUTS.index(n) for n in names]
    outputs = names + ("",) * (3 - len(names)) + ("qk_matmul_output",) if qk else names
    want = run_ort(25, feeds, attrs, outputs)
    assert_outputs_close(names, [got[i] for i in idx], want[:len(names)], what)
    if qk:
        masked_equal(got[3], want[-1])


def masked_equal(got, want):
    """Mode-2 scores: -inf (Tessera, the spec) and -FLT_MAX (onnxruntime) both mean masked."""
    g, w = np.where(got <= -FLT_MAX, -np.inf, got), np.where(want <= -FLT_MAX, -np.inf, want)
    np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w))
    np.testing.assert_allclose(np.where(np.isneginf(g), 0, g), np.where(np.isneginf(w), 0, w), atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------------------------------------
# Windows (opset 25): query i at offset + i sees keys offset + i - L .. offset + i + R.

WINDOWS = [(-1, -1), (0, 0), (2, -1), (2, 0), (1, 2), (-1, 1), (3, 1), (0, -1)]


@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("is_causal", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("cache", ["none", "past", "nonpad"])
def test_windows(window, is_causal, rank, cache):
    kw = {"past": 4} if cache == "past" else {"nonpad": [9, 6]} if cache == "nonpad" else {}
    feeds, attrs = feeds_for((window[0] + 2) * 31 + (window[1] + 2) * 7 + is_causal + rank, rank=rank, **kw)
    attrs.update(is_causal=is_causal, left_window_size=window[0], right_window_size=window[1])
    compare_with_ort(feeds, attrs, run_tessera(feeds, attrs), what=f"{window}")


# Masks of rank 1-4, bool and float, with a window and an external cache (the node tests' cases
# and their neighbours), the long-cache tile edges, and every kernel.
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("mask_shape", [(9,), (1, 9), (5, 9), (4, 5, 9), (2, 1, 5, 9), (2, 4, 5, 9)], ids=str)
@pytest.mark.parametrize("is_causal", [0, 1])
def test_window_with_masks_and_external_cache(mask_shape, mask_kind, is_causal):
    feeds, attrs = feeds_for(len(mask_shape) + is_causal, mask_shape=mask_shape, mask_kind=mask_kind, nonpad=[7, 9])
    attrs.update(is_causal=is_causal, left_window_size=2, right_window_size=-1 if is_causal else 1)
    compare_with_ort(feeds, attrs, run_tessera(feeds, attrs))


@pytest.mark.parametrize("kernel", ["reference", "prefill", "decode"])
@pytest.mark.parametrize("S_q,window", [(1, (63, 0)), (70, (64, -1)), (130, (0, 65))], ids=str)
def test_window_at_tile_edges(S_q, window, kernel):
    feeds, attrs = feeds_for(S_q, B=1, Hq=2, Hkv=1, S_q=S_q, S_kv=S_q, D=32, past=70)
    attrs.update(is_causal=int(window[1] == 0), left_window_size=window[0], right_window_size=window[1])
    assert_outputs_close(ATTENTION_OUTPUTS, run_tessera(feeds, attrs, kernel=kernel), run_ort(25, feeds, attrs))


def test_window_row_without_keys_is_zero():
    # left 0, right 0, no causal, an external cache of 4 valid keys: queries at nonpad - S_q + i;
    # the first sits at position -1 and has no key in its window.
    feeds, attrs = feeds_for(3, B=1, S_q=5, S_kv=6, nonpad=[4])
    attrs.update(left_window_size=0, right_window_size=0)
    got = run_tessera(feeds, attrs)
    assert np.all(got[0][0, :, 0] == 0)
    compare_with_ort(feeds, attrs, got)


# ---------------------------------------------------------------------------------------------
# qk_matmul_output modes 0-3.

@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("softcap", [0.0, 2.0])
@pytest.mark.parametrize("case", ["plain", "past+mask", "nonpad+window", "rank3"])
def test_qk_matmul_output(mode, softcap, case):
    kw = {"plain": {}, "past+mask": {"past": 3, "mask_shape": (2, 1, 5, 12), "mask_kind": "bool"},
          "nonpad+window": {"nonpad": [8, 5], "mask_shape": (5, 9)}, "rank3": {"rank": 3}}[case]
    feeds, attrs = feeds_for(mode * 10 + int(softcap), **kw)
    attrs.update(is_causal=1, softcap=softcap, qk_matmul_output_mode=mode)
    if case == "nonpad+window":
        attrs["left_window_size"] = 2
    compare_with_ort(feeds, attrs, run_tessera(feeds, attrs), qk=True, what=case)


def test_qk_mode0_is_raw_with_softcap():
    # The spec and onnxruntime: mode 0 is Q.K * scale before the soft cap (the ONNX reference
    # returns the capped scores; see the top). Checked against numpy directly too.
    feeds, attrs = feeds_for(4, B=1, Hq=2, Hkv=2)
    qk = run_tessera(feeds, {"softcap": 1.0, "qk_matmul_output_mode": 0})[3]
    np.testing.assert_allclose(qk, np.einsum("bhqd,bhkd->bhqk", feeds["Q"], feeds["K"]) / 4, atol=ATOL, rtol=RTOL)
    capped = run_reference(25, feeds, {"softcap": 1.0, "qk_matmul_output_mode": 0}, QK_OUTPUTS)[3]
    assert np.abs(capped).max() <= 1.0 < np.abs(qk).max()


def test_qk_mode3_fully_masked_row_is_zero():
    feeds, attrs = feeds_for(5, mask_shape=(5, 9), mask_kind="bool")
    feeds["attn_mask"][1] = False
    y, _, _, qk = run_tessera(feeds, {"qk_matmul_output_mode": 3})
    assert np.all(qk[:, :, 1] == 0) and np.all(y[:, :, 1] == 0)
    np.testing.assert_allclose(qk.sum(-1)[:, :, [0, 2, 3, 4]], 1, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# softmax_precision: float and double against onnxruntime; float16 / bfloat16 against a float64
# model rounding the softmax input and output (tightly) and the ONNX reference (loosely).

def test_softmax_precision_float_and_double():
    feeds, attrs = feeds_for(6, mask_shape=(2, 1, 5, 9))
    for sp in (1, 11):
        attrs = {"is_causal": 1, "softmax_precision": sp, "qk_matmul_output_mode": 3}
        got = run_tessera(feeds, attrs)
        want = run_ort(25, feeds, attrs, QK_OUTPUTS)
        assert_outputs_close(QK_OUTPUTS, got, want, f"softmax_precision {sp}")


def rounded_softmax_model(feeds, dtype, is_causal=1):
    """Y and the weights with the scores and the normalized weights rounded to `dtype`, sums in float64."""
    q, k, v = (feeds[n].astype(np.float64) for n in ("Q", "K", "V"))
    g = q.shape[1] // k.shape[1]
    s = np.einsum("bhqd,bhkd->bhqk", q, np.repeat(k, g, 1)) / np.sqrt(q.shape[-1])
    s = s.astype(np.float32).astype(dtype).astype(np.float64)
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = (w / w.sum(-1, keepdims=True)).astype(np.float32).astype(dtype).astype(np.float64)
    return np.einsum("bhqk,bhkd->bhqd", w, np.repeat(v, g, 1)), w


@pytest.mark.parametrize("sp,dtype_name,ulp", [(10, "float16", 2.0 ** -10), (16, "bfloat16", 2.0 ** -7)])
def test_softmax_precision_16_bit(sp, dtype_name, ulp):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    dtype = np.float16 if dtype_name == "float16" else ml_dtypes.bfloat16
    feeds, _ = feeds_for(7, S_kv=5)
    attrs = {"is_causal": 1, "softmax_precision": sp, "qk_matmul_output_mode": 3}
    y, _, _, w = run_tessera(feeds, attrs)
    want_y, want_w = rounded_softmax_model(feeds, dtype)
    np.testing.assert_array_equal(w, want_w.astype(np.float32))  # the weights are 16-bit values exactly
    np.testing.assert_allclose(y, want_y, atol=1e-6, rtol=1e-6)
    ref = run_reference(25, feeds, attrs, QK_OUTPUTS)
    vmax = np.abs(feeds["V"]).max()
    np.testing.assert_allclose(y, ref[0], atol=8 * ulp * vmax, rtol=0)  # its softmax rounds every step
    plain = run_tessera(feeds, {"is_causal": 1})[0]
    assert np.abs(plain - want_y).max() > 1e-5  # the rounding is not a no-op


# ---------------------------------------------------------------------------------------------
# 16-bit inputs: computed in float32, each output rounded once to its ONNX type.

@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", ["causal", "past", "nonpad+mask", "qk"])
def test_16_bit_inputs(dtype_name, case):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    dtype = np.float16 if dtype_name == "float16" else ml_dtypes.bfloat16
    kw = {"causal": {}, "past": {"past": 3}, "nonpad+mask": {"nonpad": [9, 6], "mask_shape": (2, 1, 5, 9)},
          "qk": {}}[case]
    f32, attrs = feeds_for(8, **kw)
    feeds = {n: (a.astype(dtype) if a.dtype == np.float32 else a) for n, a in f32.items()}
    attrs.update(is_causal=1, **({"qk_matmul_output_mode": 3} if case == "qk" else {}))
    got = run_tessera(feeds, attrs)
    assert all(o.dtype == dtype for o in got)
    # The model: the same 16-bit values in float32, computed by Tessera's float32 path (itself
    # checked against onnxruntime above), then rounded once.
    want = run_tessera({n: (a.astype(np.float32) if a.dtype == dtype else a) for n, a in feeds.items()}, attrs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.astype(dtype))
    # And the float64 model of the same rounded inputs, within one ulp of the output type.
    if case == "causal":
        q, k, v = (feeds[n].astype(np.float32) for n in ("Q", "K", "V"))
        vis = reference.visible(2, 5, 9, np.arange(5)[None].repeat(2, 0), np.arange(9)[None].repeat(2, 0), [9, 9],
                                True, (-1, -1), None, None)
        model = reference.attention(q, k, v, vis, 0.25, out_dtype=np.float64)
        ulp = 2.0 ** -10 if dtype_name == "float16" else 2.0 ** -7
        np.testing.assert_allclose(got[0].astype(np.float64), model, atol=ulp * 2, rtol=ulp)


# ---------------------------------------------------------------------------------------------
# Errors name the attribute and the value; unknown keywords are named too.

@pytest.mark.parametrize("kw,match", [
    ({"left_window_size": -2}, r"left_window_size must be -1 \(unbounded\) or in \[0, 2\^31\), got -2"),
    ({"right_window_size": 1, "opset": 24}, r"right_window_size needs opset 25, the node has opset 24"),
    ({"softmax_precision": 7}, r"softmax_precision must be 1 \(float\), 10 \(float16\), 11 \(double\) or 16"),
    ({"qk_matmul_output_mode": 4}, r"qk_matmul_output_mode must be 0..3, got 4"),
    ({"q_num_heads": 4, "kv_num_heads": 2}, r"must not be given with 4-D inputs \(opset 25\)"),
    ({"opset": 26}, r"opset 26 is not supported \(23, 24 or 25\)"),
    ({"softmax_precision": 16, "kernel": "prefill"}, r"softmax precision bf16 runs on the reference kernel only"),
    ({"left_window": 2}, r"Attention: 'left_window' is not an input or attribute of Attention"),
])
def test_bad_attributes(kw, match):
    feeds, _ = feeds_for(9)
    with pytest.raises(ValueError, match=match):
        tessera.onnx.attention(feeds["Q"], feeds["K"], feeds["V"], **kw)
