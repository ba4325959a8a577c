# tessera.onnx.tensor_scatter (ONNX TensorScatter, opset 24) against onnxruntime 1.32.0
# (CPUExecutionProvider) and the ONNX reference implementation (onnx 1.23.2,
# onnx.reference.ReferenceEvaluator).
#
# Semantics verified: present = past with update rows written along `axis` at write_indices[b] + i
# (linear) or that modulo the axis length (circular, also write indices >= max_seq and updates as
# long as the axis); bit-exact for float32/float16 and, by item size, int8/bool/int64/float64/uint16.
# Both refuse a linear write past the axis, a negative write index (the reference silently wraps it
# like a numpy index), a longer-than-cache update, and axis 0.
#
# Tolerance: none. A scatter is a byte copy on every side and must match exactly.
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from helpers.ort_graphs import make_model, session, value_info
from tessera.onnx import tensor_scatter


def scatter_model(past, update, write_indices, axis, mode):
    """One TensorScatter node; write_indices None = the input omitted. Returns (model, feeds)."""
    names = ["past_cache", "update"] + ([] if write_indices is None else ["write_indices"])
    feeds = {"past_cache": past, "update": update, "write_indices": write_indices}
    out = value_info("present", past)
    node = helper.make_node("TensorScatter", names, ["present"], axis=axis, mode=mode)
    return make_model([node], [value_info(n, feeds[n]) for n in names], [out]), {n: feeds[n] for n in names}


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


SCATTER_CASES = [  # cache shape, update shape, axis, mode, write_indices
    ((2, 3, 8, 4), (2, 3, 3, 4), -2, "linear", [0, 5]),
    ((2, 3, 8, 4), (2, 3, 1, 4), -2, "linear", None),          # write_indices absent = zeros
    ((2, 3, 8, 4), (2, 3, 8, 4), -2, "linear", [0, 0]),        # the whole axis
    ((2, 3, 8, 4), (2, 3, 0, 4), -2, "linear", [8, 3]),        # empty update at the end
    ((2, 3, 8, 4), (2, 3, 3, 4), -2, "circular", [6, 7]),      # wraps around
    ((2, 3, 8, 4), (2, 3, 3, 4), -2, "circular", [13, 0]),     # write index >= max_seq
    ((2, 3, 8, 4), (2, 3, 8, 4), -2, "circular", [3, 1]),      # whole axis, rotated
    ((3, 6, 2, 5), (3, 2, 2, 5), 1, "linear", [4, 0, 2]),      # axis 1 (BSHD caches)
    ((3, 6, 2, 5), (3, 4, 2, 5), 1, "circular", [5, 11, 0]),
    ((2, 3, 4, 7), (2, 3, 4, 3), -1, "linear", [0, 4]),        # last axis
    ((2, 3, 4, 7), (2, 3, 4, 5), 3, "circular", [6, 2]),
    ((2, 2, 3, 6, 2), (2, 2, 3, 2, 2), 3, "circular", [5, 2]),  # rank 5
    ((3, 9), (3, 4), 1, "linear", [0, 5, 2]),                  # rank 2
    ((2, 10, 8), (2, 3, 8), -2, "linear", [7, 0]),             # rank 3 [B, S, H*D]
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", SCATTER_CASES, ids=lambda c: f"{c[0]}-{c[1]}-ax{c[2]}-{c[3]}-{c[4]}")
def test_tensor_scatter_matches_ort_and_reference(case, dtype):
    cache_shape, update_shape, axis, mode, wi = case
    rng = np.random.default_rng(len(cache_shape) * 100 + sum(update_shape))
    past = random_array(rng, cache_shape, dtype)
    update = random_array(rng, update_shape, dtype)
    wi = None if wi is None else np.array(wi, dtype=np.int64)
    past_before = past.copy()
    got = tensor_scatter(past, update, wi, axis=axis, mode=mode)
    model, feeds = scatter_model(past, update, wi, axis, mode)
    want = session(model).run(None, feeds)[0]
    ref = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.dtype == past.dtype and got.shape == past.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(past, past_before)  # functional: past_cache is not modified
    assert got is not past


@pytest.mark.parametrize("dtype", [np.int8, np.bool_, np.uint16, np.int64, np.float64])
def test_tensor_scatter_any_dtype_by_item_size(dtype):
    rng = np.random.default_rng(np.dtype(dtype).itemsize)
    for cache_shape, update_shape, axis, mode, wi in (SCATTER_CASES[0], SCATTER_CASES[5], SCATTER_CASES[8]):
        past, update = random_array(rng, cache_shape, dtype), random_array(rng, update_shape, dtype)
        wi = np.array(wi, dtype=np.int64)
        got = tensor_scatter(past, update, wi, axis=axis, mode=mode)
        model, feeds = scatter_model(past, update, wi, axis, mode)
        np.testing.assert_array_equal(got, session(model).run(None, feeds)[0])
        np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feeds)[0])


