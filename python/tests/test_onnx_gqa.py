# Conformance of tessera.onnx.group_query_attention (com.microsoft.GroupQueryAttention) against
# onnxruntime 1.32.0 (CPUExecutionProvider).
#
# Semantics verified here (see include/tessera/onnx/group_query_attention.h): T_b = seqlens_k[b] + 1 tokens
# after the step, Q_b = min(S, T_b) valid query rows at positions P_b = T_b - Q_b onwards, new K/V
# written to cache rows [P_b, T_b), local_window_size W = the W most recent keys including the
# query itself (window_left = W - 1), W = 0 = no key (zero output), softcap before attention_bias.
#
# Where onnxruntime returns NaN -- a query row whose visible keys all carry a -inf attention_bias
# -- Tessera returns zeros (the ONNX Attention rule for fully masked rows), checked against the
# numpy model instead.
#
# What onnxruntime leaves unspecified is not compared: output rows of right padding in a batched
# first prompt (rows s >= T_b; with local_window_size and softcap together ORT 1.32.0 returns
# values there that no mask explains, see test_padding_rows_follow_positions) and cache rows
# >= T_b (ORT also writes the padding rows of a prompt there). onnxruntime accepts a batch > 1
# with S > 1 and a past only through query_seqlens, which Tessera does not implement; that case
# is covered against a float64 numpy model of the semantics above (helpers/reference.py).
#
# Tolerance: ATOL = RTOL = 1e-5, float32 against float32 in another summation order (see
# helpers/tolerances.py); observed differences <= 1e-6.
from __future__ import annotations

import numpy as np
import pytest

import tessera
from helpers.inputs import GqaStep as Step
from helpers.ort_graphs import run_gqa_ort as run_ort
from helpers.reference import group_query_attention as reference
from helpers.tolerances import ATOL, RTOL


def compare_step(step, cache, ort_cache, seqlens_k, total, S, attrs, bias=None):
    """Runs one step on both sides (Tessera in place on `cache`, ORT on copies); compares the
    valid output rows and cache rows [0, T_b). Returns ORT's present (the next ORT past)."""
    out, pk, pv = tessera.onnx.group_query_attention(
        step.query, step.key, step.value, cache[0], cache[1], seqlens_k, total, attention_bias=bias, **attrs)
    assert pk is cache[0] and pv is cache[1], "present must be the past buffer (in place)"
    ort_attrs = {k: v for k, v in attrs.items() if v is not None and k != "kernel"}
    want, wk, wv = run_ort(step.query, step.key, step.value, ort_cache[0].copy(), ort_cache[1].copy(), seqlens_k,
                           total, bias, **ort_attrs)
    nan = np.isnan(want)
    if nan.any():
        # ORT 1.32.0 returns NaN for a row whose visible keys all carry a -inf attention_bias;
        # Tessera returns zeros there (the ONNX rule for fully masked rows). Check against the model.
        model = reference(step.query, cache[0], cache[1], seqlens_k, attrs["num_heads"], attrs["kv_num_heads"],
                          attrs.get("local_window_size", -1), attrs.get("softcap", 0.0), attrs.get("scale"), bias)
        assert np.all(model[nan] == 0) and np.all(out[nan] == 0)
        want = np.where(nan, model, want)
    for b, sk in enumerate(seqlens_k):
        T = sk + 1
        q_valid = min(S, T)
        np.testing.assert_allclose(out[b, :q_valid], want[b, :q_valid], atol=ATOL, rtol=RTOL, err_msg=f"row {b}")
        np.testing.assert_array_equal(pk[b, :, :T], wk[b, :, :T])
        np.testing.assert_array_equal(pv[b, :, :T], wv[b, :, :T])
    return wk, wv


# ---------------------------------------------------------------------------------------------
# Prefill of a right-padded batch, then decode steps, past and present sharing one buffer.

