# tessera.onnx.group_query_attention's rotary (cos_cache / sin_cache, interleaved or not,
# position_ids), sinks (smooth_softmax, head_sink), output_qk (qk_output 1 and 2), causal = 0, and
# 16-bit caches, against onnxruntime 1.32.0 (CPUExecutionProvider) where it runs them and a
# float64 numpy model (helpers/reference.py) where it does not: rotary over fewer than 16 dims or a
# head size that is no multiple of 16 (onnxruntime refuses both), bfloat16 (no CPU kernel).
# Then the refusals, each naming what is not implemented.
#
# Compared: output rows of valid tokens (onnxruntime leaves padding rows unspecified), cache rows
# [0, T_b) (bit-exact without rotary; rotary rows within 1e-6, the two sides rounding
# x1 cos - x2 sin in their own order), output_qk rows of valid tokens. Tolerance otherwise
# ATOL = RTOL = 1e-5 float32 against float32 (helpers/tolerances.py).
from __future__ import annotations

import numpy as np
import pytest

import tessera
from helpers import reference
from helpers.inputs import GqaStep as Step
from helpers.inputs import randn
from helpers.ort_graphs import run_gqa_ort as run_ort
from helpers.tolerances import ATOL, RTOL


def tables(rng, rows, R):
    angle = rng.random((rows, R // 2)) * 2 * np.pi
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def step_both(step, cache, ort_cache, seqlens_k, total, S, attrs, extra=None, bias=None, cache_atol=0.0):
    """Tessera in place on `cache`, onnxruntime on copies of `ort_cache`; compares valid rows and
    cache rows [0, T_b); returns (Tessera's outputs, onnxruntime's present caches)."""
    extra = extra or {}
    got = tessera.onnx.group_query_attention(step.query, step.key, step.value, cache[0], cache[1], seqlens_k, total,
                                             attention_bias=bias, **extra, **attrs)
    want = run_ort(step.query, step.key, step.value, ort_cache[0].copy(), ort_cache[1].copy(), seqlens_k, total,
                   bias, extra, **{k: v for k, v in attrs.items() if k != "kernel"})
    for b, sk in enumerate(seqlens_k):
        T = int(sk) + 1
        q_valid = min(S, T)
        np.testing.assert_allclose(got[0][b, :q_valid], want[0][b, :q_valid], atol=ATOL, rtol=RTOL, err_msg=f"row {b}")
        for i in (1, 2):
            np.testing.assert_allclose(got[i][b, :, :T].astype(np.float32), want[i][b, :, :T].astype(np.float32),
                                       atol=cache_atol, rtol=0, err_msg=f"cache {i} row {b}")
        if len(got) == 4:
            np.testing.assert_allclose(got[3][b, :, :q_valid], want[3][b, :, :q_valid], atol=ATOL, rtol=RTOL,
                                       err_msg=f"output_qk row {b}")
    return got, (want[1], want[2])


def prefill_then_decode(rng, attrs, Hq=4, Hkv=2, D=32, C=48, lengths=(9, 5), packed=False, extra_fn=None,
                        decode_steps=3, cache_atol=0.0):
    lengths = np.array(lengths)
    B, S = len(lengths), int(lengths.max())
    cache = (np.zeros((B, Hkv, C, D), np.float32), np.zeros((B, Hkv, C, D), np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    extra = extra_fn(lengths, S) if extra_fn else None
    _, ort_cache = step_both(Step(rng, B, S, Hq, Hkv, D, packed), cache, ort_cache, lengths - 1, S, S, attrs, extra,
                             cache_atol=cache_atol)
    for _ in range(decode_steps):
        lengths = lengths + 1
        extra = extra_fn(lengths, 1) if extra_fn else None
        _, ort_cache = step_both(Step(rng, B, 1, Hq, Hkv, D, packed), cache, ort_cache, lengths - 1,
                                 int(lengths.max()), 1, attrs, extra, cache_atol=cache_atol)


# ---------------------------------------------------------------------------------------------
# Rotary.

@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("D,R", [(16, 16), (32, 16), (64, 64), (128, 128)])
@pytest.mark.parametrize("packed", [False, True], ids=["qkv", "packed"])
@pytest.mark.parametrize("local_window_size", [-1, 3])
def test_rotary(interleaved, D, R, packed, local_window_size):
    rng = np.random.default_rng(D + R + interleaved * 7 + packed)
    cos, sin = tables(rng, 48, R)
    attrs = dict(num_heads=4, kv_num_heads=2, do_rotary=1, rotary_interleaved=interleaved,
                 local_window_size=local_window_size)
    prefill_then_decode(rng, attrs, D=D, packed=packed, extra_fn=lambda L, S: {"cos_cache": cos, "sin_cache": sin},
                        cache_atol=1e-6)


def test_rotary_position_ids():
    # Decode: position_ids [B, 1] anywhere in the tables. First prompt (S == total): onnxruntime
    # reads only position_ids[0][0] and puts row s at p0 + s for every batch row.
    rng = np.random.default_rng(11)
    cos, sin = tables(rng, 64, 16)
    attrs = dict(num_heads=4, kv_num_heads=2, do_rotary=1)

    def extra(lengths, S):
        ids = (lengths - S)[:, None] + np.arange(S)[None] + np.array([[7], [3]])
        return {"cos_cache": cos, "sin_cache": sin, "position_ids": ids.astype(np.int64)}

    prefill_then_decode(rng, attrs, D=16, lengths=(6, 6), extra_fn=extra, cache_atol=1e-6)


def test_rotary_partial_and_odd_sizes_against_the_model():
    # onnxruntime wants R a multiple of 16 and D a multiple of 16; the semantics do not.
    rng = np.random.default_rng(12)
    Hq, Hkv, D, R, C = 2, 1, 24, 6, 10
    cos, sin = tables(rng, C, R)
    cache = [np.zeros((2, Hkv, C, D), np.float32) for _ in range(2)]
    step = Step(rng, 2, 4, Hq, Hkv, D, False)
    lengths = np.array([4, 3])
    for interleaved in (0, 1):
        c = [x.copy() for x in cache]
        out = tessera.onnx.group_query_attention(step.query, step.key, step.value, c[0], c[1], lengths - 1, 4,
                                                 num_heads=Hq, kv_num_heads=Hkv, do_rotary=1,
                                                 rotary_interleaved=interleaved, cos_cache=cos, sin_cache=sin)[0]
        pos = np.arange(4)[None].repeat(2, 0)
        k_rot = reference.rotate(step.key.reshape(2, 4, Hkv, D), cos, sin, pos, interleaved)
        want_k = np.zeros((2, Hkv, C, D))
        want_v = np.zeros((2, Hkv, C, D))
        for b, T in enumerate(lengths):
            np.testing.assert_allclose(c[0][b, :, :T], k_rot[b, :T].transpose(1, 0, 2), atol=1e-6, rtol=0)
            want_k[b, :, :T] = c[0][b, :, :T]
            want_v[b, :, :T] = step.value[b, :T].reshape(T, Hkv, D).transpose(1, 0, 2)
        want = reference.group_query_attention(step.query, want_k, want_v, lengths - 1, Hq, Hkv,
                                               rotary=(cos, sin, pos, interleaved))
        for b, T in enumerate(lengths):
            np.testing.assert_allclose(out[b, :T], want[b, :T], atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------------------------------------
# Sinks, output_qk, causal = 0.

@pytest.mark.parametrize("sink", ["smooth", "head_sink", "head_sink+smooth0"])
@pytest.mark.parametrize("local_window_size,softcap", [(-1, 0.0), (4, 0.0), (-1, 5.0)])
def test_sinks(sink, local_window_size, softcap):
    rng = np.random.default_rng(len(sink) + local_window_size)
    head_sink = (randn(rng, 4) * 2).astype(np.float32)
    attrs = dict(num_heads=4, kv_num_heads=2, local_window_size=local_window_size, softcap=softcap)
    if sink == "smooth":
        attrs["smooth_softmax"] = 1
    elif sink == "head_sink+smooth0":
        attrs["smooth_softmax"] = 0  # head_sink applies anyway, as in onnxruntime
    extra_fn = None if sink == "smooth" else (lambda L, S: {"head_sink": head_sink})
    prefill_then_decode(rng, attrs, extra_fn=extra_fn)


@pytest.mark.parametrize("qk_output", [1, 2])
@pytest.mark.parametrize("features", ["plain", "window+softcap", "bias+sink"])
def test_output_qk(qk_output, features):
    rng = np.random.default_rng(qk_output * 10 + len(features))
    Hq, Hkv, D, C = 4, 2, 16, 20
    attrs = dict(num_heads=Hq, kv_num_heads=Hkv, qk_output=qk_output)
    if features == "window+softcap":
        attrs.update(local_window_size=3, softcap=2.0)
    cache = (np.zeros((2, Hkv, C, D), np.float32), np.zeros((2, Hkv, C, D), np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    lengths, S = np.array([7, 4]), 7
    extra = {"head_sink": randn(rng, Hq)} if features == "bias+sink" else None
    bias = randn(rng, 2, 1, S, S) if features == "bias+sink" else None
    got, ort_cache = step_both(Step(rng, 2, S, Hq, Hkv, D), cache, ort_cache, lengths - 1, S, S, attrs, extra, bias)
    assert got[3].shape == (2, Hq, S, S)
    lengths = lengths + 1
    bias = randn(rng, 2, 1, 1, 8) if features == "bias+sink" else None
    got, _ = step_both(Step(rng, 2, 1, Hq, Hkv, D), cache, ort_cache, lengths - 1, 8, 1, attrs, extra, bias)
    assert got[3].shape == (2, Hq, 1, 8)


def test_causal_zero():
    # A first prompt sees its whole row (later keys too), decode steps every cached key.
    rng = np.random.default_rng(13)
    prefill_then_decode(rng, dict(num_heads=4, kv_num_heads=2, causal=0), lengths=(8, 8))
    rng = np.random.default_rng(14)
    prefill_then_decode(rng, dict(num_heads=4, kv_num_heads=1, causal=0, softcap=3.0), Hkv=1, lengths=(9, 9),
                        packed=True)


# ---------------------------------------------------------------------------------------------
# 16-bit caches: float16 against onnxruntime's float16 kernel, bfloat16 against the model.

def test_float16_everything_against_onnxruntime():
    rng = np.random.default_rng(15)
    Hq, Hkv, D, C, B, S = 4, 2, 32, 24, 2, 6
    step = Step(rng, B, S, Hq, Hkv, D)
    q, k, v = (x.astype(np.float16) for x in (step.query, step.key, step.value))
    cache = [np.zeros((B, Hkv, C, D), np.float16) for _ in range(2)]
    lengths = np.array([6, 4])
    got = tessera.onnx.group_query_attention(q, k, v, cache[0], cache[1], lengths - 1, S, num_heads=Hq,
                                             kv_num_heads=Hkv)
    assert got[0].dtype == np.float16 and got[1] is cache[0]
    want = run_ort(q, k, v, np.zeros_like(cache[0]), np.zeros_like(cache[1]), lengths - 1, S, num_heads=Hq,
                   kv_num_heads=Hkv)
    for b, T in enumerate(lengths):
        np.testing.assert_array_equal(got[1][b, :, :T], want[1][b, :, :T])
        np.testing.assert_allclose(got[0][b, :T].astype(np.float32), want[0][b, :T].astype(np.float32),
                                   atol=2e-3, rtol=2e-3)  # onnxruntime rounds its float16 intermediates


def test_bfloat16_cache_against_the_model():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(16)
    Hq, Hkv, D, C = 4, 2, 16, 12
    cache = [np.zeros((2, Hkv, C, D), bf16) for _ in range(2)]
    lengths = np.array([5, 3])
    for S in (5, 1):
        step = Step(rng, 2, S, Hq, Hkv, D)
        q, k, v = (x.astype(bf16) for x in (step.query, step.key, step.value))
        out, pk, pv = tessera.onnx.group_query_attention(q, k, v, cache[0], cache[1], lengths - 1, int(lengths.max()),
                                                         num_heads=Hq, kv_num_heads=Hkv, local_window_size=3)
        assert out.dtype == bf16 and pk is cache[0]
        P = lengths - min(S, 1) if S == 1 else np.zeros(2, int)
        for b, T in enumerate(lengths):
            np.testing.assert_array_equal(pk[b, :, P[b]:T], k[b, :T - P[b]].reshape(-1, Hkv, D).transpose(1, 0, 2))
        want = reference.group_query_attention(q.astype(np.float64), pk.astype(np.float64), pv.astype(np.float64),
                                               lengths - 1, Hq, Hkv, local_window_size=3)
        for b, T in enumerate(lengths):
            n = min(S, T)
            np.testing.assert_allclose(out[b, :n].astype(np.float64), want[b, :n], atol=2 ** -8, rtol=2 ** -7)
        lengths = lengths + 1


# ---------------------------------------------------------------------------------------------
# Refusals and bad rotary inputs: each ValueError names the argument.

def _call(**over):
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    kw = dict(query=z(2, 1, 64), key=z(2, 1, 32), value=z(2, 1, 32), past_key=z(2, 2, 8, 16), past_value=z(2, 2, 8, 16),
              seqlens_k=[3, 5], total_sequence_length=6, num_heads=4, kv_num_heads=2)
    kw.update(over)
    return tessera.onnx.group_query_attention(**kw)


@pytest.mark.parametrize("kw,match", [
    ({"query_seqlens": np.array([1, 1])}, r"query_seqlens=.* is not supported: .*right-padded chunks"),
    ({"sliding_window_cache": 1}, r"sliding_window_cache=1 is not supported"),
    ({"k_scale": np.ones(1, np.float32)}, r"k_scale=.* quantized KV caches"),
    ({"kv_cache_bit_width": 8}, r"kv_cache_bit_width=8 is not supported"),
    ({"k_quant_type": "PER_TENSOR"}, r"k_quant_type='PER_TENSOR' is not supported"),
    ({"q_norm_weight": np.ones(16, np.float32)}, r"q_norm_weight=.* RMS normalization"),
    ({"rotary": 1}, r"'rotary' is not an input or attribute of GroupQueryAttention"),
    ({"do_rotary": 1}, r"do_rotary=1 needs the cos_cache and sin_cache inputs"),
    ({"do_rotary": 1, "cos_cache": np.ones((8, 4), np.float32), "sin_cache": np.ones((8, 5), np.float32)},
     r"sin_cache must have cos_cache's shape \[8, 4\], got \[8, 5\]"),
    ({"do_rotary": 1, "cos_cache": np.ones((8, 9), np.float32), "sin_cache": np.ones((8, 9), np.float32)},
     r"cos_cache must be \[max_position, R / 2\] with 2 <= R <= head size 16, got \[8, 9\]"),
    ({"do_rotary": 1, "cos_cache": np.ones((5, 4), np.float32), "sin_cache": np.ones((5, 4), np.float32)},
     r"rotary position of token 0 of batch row 1 is 5, outside the cos_cache rows \[0, 5\)"),
    ({"do_rotary": 1, "cos_cache": np.ones((8, 4), np.float32), "sin_cache": np.ones((8, 4), np.float32),
      "position_ids": np.zeros((1, 1), np.int64)}, r"position_ids must be \[2, 1\] \(batch_size, sequence_length\), got \[1, 1\]"),
    ({"do_rotary": 1, "cos_cache": np.ones((8, 4), np.float32), "sin_cache": np.ones((8, 4), np.float32),
      "position_ids": np.array([[3], [9]])}, r"position_ids\[1\]\[0\] = 9 is outside the cos_cache rows \[0, 8\)"),
    ({"causal": 0, "local_window_size": 2}, r"local_window_size must be -1 when causal is 0, got 2"),
    ({"smooth_softmax": 2}, r"smooth_softmax must be one of -1, 0, 1, got 2"),
    ({"qk_output": 3}, r"qk_output must be one of 0, 1, 2, got 3"),
    ({"head_sink": np.zeros(3, np.float32)}, r"head_sink must be \[4\] \(num_heads\), got \[3\]"),
])
def test_refusals_and_bad_inputs(kw, match):
    with pytest.raises(ValueError, match=match):
        _call(**kw)


def test_off_values_of_refused_attributes_are_accepted():
    out = _call(sliding_window_cache=0, k_quant_type="NONE", v_quant_type="NONE", kv_cache_bit_width=0,
                qk_norm_epsilon=1e-6, query_seqlens=None)
    assert out[0].shape == (2, 1, 64)