def test_tensor_scatter_defaults_and_non_contiguous_inputs():
    rng = np.random.default_rng(3)
    past = rng.standard_normal((2, 2, 6, 4)).astype(np.float32)
    update = rng.standard_normal((2, 2, 4, 2)).astype(np.float32).transpose(0, 1, 3, 2)  # a strided view
    want = past.copy()
    want[:, :, :2] = update
    np.testing.assert_array_equal(tensor_scatter(past, update), want)  # axis -2, linear, zeros
    np.testing.assert_array_equal(tensor_scatter(past[:, :, ::1], update, [0, 0]), want)


def _ort_refuses(past, update, wi, axis, mode):
    model, feeds = scatter_model(past, update, wi, axis, mode)
    with pytest.raises(Exception):  # onnxruntime raises its own Fail / InvalidArgument types
        session(model, log_severity=4).run(None, feeds)


def test_tensor_scatter_bad_input():
    past = np.zeros((2, 3, 8, 4), np.float32)
    update = np.ones((2, 3, 3, 4), np.float32)
    # Linear mode: write index + update length must stay inside the cache axis.
    with pytest.raises(ValueError, match=r"write_indices\[1\] = 6 with 3 new entries does not fit the cache axis "
                                         r"of 8 \(linear mode\)"):
        tensor_scatter(past, update, [0, 6])
    _ort_refuses(past, update, np.array([0, 6], np.int64), -2, "linear")
    tensor_scatter(past, update, [0, 6], mode="circular")  # fine when circular
    # Negative write index: refused in both modes (ORT too; the ONNX reference wraps it).
    for mode in ("linear", "circular"):
        with pytest.raises(ValueError, match=r"write_indices\[0\] = -1"):
            tensor_scatter(past, update, [-1, 0], mode=mode)
        _ort_refuses(past, update, np.array([-1, 0], np.int64), -2, mode)
    # Shape mismatch outside the axis, a longer update than the cache, rank mismatch.
    with pytest.raises(ValueError, match=r"update dim 3 = 5 incompatible with cache dim 4"):
        tensor_scatter(past, np.ones((2, 3, 3, 5), np.float32), [0, 0])
    with pytest.raises(ValueError, match=r"update dim 1 = 2 incompatible with cache dim 3"):
        tensor_scatter(past, np.ones((2, 2, 3, 4), np.float32), [0, 0])
    with pytest.raises(ValueError, match=r"update dim 2 = 9 incompatible with cache dim 8"):
        tensor_scatter(past, np.ones((2, 3, 9, 4), np.float32), mode="circular")
    _ort_refuses(past, np.ones((2, 3, 9, 4), np.float32), None, -2, "circular")
    with pytest.raises(ValueError, match=r"cache rank 4 and update rank 3 must match"):
        tensor_scatter(past, np.ones((2, 3, 4), np.float32))
    # Axis: not the batch, inside the rank.
    with pytest.raises(ValueError, match=r"axis must not be the batch axis"):
        tensor_scatter(past, np.ones((1, 3, 8, 4), np.float32), axis=0)
    with pytest.raises(ValueError, match=r"axis 4 out of range for rank 4"):
        tensor_scatter(past, update, axis=4)
    # write_indices of the wrong length or type, dtype mismatch, unknown mode.
    with pytest.raises(ValueError, match=r"write_indices must have shape \(2,\)"):
        tensor_scatter(past, update, [0, 1, 2])
    with pytest.raises(ValueError, match=r"write_indices must be an integer array"):
        tensor_scatter(past, update, [0.0, 1.0])
    with pytest.raises(ValueError, match=r"update dtype float16 differs from past_cache dtype float32"):
        tensor_scatter(past, update.astype(np.float16))
    with pytest.raises(ValueError, match=r"mode 'wrap' is neither"):
        tensor_scatter(past, update, mode="wrap")
    with pytest.raises(ValueError, match=r"object arrays"):
        tensor_scatter(np.zeros((2, 3), object), np.zeros((2, 1), object))
