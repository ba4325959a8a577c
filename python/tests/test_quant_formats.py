"""tessera.quant's block formats against two independent references, bit for bit:

(a) the `gguf` package's numpy (de)quantizers (gguf.quants): dequantization of every type, and
    quantization where gguf implements it (Q4_0, Q5_0, Q8_0, Q4_1, Q5_1);
(b) llama.cpp itself: ggml's shared library from the peers venv (bench/setup_peers.sh), called with
    ctypes: ggml_quantize_chunk (no importance matrix) and dequantize_row_* for every type.
"""
from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
import pytest

from tessera import quant

gguf_quants = pytest.importorskip("gguf.quants")
from gguf.constants import GGMLQuantizationType as GQT  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TYPES = quant.TYPES
GGUF_TYPE = {"q4_0": GQT.Q4_0, "q5_0": GQT.Q5_0, "q8_0": GQT.Q8_0, "q4_k": GQT.Q4_K, "q5_k": GQT.Q5_K,
             "q6_k": GQT.Q6_K, "q4_1": GQT.Q4_1, "q5_1": GQT.Q5_1}
# Where each block keeps its f16 scales (byte offsets): d, and dmin (m) for Q4_K/Q5_K (Q4_1/Q5_1).
SCALE_FIELDS = {"q4_0": (0,), "q5_0": (0,), "q8_0": (0,), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,),
                "q4_1": (0, 2), "q5_1": (0, 2)}


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_same_floats(ours, ref, what):
    """Bit-identical, NaN payloads included (both sides run the same IEEE operations)."""
    ours, ref = bits(ours).reshape(-1), bits(ref).reshape(-1)
    assert ours.shape == ref.shape, what
    bad = np.flatnonzero(ours != ref)
    assert bad.size == 0, (f"{what}: {bad.size} values differ, first at {bad[0]}: "
                           f"{ours.view(np.float32)[bad[0]]!r} vs {ref.view(np.float32)[bad[0]]!r}")


def assert_same_bytes(ours, ref, qtype, what):
    ours, ref = np.asarray(ours, np.uint8).reshape(-1), np.asarray(ref, np.uint8).reshape(-1)
    assert ours.shape == ref.shape, what
    bad = np.flatnonzero(ours != ref)
    assert bad.size == 0, (f"{what}: {bad.size} bytes differ, first in block "
                           f"{bad[0] // quant.block_bytes(qtype)} (byte {bad[0] % quant.block_bytes(qtype)})")


def random_blocks(qtype, nblocks, rng, finite=True):
    """Random bytes, with each f16 scale field replaced by a random finite half (normal,
    subnormal, zero, either sign) unless finite=False."""
    bb = quant.block_bytes(qtype)
    raw = rng.integers(0, 256, size=(nblocks, bb), dtype=np.uint8)
    if finite:
        for off in SCALE_FIELDS[qtype]:
            h = rng.integers(0, 0x7c00, size=nblocks, dtype=np.uint16) | (
                rng.integers(0, 2, size=nblocks, dtype=np.uint16) << 15)
            raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    return raw


def adversarial_blocks(qtype):
    """Extreme scales with all-zero and all-one levels: the largest finite half, the smallest
    subnormal, negative zero, negative scales."""
    bb = quant.block_bytes(qtype)
    out = []
    for h in (0x7bff, 0xfbff, 0x0001, 0x8001, 0x8000, 0x0000, 0x3c00, 0xbc00, 0x0400):
        for fill in (0x00, 0xff, 0x55, 0xaa):
            blk = np.full(bb, fill, dtype=np.uint8)
            for off in SCALE_FIELDS[qtype]:
                blk[off:off + 2] = np.array([h], dtype=np.uint16).view(np.uint8)
            out.append(blk)
    return np.stack(out)


# ---------------------------------------------------------------- (a) the gguf package

@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_matches_gguf(qtype):
    rng = np.random.default_rng(20 + TYPES.index(qtype))
    blocks = np.concatenate([random_blocks(qtype, 2000, rng), adversarial_blocks(qtype)])
    n = blocks.shape[0] * quant.block_size(qtype)
    with np.errstate(all="ignore"):
        ref = gguf_quants.dequantize(blocks.reshape(-1), GGUF_TYPE[qtype])
    assert_same_floats(quant.dequantize(blocks.reshape(-1), qtype, n), ref, f"{qtype} vs gguf")


