"""tessera.attention / attention_bias against an independent numpy implementation of the mask
definition (docs/attention.md; helpers/reference.py, written from the text, not from the C++)."""
import math

import numpy as np
import pytest

import tessera
from helpers import reference
from helpers.inputs import qkv
from helpers.tolerances import BF16_ULP


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("kernel", ["auto", "reference", "prefill", "decode"])
def test_matches_numpy(seed, kernel):
    rng = np.random.default_rng(seed)
    B, S_q, S_kv = 2, int(rng.integers(1, 9)), int(rng.integers(9, 150))
    q, k, v = qkv(rng, B=B, S_q=S_q, S_kv=S_kv)
    kv_valid = np.array([rng.integers(S_q, S_kv + 1), S_kv], dtype=np.int32)
    k_pos = np.tile(np.arange(S_kv, dtype=np.int32), (B, 1))
    q_pos = kv_valid[:, None] - S_q + np.arange(S_q)[None, :]
    causal = bool(rng.integers(0, 2))
    window = (int(rng.integers(0, 20)), 0 if causal else int(rng.integers(-1, 5))) if seed % 2 else (-1, -1)
    k_block = np.full((B, S_kv), -1, dtype=np.int32)
    start = int(rng.integers(0, S_kv - 5))
    k_block[:, start:start + int(rng.integers(2, 30))] = 3
    q_block = np.take_along_axis(k_block, np.clip(q_pos, 0, S_kv - 1), axis=1)
    softcap = 1.5 if seed % 3 == 0 else 0.0
    scale = 1.0 if seed % 4 == 0 else None
    got = tessera.attention(q, k, v, kv_valid=kv_valid, causal=causal, window=window, q_block=q_block,
                            k_block=k_block, softcap=softcap, scale=scale, kernel=kernel)
    vis = reference.visible(B, S_q, S_kv, q_pos, k_pos, kv_valid, causal, window, q_block, k_block)
    want = reference.attention(q, k, v, vis, 1.0 if scale else 1 / math.sqrt(q.shape[-1]), softcap)
    # f32 kernels vs a float64 reference on values of magnitude ~1: see tests/attention_sweep_test.cc.
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    bias = tessera.attention_bias(B, S_q, S_kv, kv_valid=kv_valid, causal=causal, window=window,
                                  q_block=q_block, k_block=k_block)
    np.testing.assert_array_equal(bias[:, 0] == 0, vis)
    assert np.all(bias[~np.broadcast_to(vis[:, None], bias.shape)] == -np.inf)


def test_defaults_are_bottom_right_causal():
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, B=1, S_q=3, S_kv=10)
    got = tessera.attention(q, k, v)
    q_pos = np.array([[7, 8, 9]])
    vis = reference.visible(1, 3, 10, q_pos, np.arange(10)[None], [10], True, (-1, -1), None, None)
    np.testing.assert_allclose(got, reference.attention(q, k, v, vis, 1 / 4.0), atol=1e-5, rtol=1e-5)


def test_hf_sliding_window_convention():
    # HF sliding_window = W: a key is visible iff q_idx - kv_idx < W, i.e. window = (W - 1, 0).
    W = 4
    bias = tessera.attention_bias(1, 12, 12, window=(W - 1, 0))[0, 0]
    i, j = np.meshgrid(np.arange(12), np.arange(12), indexing="ij")
    np.testing.assert_array_equal(bias == 0, (j <= i) & (i - j < W))