@pytest.mark.parametrize("kernel", ["auto", "reference"])
@pytest.mark.parametrize("packed", [False, True], ids=["qkv", "packed"])
@pytest.mark.parametrize("softcap", [0.0, 2.0])
@pytest.mark.parametrize("local_window_size", [-1, 1, 3, 40])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (8, 1)], ids=lambda h: f"{h[0]}q{h[1]}kv")
def test_prefill_then_decode(heads, local_window_size, softcap, packed, kernel):
    Hq, Hkv = heads
    D, C = 16, 96
    rng = np.random.default_rng(Hq * 1000 + Hkv * 100 + local_window_size * 3 + int(softcap) + packed)
    lengths = np.array([70, 33, 5])  # row 0 crosses the kernels' 64-key tile
    B, S = len(lengths), int(lengths.max())
    attrs = dict(num_heads=Hq, kv_num_heads=Hkv, local_window_size=local_window_size, softcap=softcap)
    cache = (np.zeros((B, Hkv, C, D), np.float32), np.zeros((B, Hkv, C, D), np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    attrs["kernel"] = kernel
    ort_cache = compare_step(Step(rng, B, S, Hq, Hkv, D, packed), cache, ort_cache, lengths - 1, S, S, attrs)
    for _ in range(4):
        lengths = lengths + 1
        ort_cache = compare_step(Step(rng, B, 1, Hq, Hkv, D, packed), cache, ort_cache, lengths - 1,
                                 int(lengths.max()), 1, attrs)


@pytest.mark.parametrize("local_window_size", [-1, 2, 6])
@pytest.mark.parametrize("softcap", [0.0, 1.5])
def test_subsequent_prompt(local_window_size, softcap):
    # B = 1: a 7-token chunk after 10 cached tokens (onnxruntime's "subsequent prompt").
    rng = np.random.default_rng(local_window_size + 10)
    Hq, Hkv, D, C = 4, 2, 32, 24
    cache = (rng.standard_normal((1, Hkv, C, D), dtype=np.float32),
             rng.standard_normal((1, Hkv, C, D), dtype=np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    attrs = dict(num_heads=Hq, kv_num_heads=Hkv, local_window_size=local_window_size, softcap=softcap)
    ort_cache = compare_step(Step(rng, 1, 7, Hq, Hkv, D, False), cache, ort_cache, [16], 17, 7, attrs)
    compare_step(Step(rng, 1, 1, Hq, Hkv, D, False), cache, ort_cache, [17], 18, 1, attrs)


@pytest.mark.parametrize("kernel", ["auto", "prefill", "decode"])
@pytest.mark.parametrize("local_window_size", [1, 63, 64, 65, 128])
def test_window_at_tile_boundaries(local_window_size, kernel):
    # Decode steps at T = 127..132 and a 129-token prompt: window edges on 64-key tile edges.
    rng = np.random.default_rng(local_window_size)
    Hq, Hkv, D, C = 2, 1, 16, 160
    attrs = dict(num_heads=Hq, kv_num_heads=Hkv, local_window_size=local_window_size, kernel=kernel)
    cache = (np.zeros((2, Hkv, C, D), np.float32), np.zeros((2, Hkv, C, D), np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    lengths = np.array([126, 129])
    ort_cache = compare_step(Step(rng, 2, 129, Hq, Hkv, D, False), cache, ort_cache, lengths - 1, 129, 129, attrs)
    for _ in range(3):
        lengths = lengths + 1
        ort_cache = compare_step(Step(rng, 2, 1, Hq, Hkv, D, False), cache, ort_cache, lengths - 1,
                                 int(lengths.max()), 1, attrs)


@pytest.mark.parametrize("D", [8, 128, 256, 512])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_head_sizes_and_scale(D, scale):
    rng = np.random.default_rng(D)
    Hq, Hkv, C = 4, 2, 12
    attrs = dict(num_heads=Hq, kv_num_heads=Hkv, scale=scale)
    cache = (np.zeros((2, Hkv, C, D), np.float32), np.zeros((2, Hkv, C, D), np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    ort_cache = compare_step(Step(rng, 2, 6, Hq, Hkv, D, False), cache, ort_cache, [5, 3], 6, 6, attrs)
    compare_step(Step(rng, 2, 1, Hq, Hkv, D, False), cache, ort_cache, [6, 4], 7, 1, attrs)


@pytest.mark.parametrize("bias_batch,bias_heads", [(2, 4), (1, 4), (2, 1), (1, 1)])
@pytest.mark.parametrize("local_window_size", [-1, 3])
def test_attention_bias(bias_batch, bias_heads, local_window_size):
    rng = np.random.default_rng(bias_batch * 10 + bias_heads)
    Hq, Hkv, D, C = 4, 2, 16, 16
    attrs = dict(num_heads=Hq, kv_num_heads=Hkv, local_window_size=local_window_size, softcap=3.0)
    cache = (np.zeros((2, Hkv, C, D), np.float32), np.zeros((2, Hkv, C, D), np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    lengths, S = np.array([6, 4]), 6
    bias = rng.standard_normal((bias_batch, bias_heads, S, S), dtype=np.float32)
    bias[rng.random(bias.shape) < 0.2] = -np.inf
    ort_cache = compare_step(Step(rng, 2, S, Hq, Hkv, D, False), cache, ort_cache, lengths - 1, S, S, attrs, bias)
    for _ in range(2):
        lengths = lengths + 1
        total = int(lengths.max())
        bias = rng.standard_normal((bias_batch, bias_heads, 1, total), dtype=np.float32)
        ort_cache = compare_step(Step(rng, 2, 1, Hq, Hkv, D, False), cache, ort_cache, lengths - 1, total, 1,
                                 attrs, bias)


def test_total_sequence_length_is_an_upper_bound():
    # A static cache may pass its capacity as total_sequence_length in decode: only T_b matters.
    rng = np.random.default_rng(8)
    Hq, Hkv, D, C = 4, 2, 16, 12
    attrs = dict(num_heads=Hq, kv_num_heads=Hkv, local_window_size=4)
    cache = (np.zeros((2, Hkv, C, D), np.float32), np.zeros((2, Hkv, C, D), np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    ort_cache = compare_step(Step(rng, 2, 5, Hq, Hkv, D, False), cache, ort_cache, [4, 2], 5, 5, attrs)
    for seqlens_k in ([5, 3], [6, 4]):
        ort_cache = compare_step(Step(rng, 2, 1, Hq, Hkv, D, False), cache, ort_cache, seqlens_k, C, 1, attrs)


def test_separate_present_buffers():
    # inplace=False is onnxruntime's unshared mode: present has capacity max(total, C), holds past
    # rows [0, P_b), the new rows, zeros beyond; the past arrays are left untouched.
    rng = np.random.default_rng(3)
    Hq, Hkv, D = 4, 2, 16
    for C, seqlens_k, total in [(5, [5, 2], 6), (9, [5, 2], 6), (0, [0, 0], 1)]:
        step = Step(rng, 2, 1, Hq, Hkv, D, False)
        past = [rng.standard_normal((2, Hkv, C, D), dtype=np.float32) for _ in range(2)] if C else [None, None]
        before = [None if p is None else p.copy() for p in past]
        got = tessera.onnx.group_query_attention(step.query, step.key, step.value, past[0], past[1], seqlens_k, total,
                                                 num_heads=Hq, kv_num_heads=Hkv, inplace=False)
        want = run_ort(step.query, step.key, step.value, past[0], past[1], seqlens_k, total, num_heads=Hq,
                       kv_num_heads=Hkv)
        np.testing.assert_allclose(got[0], want[0], atol=ATOL, rtol=RTOL)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[2], want[2])
        for p, b in zip(past, before):
            if p is not None:
                np.testing.assert_array_equal(p, b)


def test_prompt_without_past():
    rng = np.random.default_rng(4)
    step = Step(rng, 2, 5, 6, 3, 16, False)
    got = tessera.onnx.group_query_attention(step.query, step.key, step.value, None, None, [4, 2], 5,
                                             num_heads=6, kv_num_heads=3, local_window_size=2)
    want = run_ort(step.query, step.key, step.value, None, None, [4, 2], 5, num_heads=6, kv_num_heads=3,
                   local_window_size=2)
    assert got[1].shape == want[1].shape == (2, 3, 5, 16)
    np.testing.assert_allclose(got[0][0], want[0][0], atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(got[0][1, :3], want[0][1, :3], atol=ATOL, rtol=RTOL)
    np.testing.assert_array_equal(got[1][1, :, :3], want[1][1, :, :3])


def test_window_zero_sees_nothing():
    rng = np.random.default_rng(5)
    step = Step(rng, 2, 1, 4, 2, 16, False)
    cache = [rng.standard_normal((2, 2, 8, 16), dtype=np.float32) for _ in range(2)]
    want = run_ort(step.query, step.key, step.value, cache[0].copy(), cache[1].copy(), [3, 5], 6, num_heads=4,
                   kv_num_heads=2, local_window_size=0)
    got = tessera.onnx.group_query_attention(step.query, step.key, step.value, cache[0], cache[1], [3, 5], 6,
                                             num_heads=4, kv_num_heads=2, local_window_size=0)
    assert np.all(want[0] == 0) and np.all(got[0] == 0)


# ---------------------------------------------------------------------------------------------
# Against the numpy model: what onnxruntime leaves unspecified or refuses.

@pytest.mark.parametrize("local_window_size,softcap", [(-1, 0.0), (3, 0.0), (3, 2.0)])
def test_padding_rows_follow_positions(local_window_size, softcap):
    # Padding row s >= T_b of a first prompt sits at position s and sees the row's whole valid
    # cache (window permitting). ORT 1.32.0 agrees except with window + softcap together, where
    # its padding rows differ: they are unspecified, so only the model is compared.
    rng = np.random.default_rng(6)
    Hq, Hkv, D, C = 2, 1, 16, 8
    step = Step(rng, 2, 6, Hq, Hkv, D, False)
    cache = [np.zeros((2, Hkv, C, D), np.float32) for _ in range(2)]
    out = tessera.onnx.group_query_attention(step.query, step.key, step.value, cache[0], cache[1], [5, 1], 6,
                                             num_heads=Hq, kv_num_heads=Hkv, local_window_size=local_window_size,
                                             softcap=softcap)[0]
    want = reference(step.query, cache[0], cache[1], [5, 1], Hq, Hkv, local_window_size, softcap)
    np.testing.assert_allclose(out, want, atol=ATOL, rtol=RTOL)


def test_batched_chunk_after_past():
    # B = 2, S = 3 with different past lengths (ORT 1.32.0 needs query_seqlens for this).
    rng = np.random.default_rng(7)
    Hq, Hkv, D, C = 4, 2, 16, 20
    cache = [rng.standard_normal((2, Hkv, C, D), dtype=np.float32) for _ in range(2)]
    step = Step(rng, 2, 3, Hq, Hkv, D, False)
    out = tessera.onnx.group_query_attention(step.query, step.key, step.value, cache[0], cache[1], [9, 4], 10,
                                             num_heads=Hq, kv_num_heads=Hkv, local_window_size=5)[0]
    np.testing.assert_array_equal(cache[0][1, :, 2:5], step.key[1].reshape(3, Hkv, D).transpose(1, 0, 2))
    want = reference(step.query, cache[0], cache[1], [9, 4], Hq, Hkv, local_window_size=5)
    np.testing.assert_allclose(out, want, atol=ATOL, rtol=RTOL)


# ---------------------------------------------------------------------------------------------
# Bad input raises ValueError naming the operator, the argument and the value.

def test_bad_inputs():
    r = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    good = dict(query=r(2, 1, 64), key=r(2, 1, 32), value=r(2, 1, 32), past_key=r(2, 2, 8, 16),
                past_value=r(2, 2, 8, 16), seqlens_k=[3, 5], total_sequence_length=6)

    def bad(match, num_heads=4, kv_num_heads=2, **over):
        kw = {**{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in good.items()}, **over}
        with pytest.raises(ValueError, match=match):
            tessera.onnx.group_query_attention(num_heads=num_heads, kv_num_heads=kv_num_heads, **kw)

    bad(r"onnx::GroupQueryAttention: seqlens_k\[1\] = 6 is outside \[0, 5\]", seqlens_k=[3, 6])
    bad(r"seqlens_k\[0\] = -1 is outside", seqlens_k=[-1, 5])
    bad(r"seqlens_k must be \[2\], got \[3\]", seqlens_k=[1, 2, 3])
    bad(r"total_sequence_length must be >= 1, got 0", total_sequence_length=0, seqlens_k=[0, 0])
    bad(r"in place, past_key capacity 8 must be >= total_sequence_length 9", total_sequence_length=9)
    bad(r"num_heads 4 is not a multiple of kv_num_heads 3", kv_num_heads=3)
    bad(r"query hidden size 64 is not a multiple of num_heads = 3", num_heads=3, kv_num_heads=1)
    bad(r"key must be \[2, 1, 32\] .*got \[2, 1, 16\]", key=r(2, 1, 16))
    bad(r"key and value must both be given", value=None)
    bad(r"past_key must be \[2, 2, capacity, 16\], got \[2, 1, 8, 16\]", past_key=r(2, 1, 8, 16),
        past_value=r(2, 1, 8, 16))
    bad(r"past_value must have past_key's shape", past_value=r(2, 2, 7, 16))
    bad(r"past_key and past_value must be given together", past_value=None, inplace=False)
    bad(r"seqlens_k\[0\] = 3 means 3 cached tokens .* but past_key is absent", past_key=None, past_value=None)
    bad(r"local_window_size must be -1 or >= 0, got -2", local_window_size=-2)
    bad(r"softcap must be finite and >= 0, got -1", softcap=-1.0)
    bad(r"attention_bias must be \[2 or 1, 4 or 1, 1, 6\] .*got \[2, 4, 1, 5\]", attention_bias=r(2, 4, 1, 5))
    bad(r"attention_bias of shape \[3, 4, 1, 6\] does not broadcast", attention_bias=r(3, 4, 1, 6))
    bad(r"head size 640 is outside \[1, 512\]", query=r(2, 1, 2560), key=r(2, 1, 1280), value=r(2, 1, 1280),
        past_key=r(2, 2, 8, 640), past_value=r(2, 2, 8, 640))
    bad(r"inplace=True needs past_key as a C-contiguous float32", past_key=np.zeros((2, 2, 8, 16)))
    read_only = r(2, 2, 8, 16)
    read_only.flags.writeable = False
    bad(r"inplace=True needs a writable past_value", past_value=read_only)
    bad(r"seqlens_k must be an integer array", seqlens_k=[3.0, 5.0])