def quantize_inputs(rng, nblocks):
    """Rows of 32-value blocks in several distributions, plus hand-made edge blocks."""
    rows = {
        "normal": rng.standard_normal(32 * nblocks),
        "heavy": rng.standard_t(2, 32 * nblocks),
        "tiny": rng.standard_normal(32 * nblocks) * 1e-6,
        "subnormal": rng.standard_normal(32 * nblocks) * 1e-39,
        "large": rng.standard_normal(32 * nblocks) * 1e6,
        # np.where, not a product: gguf differs from ggml on blocks of signed zeros (see
        # test_signed_zero_blocks_match_llama_cpp), and a product makes -0.0s.
        "sparse": np.where(rng.random(32 * nblocks) < 0.2, rng.standard_normal(32 * nblocks), 0.0),
        "half_steps": rng.integers(-16, 17, 32 * nblocks) * 0.5,
    }
    edges = np.zeros((6, 32))
    edges[1, 5], edges[1, 9] = 3.0, -3.0     # tie of magnitudes: the first decides the sign
    edges[2, 5], edges[2, 9] = -3.0, 3.0
    edges[3, :] = 7.0                         # constant block
    edges[4, 0] = -8 * 65504.0                # largest f16 scale for Q4_0
    edges[5, :] = np.linspace(-1, 1, 32)
    rows["edges"] = edges.reshape(-1)
    return {k: v.astype(np.float32) for k, v in rows.items()}


@pytest.mark.parametrize("qtype", ["q4_0", "q5_0", "q8_0", "q4_1", "q5_1"])
def test_quantize_matches_gguf(qtype):
    rng = np.random.default_rng(30 + TYPES.index(qtype))
    for name, x in quantize_inputs(rng, 512).items():
        with np.errstate(all="ignore"):
            ref = gguf_quants.quantize(x.reshape(-1, 32), GGUF_TYPE[qtype])
        assert_same_bytes(quant.quantize(x, qtype), ref, qtype, f"{qtype} {name} vs gguf")


# ---------------------------------------------------------------- (b) llama.cpp's ggml

GGML_TYPE = {"q4_0": 2, "q5_0": 6, "q8_0": 8, "q4_k": 12, "q5_k": 13, "q6_k": 14, "q4_1": 3, "q5_1": 7}  # enum ggml_type


def find_ggml():
    env = os.environ.get("TESSERA_GGML_BASE_LIB")
    if env:
        return env
    pattern = os.path.join(ROOT, "bench", ".peers", "venv", "lib", "python3*", "site-packages",
                           "llama_cpp", "lib", "libggml-base.so")
    hits = sorted(glob.glob(pattern))
    return hits[0] if hits else None


@pytest.fixture(scope="module")
def ggml():
    path = find_ggml()
    if path is None:
        pytest.skip("llama.cpp's libggml-base.so not found (bench/setup_peers.sh installs it into "
                    "bench/.peers/venv; or set TESSERA_GGML_BASE_LIB)")
    lib = ctypes.CDLL(path)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
    lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
    for t in TYPES:
        fn = getattr(lib, "dequantize_row_" + t.replace("_k", "_K"))
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lib