@pytest.mark.parametrize("kind", ["float", "bool"])
def test_dense_bias_broadcast(kind):
    rng = np.random.default_rng(3)
    q, k, v = qkv(rng, B=2, Hq=4, Hkv=1, S_q=5, S_kv=9)
    if kind == "float":
        bias = rng.uniform(-2, 2, (1, 4, 5, 9)).astype(np.float32)
        bias[0, 1, 2, :4] = -np.inf
        dense = bias
    else:
        bias = rng.random((5, 9)) < 0.7
        dense = np.where(bias, 0.0, -np.inf)
    got = tessera.attention(q, k, v, causal=False, bias=bias)
    vis = np.ones((2, 5, 9), dtype=bool)
    want = reference.attention(q, k, v, vis, 1 / math.sqrt(16), bias=dense)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_are_zero():
    rng = np.random.default_rng(1)
    q, k, v = qkv(rng, B=2, S_q=4, S_kv=8)
    out = tessera.attention(q, k, v, kv_valid=[0, 8], q_pos=np.zeros((2, 4), np.int32))
    assert np.all(out[0] == 0)
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize("kv_dtype", ["bf16", "f16"])
def test_kv_dtype_rounds_like_numpy(kv_dtype):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(100000).astype(np.float32) * 10.0 ** rng.integers(-8, 6, 100000),
                        np.array([65504, 65519.9, 65520, 1e-8, -3e-8, 0.0, -0.0], np.float32)]).astype(np.float32)
    if kv_dtype == "f16":
        with np.errstate(over="ignore"):  # values beyond 65520 become inf, as intended
            want = x.astype(np.float16).view(np.uint16)
        got = tessera._tessera._f32_to_f16_bits(x)
    else:
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
        got = tessera._tessera._f32_to_bf16_bits(x)
    np.testing.assert_array_equal(got, want)
    # And attention with rounded K/V equals attention on the pre-rounded f32 values.
    q, k, v = qkv(rng, S_kv=33)
    cast = (lambda a: a.astype(np.float16).astype(np.float32)) if kv_dtype == "f16" else \
        (lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_allclose(tessera.attention(q, k, v, kv_dtype=kv_dtype),
                               tessera.attention(q, cast(k), cast(v)), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("hq, hkv, s_q, d", [(16, 1, 1, 256), (16, 1, 5, 64), (8, 2, 70, 32), (2, 2, 1, 16)])
@pytest.mark.parametrize("kernel", ["auto", "reference", "prefill", "decode"])
def test_bf16_precision_matches_numpy(hq, hkv, s_q, d, kernel):
    # precision="bf16": q and the normalized softmax weights rounded to bf16 (K/V are bf16 already),
    # products exact, sums in float64 in the reference. The kernels round the running numerators of
    # each tile instead of the normalized weights: both are within 2^-8 of the exact weight, so
    # outputs may differ by 2 * 2^-8 * max|v| beyond the f32 tolerance.
    rng = np.random.default_rng(hq + s_q + d)
    s_kv = 300
    q, k, v = qkv(rng, B=1, Hq=hq, Hkv=hkv, S_q=s_q, S_kv=s_kv, D=d, Dv=d)
    got = tessera.attention(q, k, v, kv_dtype="bf16", precision="bf16", kernel=kernel)
    want = reference.bf16_precision_causal_attention(q, k, v)
    v_max = np.abs(reference.round_bf16(v)).max()
    np.testing.assert_allclose(got, want, atol=1e-4 + 2 * BF16_ULP * v_max, rtol=1e-4)
    # and it is not the f32 result: the rounding is really applied
    assert np.abs(got - tessera.attention(q, k, v, kv_dtype="bf16", kernel=kernel)).max() > 1e-5
    if kernel == "auto":
        import tessera.kv as tkv
        store = tkv.DenseStore(1, hkv, d, s_kv, dtype="bf16")
        store.append(k, v, np.arange(s_kv)[None])
        np.testing.assert_allclose(tkv.attend(store, q, precision="bf16"), got, atol=1e-6, rtol=1e-6)


def test_bf16_precision_needs_bf16_kv():
    q, k, v = qkv(np.random.default_rng(1))
    with pytest.raises(ValueError, match="precision bf16 needs bf16 K/V, got f32"):
        tessera.attention(q, k, v, precision="bf16")
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        tessera.attention(q, k, v, kv_dtype="bf16", precision="fp8")


@pytest.mark.parametrize("kwargs, message", [
    (dict(kv_valid=[50, 5]), "kv_valid[0] = 50"),
    (dict(q_pos=np.zeros((2, 9), np.int32)), "q_pos has shape"),
    (dict(k_block=np.zeros((2, 10), np.int32)), "q_block and k_block must be given together"),
    (dict(q_block=np.zeros((2, 3), np.int32), k_block=np.zeros((2, 7), np.int32)), "k_block has shape"),
    (dict(bias=np.full((2, 4, 3, 10), np.nan, np.float32)), "bias is NaN"),
    (dict(bias=np.zeros((7, 10), np.float32)), "does not broadcast"),
    (dict(window=(1,)), "window must be"),
    (dict(kv_dtype="int8"), "unknown kv_dtype"),
    (dict(kernel="fast"), "unknown kernel"),
])
def test_bad_input_raises(kwargs, message):
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, B=2, S_q=3, S_kv=10)
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        tessera.attention(q, k, v, **kwargs)


def test_bad_shapes_raise():
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, Hq=3, Hkv=2)
    with pytest.raises(ValueError, match="not a multiple of kv heads"):
        tessera.attention(q, k, v)
    q, k, v = qkv(rng, D=520, Dv=8)
    with pytest.raises(ValueError, match="exceeds the supported maximum 512"):
        tessera.attention(q, k, v)
    q, k, v = qkv(rng)
    with pytest.raises(ValueError, match="batch mismatch"):
        tessera.attention(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="4-D"):
        tessera.attention(q[0], k, v)