def ggml_quantize(lib, qtype, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    rows, n = x.shape
    out = np.zeros(rows * quant.row_bytes(qtype, n), dtype=np.uint8)
    assert not lib.ggml_quantize_requires_imatrix(GGML_TYPE[qtype])
    written = lib.ggml_quantize_chunk(GGML_TYPE[qtype], x.ctypes.data, out.ctypes.data, 0, rows, n, None)
    assert written == out.size
    return out


def ggml_dequantize(lib, qtype, q, n):
    q = np.ascontiguousarray(q, dtype=np.uint8).reshape(-1)
    out = np.empty(n, dtype=np.float32)
    getattr(lib, "dequantize_row_" + qtype.replace("_k", "_K"))(q.ctypes.data, out.ctypes.data, n)
    return out


def row_distributions(rng, rows, n):
    """Weight-like rows and adversarial ones, shape [rows, n] each."""
    shape = (rows, n)
    zero_blocks = rng.standard_normal(shape)
    zero_blocks.reshape(rows, -1, 32)[:, ::3] = 0.0           # every third 32-value block zero
    on_grid = rng.integers(-8, 8, shape) * np.float32(0.0125)  # values already on a Q4_0-like grid
    const_sub = np.repeat(rng.standard_normal((rows, n // 16)), 16, axis=1)  # constant 16-value runs
    return {
        "normal": rng.standard_normal(shape) * 0.02,
        "heavy_tailed": rng.standard_t(1.5, shape),
        "laplace": rng.laplace(0, 1, shape),
        "rows_with_zeros": zero_blocks,
        "sparse": rng.standard_normal(shape) * (rng.random(shape) < 0.1),
        "tiny": rng.standard_normal(shape) * 1e-7,
        "subnormal": rng.standard_normal(shape) * 1e-40,
        "large": rng.standard_normal(shape) * 3e4,
        "positive": rng.random(shape) + 0.5,
        "negative": -rng.random(shape) - 0.5,
        "outliers": rng.standard_normal(shape) + (rng.random(shape) < 0.01) * 100.0,
        "on_grid": on_grid,
        "constant_runs": const_sub,
        "ties": rng.integers(-64, 65, shape) * 0.25,
    }


@pytest.mark.parametrize("qtype", TYPES)
def test_quantize_matches_llama_cpp(ggml, qtype):
    rng = np.random.default_rng(40 + TYPES.index(qtype))
    for name, x in row_distributions(rng, 4, 2048).items():
        x = x.astype(np.float32)
        ref = ggml_quantize(ggml, qtype, x)
        ours = quant.quantize(x, qtype)
        assert_same_bytes(ours, ref, qtype, f"{qtype} {name} vs llama.cpp")
        # ... and our values from those bytes are ggml's values.
        assert_same_floats(quant.dequantize(ours, qtype, x.shape[1]),
                           ggml_dequantize(ggml, qtype, ref, x.size), f"{qtype} {name} dequantized")


@pytest.mark.parametrize("qtype", TYPES)
def test_requantizing_dequantized_rows_matches_llama_cpp(ggml, qtype):
    # Values that sit exactly on a format's levels put every rounding on a tie or a boundary.
    rng = np.random.default_rng(50 + TYPES.index(qtype))
    x = (rng.standard_normal((3, 1024)) * 0.05).astype(np.float32)
    y = quant.dequantize(quant.quantize(x, qtype), qtype, 1024)
    for other in TYPES:
        assert_same_bytes(quant.quantize(y, other), ggml_quantize(ggml, other, y), other,
                          f"{other} of {qtype}-dequantized rows vs llama.cpp")


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_matches_llama_cpp_on_any_bytes(ggml, qtype):
    # Random bytes including NaN and infinite scales: ggml's and our scalar code are the same
    # operations, so even the non-finite values agree bit for bit.
    rng = np.random.default_rng(60 + TYPES.index(qtype))
    blocks = np.concatenate([random_blocks(qtype, 3000, rng, finite=False), adversarial_blocks(qtype)])
    n = blocks.shape[0] * quant.block_size(qtype)
    assert_same_floats(quant.dequantize(blocks.reshape(-1), qtype, n),
                       ggml_dequantize(ggml, qtype, blocks, n), f"{qtype} random bytes vs llama.cpp")


@pytest.mark.parametrize("qtype", TYPES)
def test_signed_zero_blocks_match_llama_cpp(ggml, qtype):
    # A block of zeros some of which are -0.0 (what x * 0 gives for negative x): ggml's strict
    # "amax < |v|" scan never picks one, so d = +0 / -8 = -0 in Q4_0/Q5_0. (gguf's numpy quantizer
    # takes the argmax, a -0.0, and writes d = +0: one byte off llama.cpp, so not the reference here.)
    n = quant.block_size(qtype)
    x = np.zeros((4, 2 * n), dtype=np.float32)
    x[0] = -0.0
    x[1, ::2] = -0.0
    x[2, 0] = -0.0
    x[3, n:] = np.linspace(-1, 1, n)
    x[3, :n:3] = -0.0
    assert_same_bytes(quant.quantize(x, qtype), ggml_quantize(ggml, qtype, x), qtype,
                      f"{qtype} signed zeros vs llama.cpp")


@pytest.mark.parametrize("qtype", TYPES)
def test_non_finite_inputs_match_llama_cpp(ggml, qtype):
    # Not a supported input (callers check weights first), but the bytes still equal ggml's: the
    # same comparisons and casts, so no silent divergence hides behind a NaN.
    rng = np.random.default_rng(70 + TYPES.index(qtype))
    x = rng.standard_normal((2, 1024)).astype(np.float32)
    x[0, rng.integers(0, 1024, 9)] = np.inf
    x[1, rng.integers(0, 1024, 9)] = np.nan
    x[1, 3] = -np.inf
    assert_same_bytes(quant.quantize(x, qtype), ggml_quantize(ggml, qtype, x), qtype,
                      f"{qtype} non-finite input vs llama.cpp")


# ---------------------------------------------------------------- the Python surface

def test_shapes_and_errors():
    x = np.random.default_rng(1).standard_normal((3, 2, 512)).astype(np.float32)
    for t in TYPES:
        q = quant.quantize(x, t)
        assert q.shape == (3, 2, quant.row_bytes(t, 512)) and q.dtype == np.uint8
        y = quant.dequantize(q, t, 512)
        assert y.shape == x.shape and y.dtype == np.float32
        assert quant.first_non_finite_block(q, t, 512) == -1
    with pytest.raises(ValueError, match="q4_k: 288 values are not a whole number of blocks of 256"):
        quant.quantize(np.zeros(288, np.float32), "q4_k")
    with pytest.raises(ValueError, match="unknown quantized type 'q8_1'"):
        quant.quantize(np.zeros(32, np.float32), "q8_1")
    with pytest.raises(ValueError, match="a row of 32 values takes 18 bytes"):
        quant.dequantize(np.zeros(17, np.uint8), "q4_0", 32)
    with pytest.raises(ValueError, match="q8_0: 64 values take 68 bytes, got 34"):
        quant._tessera.dequantize(np.zeros(34, np.uint8), "q8_0", 64)
    with pytest.raises(ValueError, match="not a whole number"):
        quant._tessera.dequantize(np.zeros(0, np.uint8), "q8_0", -32)
    q = quant.quantize(np.ones((4, 256), np.float32), "q6_k")
    q[2, 208:210] = np.array([0x7e00], np.uint16).view(np.uint8)  # NaN d in row 2's block
    assert quant.first_non_finite_block(q, "q6_k", 256) == 2
