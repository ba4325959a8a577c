# KV cache stores from Python (tessera.kv) and ONNX TensorScatter (tessera.onnx.tensor_scatter)
# against onnxruntime 1.32.0 (CPUExecutionProvider) and the ONNX reference implementation
# (onnx 1.23.2, onnx.reference.ReferenceEvaluator).
#
# Semantics verified against onnxruntime here:
#   * TensorScatter (opset 24): present = past with update rows written along `axis` at
#     write_indices[b] + i (linear) or that modulo the axis length (circular, also write indices
#     >= max_seq and updates as long as the axis); bit-exact for float32/float16 and, by item size,
#     int8/bool/int64/float64/uint16. Both refuse a linear write past the axis, a negative write
#     index (the reference silently wraps it like a numpy index), a longer-than-cache update, and
#     axis 0.
#   * The opset-24 external-cache decode loop: TensorScatter(key_cache, new_k, write_indices =
#     nonpad) + TensorScatter(value_cache, ...) + Attention(is_causal=1, nonpad_kv_seqlen), one ORT
#     graph per step, against tessera.kv.ExternalStore.append + tessera.kv.attend with q_pos =
#     nonpad[b] - S_q + i (ORT's causal alignment with nonpad_kv_seqlen). A right-padded batched
#     prefill (count < S_new) scatters the padding rows too, exactly as ORT does, so the caches
#     match bit for bit; rewinding the store is ORT with a smaller write_indices/nonpad.
#   * com.microsoft.GroupQueryAttention with past and present sharing one buffer: cache rows
#     [0, T_b) equal a tessera.kv.DenseStore fed the same tokens, and the valid output rows equal
#     tessera.kv.attend on it (local_window_size W = window (W-1, 0)); a RingStore with window W
#     gives the same outputs.
#
# Tolerance: inputs are N(0, 1) float32 and outputs are convex combinations of V rows. ORT (MLAS
# GEMM + per-row softmax) and Tessera (8-lane dot products, online softmax over 64-key tiles,
# split-K merge in decode) accumulate in float32 in different orders: observed differences are
# <= 1e-6, so atol = rtol = 1e-5 leaves ~10x margin while an off-by-one in a write index, a
# position or a window edge moves outputs by O(0.1). Caches are byte copies on both sides and must
# match exactly. RingStore vs DenseStore: the same keys in a different slot order, so the tiled
# kernels differ by float32 reordering (1e-5); the reference kernel accumulates visible keys in
# position order and must be bit-identical.
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tessera
import tessera.kv as kv
from tessera.onnx import tensor_scatter

ATOL = RTOL = 1e-5
GIB = 1 << 30


def _session(model, quiet=True):
    so = ort.SessionOptions()
    # 3 hides ORT's "in-place optimization not activated" warning; 4 also its error log for
    # inputs the test expects it to refuse.
    so.log_severity_level = 3 if quiet else 4
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _model(nodes, inputs, outputs, opsets=(("", 24),)):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 11
    return model


# ---------------------------------------------------------------------------------------------
# TensorScatter.

def scatter_model(past, update, write_indices, axis, mode):
    names = ["past_cache", "update"] + ([] if write_indices is None else ["write_indices"])
    feeds = {"past_cache": past, "update": update, "write_indices": write_indices}
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), feeds[n].shape)
           for n in names]
    out = helper.make_tensor_value_info("present", helper.np_dtype_to_tensor_dtype(past.dtype), past.shape)
    node = helper.make_node("TensorScatter", names, ["present"], axis=axis, mode=mode)
    return _model([node], ins, [out]), {n: feeds[n] for n in names}


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
    want = _session(model).run(None, feeds)[0]
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
        np.testing.assert_array_equal(got, _session(model).run(None, feeds)[0])
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
        _session(model, quiet=False).run(None, feeds)


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


# ---------------------------------------------------------------------------------------------
# External cache decode loop: TensorScatter x2 + Attention (opset 24) vs ExternalStore + attend.

@functools.lru_cache(maxsize=None)
def external_step_session(B, Hq, Hkv, M, D):
    """One graph per step: present_* = TensorScatter(*_cache, new_*, write_indices);
    Y = Attention(Q, present_key, present_value, nonpad_kv_seqlen=nonpad, is_causal=1)."""
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info("key_cache", f, [B, Hkv, M, D]),
           helper.make_tensor_value_info("value_cache", f, [B, Hkv, M, D]),
           helper.make_tensor_value_info("new_k", f, [B, Hkv, "S", D]),
           helper.make_tensor_value_info("new_v", f, [B, Hkv, "S", D]),
           helper.make_tensor_value_info("write_indices", TensorProto.INT64, [B]),
           helper.make_tensor_value_info("Q", f, [B, Hq, "S", D]),
           helper.make_tensor_value_info("nonpad", TensorProto.INT64, [B])]
    outs = [helper.make_tensor_value_info("Y", f, None),
            helper.make_tensor_value_info("present_key", f, [B, Hkv, M, D]),
            helper.make_tensor_value_info("present_value", f, [B, Hkv, M, D])]
    nodes = [helper.make_node("TensorScatter", ["key_cache", "new_k", "write_indices"], ["present_key"]),
             helper.make_node("TensorScatter", ["value_cache", "new_v", "write_indices"], ["present_value"]),
             helper.make_node("Attention", ["Q", "present_key", "present_value", "", "", "", "nonpad"], ["Y"],
                              is_causal=1)]
    return _session(_model(nodes, ins, outs))


# A schedule: ("prefill", lengths) | ("decode",) | ("chunk", S) | ("rewind", row, n).
EXTERNAL_SCHEDULE = ([("decode",)] * 6 + [("chunk", 3), ("decode",), ("rewind", 1, 2), ("rewind", 0, 1),
                                           ("decode",), ("chunk", 2), ("decode",)])


@pytest.mark.parametrize("D,lengths,kernel", [(32, (7, 4), "auto"), (32, (7, 4), "reference"),
                                              (32, (1, 5), "auto"), (256, (3, 9), "auto")])
def test_external_store_matches_ort_decode(D, lengths, kernel):
    B, Hq, Hkv, M = 2, 4, 2, 32
    rng = np.random.default_rng(D + sum(lengths))
    sess = external_step_session(B, Hq, Hkv, M, D)
    k_cache, v_cache = np.zeros((B, Hkv, M, D), np.float32), np.zeros((B, Hkv, M, D), np.float32)
    nonpad = np.zeros(B, np.int64)
    store = kv.ExternalStore(k_cache, v_cache, nonpad)
    ort_k, ort_v = k_cache.copy(), v_cache.copy()
    lengths = np.array(lengths, np.int64)
    schedule = [("prefill",)] + EXTERNAL_SCHEDULE
    for step, op in enumerate(schedule):
        if op[0] == "rewind":
            _, row, n = op
            store.rewind(row, n)  # ORT: the next write_indices / nonpad are simply smaller
            assert nonpad[row] == store.write_pos(row) == store.valid_len(row)
            continue
        S = int(lengths.max()) if op[0] == "prefill" else (op[1] if op[0] == "chunk" else 1)
        count = lengths if op[0] == "prefill" else np.full(B, S, np.int64)
        write_indices = nonpad.copy()
        new_nonpad = write_indices + count
        q = rng.standard_normal((B, Hq, S, D), dtype=np.float32)
        new_k = rng.standard_normal((B, Hkv, S, D), dtype=np.float32)
        new_v = rng.standard_normal((B, Hkv, S, D), dtype=np.float32)
        y, ort_k, ort_v = sess.run(None, {"key_cache": ort_k, "value_cache": ort_v, "new_k": new_k, "new_v": new_v,
                                          "write_indices": write_indices, "Q": q, "nonpad": new_nonpad})
        pos = write_indices[:, None] + np.arange(S)[None, :]
        store.append(new_k, new_v, pos, count=count)
        np.testing.assert_array_equal(nonpad, new_nonpad)
        q_pos = nonpad[:, None] - S + np.arange(S)[None, :]  # ORT: causal offset nonpad[b] - S_q
        got = kv.attend(store, q, q_pos, causal=True, kernel=kernel)
        np.testing.assert_allclose(got, y, atol=ATOL, rtol=RTOL, err_msg=f"step {step} {op}")
        # The store writes the caller's buffers in place, byte for byte what TensorScatter writes.
        np.testing.assert_array_equal(k_cache, ort_k, err_msg=f"step {step} {op}")
        np.testing.assert_array_equal(v_cache, ort_v, err_msg=f"step {step} {op}")
        view = store.view()
        np.testing.assert_array_equal(view[0], k_cache)
        np.testing.assert_array_equal(view[4], nonpad)
        for b in range(B):
            np.testing.assert_array_equal(view[2][b, :nonpad[b]], np.arange(nonpad[b]))
    # The default q_pos is the same nonpad-based alignment.
    q = rng.standard_normal((B, Hq, 1, D), dtype=np.float32)
    np.testing.assert_array_equal(kv.attend(store, q, kernel=kernel),
                                  kv.attend(store, q, nonpad[:, None] - 1, kernel=kernel))


def test_external_store_reads_caller_buffers_in_place():
    # attend reads k_cache/v_cache directly: a change made by the caller is seen without a copy.
    rng = np.random.default_rng(11)
    B, Hkv, M, D = 1, 1, 8, 16
    k_cache, v_cache = np.zeros((B, Hkv, M, D), np.float32), np.zeros((B, Hkv, M, D), np.float32)
    nonpad = np.zeros(B, np.int64)
    store = kv.ExternalStore(k_cache, v_cache, nonpad)
    store.append(rng.standard_normal((B, Hkv, 3, D), dtype=np.float32),
                 rng.standard_normal((B, Hkv, 3, D), dtype=np.float32), np.arange(3))
    q = rng.standard_normal((B, 2, 1, D), dtype=np.float32)
    before = kv.attend(store, q)
    v_cache[0, 0, :3] += 1.0  # convex combination of V rows: every output moves by exactly +1
    np.testing.assert_allclose(kv.attend(store, q), before + 1.0, atol=1e-6)
    # The store keeps the arrays alive on its own.
    del k_cache, v_cache, nonpad
    store.append(np.ones((B, Hkv, 1, D), np.float32), np.ones((B, Hkv, 1, D), np.float32), [[3]])
    assert store.valid_len(0) == 4 and store.nonpad_kv_seqlen[0] == 4


def test_external_store_float16_cache_is_tensor_scatter():
    rng = np.random.default_rng(12)
    B, Hkv, M, D = 2, 2, 10, 8
    k_cache = np.zeros((B, Hkv, M, D), np.float16)
    v_cache = np.zeros((B, Hkv, M, D), np.float16)
    nonpad = np.array([2, 5], np.int64)
    store = kv.ExternalStore(k_cache, v_cache, nonpad)
    assert store.dtype == "f16"
    new_k = rng.standard_normal((B, Hkv, 3, D)).astype(np.float16)
    new_v = rng.standard_normal((B, Hkv, 3, D)).astype(np.float16)
    want_k = tensor_scatter(k_cache, new_k, nonpad)
    want_v = tensor_scatter(v_cache, new_v, nonpad)
    store.append(new_k, new_v, nonpad[:, None] + np.arange(3))
    np.testing.assert_array_equal(k_cache, want_k)
    np.testing.assert_array_equal(v_cache, want_v)
    np.testing.assert_array_equal(nonpad, [5, 8])
    raw = store.view(raw=True)
    assert raw[0].dtype == np.float16
    np.testing.assert_array_equal(store.view()[0], k_cache.astype(np.float32))
    q = rng.standard_normal((B, 2, 3, D), dtype=np.float32)
    want = tessera.attention(q, k_cache.astype(np.float32), v_cache.astype(np.float32), kv_valid=nonpad,
                             q_pos=nonpad[:, None] - 3 + np.arange(3))
    np.testing.assert_allclose(kv.attend(store, q), want, atol=ATOL, rtol=RTOL)


def test_external_store_bad_input():
    k = np.zeros((2, 2, 8, 4), np.float32)
    v = np.zeros((2, 2, 8, 4), np.float32)
    with pytest.raises(ValueError, match=r"nonpad_kv_seqlen\[1\] = 9 is outside \[0, 8\]"):
        kv.ExternalStore(k, v, np.array([0, 9], np.int64))
    with pytest.raises(ValueError, match=r"nonpad_kv_seqlen must be int64"):
        kv.ExternalStore(k, v, np.zeros(2, np.int32))
    with pytest.raises(ValueError, match=r"must be a numpy array"):
        kv.ExternalStore(k, v, [0, 0])
    with pytest.raises(ValueError, match=r"v_cache .* does not match k_cache"):
        kv.ExternalStore(k, np.zeros((2, 2, 7, 4), np.float32), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"must be C-contiguous"):
        kv.ExternalStore(k, np.zeros((2, 2, 4, 8), np.float32).transpose(0, 1, 3, 2), np.zeros(2, np.int64))
    ro = k.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"k_cache must be writable"):
        kv.ExternalStore(ro, v, np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"dtype float64 is not float32 or float16"):
        kv.ExternalStore(k.astype(np.float64), v.astype(np.float64), np.zeros(2, np.int64))
    nonpad = np.array([6, 0], np.int64)
    store = kv.ExternalStore(k, v, nonpad)
    # Linear TensorScatter: the whole update must fit after nonpad, even for a row with count < S_new.
    with pytest.raises(ValueError, match=r"does not fit the cache axis of 8 \(linear mode\)"):
        store.append(np.ones((2, 2, 3, 4)), np.ones((2, 2, 3, 4)), [[6, 7, 8], [0, 1, 2]], count=[2, 3])
    np.testing.assert_array_equal(nonpad, [6, 0])
    assert not k.any()
    with pytest.raises(ValueError, match=r"position 5 of row 0 does not follow 5"):  # prefilled slots hold 0..5
        store.append(np.ones((2, 2, 1, 4)), np.ones((2, 2, 1, 4)), [[5], [0]])
    with pytest.raises(ValueError, match=r"cannot drop 1"):
        store.rewind(1, 1)
    with pytest.raises(IndexError):
        store.write_pos(2)


# ---------------------------------------------------------------------------------------------
# com.microsoft.GroupQueryAttention (shared past/present buffer) vs DenseStore / RingStore.

def run_ort_gqa(query, key, value, past_key, past_value, seqlens_k, total, **attrs):
    feeds = {"query": query, "key": key, "value": value, "past_key": past_key, "past_value": past_value,
             "seqlens_k": np.asarray(seqlens_k, np.int32), "total_sequence_length": np.array(total, np.int32)}
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in ("output", "present_key", "present_value")]
    node = helper.make_node("GroupQueryAttention", list(feeds), ["output", "present_key", "present_value"],
                            domain="com.microsoft", **attrs)
    model = _model([node], ins, outs, opsets=(("", 21), ("com.microsoft", 1)))
    model.ir_version = 10
    return _session(model).run(None, feeds)


def heads_first(x, H):
    """[B, S, H*D] -> [B, H, S, D]."""
    B, S, HD = x.shape
    return np.ascontiguousarray(x.reshape(B, S, H, HD // H).transpose(0, 2, 1, 3))


@pytest.mark.parametrize("local_window_size", [-1, 1, 3, 6])
@pytest.mark.parametrize("D,softcap,scale", [(32, 0.0, None), (32, 2.0, 0.3), (256, 0.0, None)])
def test_gqa_cache_is_dense_store(D, softcap, scale, local_window_size):
    B, Hq, Hkv, C, W = 2, 4, 2, 24, local_window_size
    rng = np.random.default_rng(D + W + int(softcap))
    lengths = np.array([9, 5])
    S0 = int(lengths.max())
    attrs = dict(num_heads=Hq, kv_num_heads=Hkv, local_window_size=W, softcap=softcap)
    if scale is not None:
        attrs["scale"] = scale
    score = dict(softcap=softcap, scale=scale)  # the same scores for tessera.kv.attend
    cache = (np.zeros((B, Hkv, C, D), np.float32), np.zeros((B, Hkv, C, D), np.float32))
    ort_cache = (cache[0].copy(), cache[1].copy())
    dense = kv.DenseStore(B, Hkv, D, C)
    ring = kv.RingStore(B, Hkv, D, W, S0) if W > 0 else None
    window = (W - 1, 0) if W > 0 else (-1, -1)
    T = np.zeros(B, np.int64)
    for step in range(8):  # a right-padded prompt, then 7 decode steps (the ring wraps)
        S = S0 if step == 0 else 1
        count = lengths if step == 0 else np.ones(B, np.int64)
        P = T.copy()
        T = T + count
        query = rng.standard_normal((B, S, Hq * D), dtype=np.float32)
        key = rng.standard_normal((B, S, Hkv * D), dtype=np.float32)
        value = rng.standard_normal((B, S, Hkv * D), dtype=np.float32)
        seqlens_k, total = T - 1, int(T.max())
        out, pk, pv = tessera.onnx.group_query_attention(query, key, value, cache[0], cache[1], seqlens_k, total,
                                                         **attrs)
        assert pk is cache[0] and pv is cache[1]
        want, ort_cache_k, ort_cache_v = run_ort_gqa(query, key, value, ort_cache[0], ort_cache[1], seqlens_k, total,
                                                     **attrs)
        ort_cache = (ort_cache_k, ort_cache_v)
        pos = P[:, None] + np.arange(S)[None, :]
        k4, v4, q4 = heads_first(key, Hkv), heads_first(value, Hkv), heads_first(query, Hq)
        dense.append(k4, v4, pos, count=count)
        got = kv.attend(dense, q4, pos, causal=True, window=window, **score)
        view = dense.view()
        for b in range(B):
            n = int(T[b])
            assert view[4][b] == n == dense.write_pos(b)
            np.testing.assert_array_equal(view[0][b, :, :n], cache[0][b, :, :n], err_msg=f"step {step}")
            np.testing.assert_array_equal(view[1][b, :, :n], cache[1][b, :, :n], err_msg=f"step {step}")
            np.testing.assert_array_equal(ort_cache[0][b, :, :n], cache[0][b, :, :n])
            np.testing.assert_array_equal(ort_cache[1][b, :, :n], cache[1][b, :, :n])
            rows = int(count[b])  # valid query rows (the rest of a prompt is padding)
            g = got[b, :, :rows].transpose(1, 0, 2).reshape(rows, Hq * D)
            np.testing.assert_allclose(g, out[b, :rows], atol=ATOL, rtol=RTOL, err_msg=f"step {step} row {b}")
            np.testing.assert_allclose(g, want[b, :rows], atol=ATOL, rtol=RTOL, err_msg=f"step {step} row {b}")
        if ring is not None:
            ring.append(k4, v4, pos, count=count)
            got_ring = kv.attend(ring, q4, pos, causal=True, window=window, **score)
            for b in range(B):
                np.testing.assert_allclose(got_ring[b, :, :count[b]], got[b, :, :count[b]], atol=ATOL, rtol=RTOL)
    if ring is not None:
        assert ring.capacity == W - 1 + S0 and int(T.max()) > ring.capacity  # it wrapped


# ---------------------------------------------------------------------------------------------
# RingStore vs DenseStore over a random chunk / decode / rewind sequence (sliding-window mask).

NO_TOKEN = 2**31 - 1  # k_pos of a slot that holds no token (cleared by a rewind)


def sorted_tokens(store, b):
    """Row b's tokens ordered by position: (k, v, pos, block). After a ring rewind, slots below
    valid_len may hold no token (position NO_TOKEN, hidden by the causal mask): skipped."""
    k, v, k_pos, k_block, valid = store.view()
    slots = np.flatnonzero(k_pos[b, :int(valid[b])] != NO_TOKEN)
    order = slots[np.argsort(k_pos[b, slots], kind="stable")]
    return k[b][:, order], v[b][:, order], k_pos[b, order], k_block[b, order]


@pytest.mark.parametrize("W,max_chunk,dtype", [(1, 4, "f32"), (5, 6, "f32"), (16, 7, "f32"), (9, 5, "bf16")])
def test_ring_matches_dense(W, max_chunk, dtype):
    B, Hq, Hkv, D = 2, 4, 2, 32
    rng = np.random.default_rng(W * 100 + max_chunk)
    dense = kv.DenseStore(B, Hkv, D, 400, dtype=dtype)
    ring = kv.RingStore(B, Hkv, D, W, max_chunk, dtype=dtype)
    assert ring.capacity == W - 1 + max_chunk and ring.window == W
    window = (W - 1, 0)
    next_pos = np.array([0, 100])  # rows at different absolute positions
    next_block = 0
    refused = 0
    for step in range(40):
        if step % 7 == 6:  # try a rewind on one row; the ring refuses once its window was overwritten
            b, n = int(rng.integers(B)), int(rng.integers(1, max_chunk + W))
            n = min(n, dense.write_pos(b))
            if ring.can_rewind(b, n):
                ring.rewind(b, n)
                dense.rewind(b, n)
                next_pos[b] -= n
            else:
                before = ring.view()
                with pytest.raises(ValueError, match="needed by the window was overwritten"):
                    ring.rewind(b, n)
                for x, y in zip(before, ring.view()):
                    np.testing.assert_array_equal(x, y)
                refused += 1
            continue
        count = rng.integers(0, max_chunk + 1, B) if step % 3 else np.ones(B, np.int64)  # chunks and decodes
        S = max(int(count.max()), 1)
        pos = next_pos[:, None] + np.arange(S)[None, :]
        block = None
        if step % 5 == 2:  # an image chunk: its tokens share a block id (bidirectional within it)
            block = np.full((B, S), next_block) + np.arange(B)[:, None]
            next_block += B
        k = rng.standard_normal((B, Hkv, S, D), dtype=np.float32)
        v = rng.standard_normal((B, Hkv, S, D), dtype=np.float32)
        q = rng.standard_normal((B, Hq, S, D), dtype=np.float32)
        dense.append(k, v, pos, count=count, block=block)
        ring.append(k, v, pos, count=count, block=block)
        next_pos += count
        q_block = None if block is None else block
        outs = {}
        for kernel in ("auto", "reference"):
            outs[kernel] = [kv.attend(s, q, pos, window=window, q_block=q_block, kernel=kernel) for s in (dense, ring)]
        for b in range(B):
            c = int(count[b])
            np.testing.assert_allclose(outs["auto"][1][b, :, :c], outs["auto"][0][b, :, :c], atol=ATOL, rtol=RTOL,
                                       err_msg=f"step {step} row {b}")
            np.testing.assert_array_equal(outs["reference"][1][b, :, :c], outs["reference"][0][b, :, :c],
                                          err_msg=f"step {step} row {b}")
            np.testing.assert_allclose(outs["auto"][0][b, :, :c], outs["reference"][0][b, :, :c], atol=ATOL,
                                       rtol=RTOL)
            # The ring holds the newest min(written, capacity) tokens of the dense row, bit for bit.
            assert ring.write_pos(b) == dense.write_pos(b)
            assert ring.valid_len(b) == min(ring.write_pos(b), ring.capacity)
            rk, rv, rp, rb = sorted_tokens(ring, b)
            dk, dv, dp, db = sorted_tokens(dense, b)
            n = rp.size
            if n:
                np.testing.assert_array_equal(rk, dk[:, dp.size - n:])
                np.testing.assert_array_equal(rv, dv[:, dp.size - n:])
                np.testing.assert_array_equal(rp, dp[dp.size - n:])
                np.testing.assert_array_equal(rb, db[dp.size - n:])
    assert dense.write_pos(0) > ring.capacity and dense.write_pos(1) > ring.capacity  # the ring wrapped
    # The ring keeps max_chunk tokens beyond the window: dropping max_chunk is exact, one more
    # needs a key it has overwritten and is refused. With W = 1 the window needs no key, but the
    # token before the new end must survive (it carries the row's newest position): max_chunk - 1.
    limit = max_chunk - 1 if W == 1 else max_chunk
    for b in range(B):
        assert ring.can_rewind(b, limit)
        assert not ring.can_rewind(b, limit + 1)


def test_ring_window_1_rewind_keeps_the_newest_position():
    """With window 1 the window needs no earlier token, but the row's newest position (positions must
    keep increasing) needs the token before the new end: a rewind that would lose it is refused, one
    that keeps it works and the next append continues from there."""
    one = np.ones((1, 1, 1, 8), np.float32)
    ring = kv.RingStore(1, 1, 8, window=1, max_chunk=2)  # capacity 2: tokens 1 and 2 after 3 appends
    for t in range(3):
        ring.append(one, one, [[t]])
    assert not ring.can_rewind(0, 2)  # token 0 (the new newest) was overwritten
    with pytest.raises(ValueError, match="overwritten"):
        ring.rewind(0, 2)
    assert ring.can_rewind(0, 1)
    ring.rewind(0, 1)
    ring.append(one, one, [[2]])  # continues after position 1


def test_ring_refuses_oversized_chunk():
    ring = kv.RingStore(1, 1, 8, 4, 2)
    with pytest.raises(ValueError, match=r"chunk of 3 tokens exceeds max_chunk 2"):
        ring.append(np.ones((1, 1, 3, 8)), np.ones((1, 1, 3, 8)), [[0, 1, 2]])
    assert ring.write_pos(0) == 0


# ---------------------------------------------------------------------------------------------
# Owned stores: dtypes, views, errors, the concat baseline.

def test_owned_store_dtypes_and_views():
    rng = np.random.default_rng(21)
    B, Hkv, D, Dv = 2, 2, 8, 12
    k = rng.standard_normal((B, Hkv, 3, D), dtype=np.float32)
    v = rng.standard_normal((B, Hkv, 3, Dv), dtype=np.float32)
    for dtype, bits in (("f32", None), ("bf16", tessera._tessera._f32_to_bf16_bits),
                        ("f16", tessera._tessera._f32_to_f16_bits)):
        store = kv.DenseStore(B, Hkv, D, 5, v_head_dim=Dv, dtype=dtype)
        assert store.dtype == dtype and store.capacity == 5 and store.v_head_dim == Dv
        store.append(k, v, [[10, 11, 12], [0, 4, 9]], count=[3, 2], block=[[-1, 7, 7], [-1, -1, -1]])
        vk, vv, k_pos, k_block, valid = store.view()
        assert vk.shape == (B, Hkv, 5, D) and vv.shape == (B, Hkv, 5, Dv) and vk.dtype == np.float32
        np.testing.assert_array_equal(valid, [3, 2])
        np.testing.assert_array_equal(k_pos, [[10, 11, 12, NO_TOKEN, NO_TOKEN], [0, 4] + [NO_TOKEN] * 3])
        np.testing.assert_array_equal(k_block, [[-1, 7, 7, -1, -1], [-1] * 5])
        raw = store.view(raw=True)[0]
        if bits is None:
            np.testing.assert_array_equal(vk[0, :, :3], k[0])
        else:
            np.testing.assert_array_equal(raw[0, :, :3].view(np.uint16).reshape(-1), bits(k[0]))
            assert raw.dtype == (np.float16 if dtype == "f16" else np.uint16)
        # attend reads the stored dtype: equal to tessera.attention with the same kv_dtype.
        q = rng.standard_normal((B, 4, 2, D), dtype=np.float32)
        q_pos = [[11, 12], [4, 9]]
        want = tessera.attention(q, vk, vv, q_pos=q_pos, k_pos=k_pos, kv_valid=valid, kv_dtype="f32")
        np.testing.assert_allclose(kv.attend(store, q, q_pos), want, atol=ATOL, rtol=RTOL)
        store.rewind(0, 2)
        assert store.write_pos(0) == 1 and store.view()[2][0, 1] == NO_TOKEN


def test_empty_stores_attend_to_nothing():
    q = np.ones((2, 2, 1, 8), np.float32)
    stores = (kv.DenseStore(2, 1, 8, 4), kv.RingStore(2, 1, 8, 3, 2), kv.ConcatStore(2, 1, 8),
              kv.ExternalStore(np.zeros((2, 1, 4, 8), np.float32), np.zeros((2, 1, 4, 8), np.float32),
                               np.zeros(2, np.int64)))
    for store in stores:
        np.testing.assert_array_equal(kv.attend(store, q, [[0], [0]]), 0)  # no visible key: zero rows
        k, v, k_pos, k_block, valid = store.view()
        assert k.shape == (2, 1, store.capacity, 8) and k_pos.shape == (2, store.capacity)
        np.testing.assert_array_equal(valid, 0)


def test_concat_store_is_past_plus_new():
    rng = np.random.default_rng(22)
    B, Hkv, D = 2, 1, 16
    concat, dense = kv.ConcatStore(B, Hkv, D), kv.DenseStore(B, Hkv, D, 16)
    ks, vs = [], []
    for step, S in enumerate((4, 1, 1, 3)):
        k = rng.standard_normal((B, Hkv, S, D), dtype=np.float32)
        v = rng.standard_normal((B, Hkv, S, D), dtype=np.float32)
        pos = sum(x.shape[2] for x in ks) + np.arange(S)
        for s in (concat, dense):
            s.append(k, v, pos)
        ks.append(k)
        vs.append(v)
        assert concat.capacity == concat.write_pos(0) == sum(x.shape[2] for x in ks)
        np.testing.assert_array_equal(concat.view()[0], np.concatenate(ks, axis=2))
        q = rng.standard_normal((B, 2, S, D), dtype=np.float32)
        np.testing.assert_array_equal(kv.attend(concat, q, kernel="reference"), kv.attend(dense, q, kernel="reference"))
        np.testing.assert_allclose(kv.attend(concat, q), tessera.attention(q, np.concatenate(ks, 2),
                                                                           np.concatenate(vs, 2)), atol=ATOL, rtol=RTOL)
    with pytest.raises(ValueError, match=r"every row must append the same number of tokens"):
        concat.append(np.ones((B, Hkv, 2, D)), np.ones((B, Hkv, 2, D)), [[20, 21]], count=[2, 1])
    assert not concat.can_rewind(0, 1)
    with pytest.raises(ValueError, match=r"does not support rewind"):
        concat.rewind(0, 1)


def test_store_bad_input():
    store = kv.DenseStore(2, 2, 8, 4)
    k = np.ones((2, 2, 3, 8), np.float32)
    with pytest.raises(ValueError, match=r"kv heads 1/1 != cache kv heads 2"):
        store.append(np.ones((2, 1, 3, 8)), np.ones((2, 1, 3, 8)), [0, 1, 2])
    with pytest.raises(ValueError, match=r"position 1 of row 1 does not follow 1"):
        store.append(k, k, [[0, 1, 2], [0, 1, 1]])
    with pytest.raises(ValueError, match=r"pos has shape \(3, 3\), expected \(2, 3\)"):
        store.append(k, k, np.zeros((3, 3), np.int32))
    with pytest.raises(ValueError, match=r"count\[0\] = 4 is outside \[0, 3\]"):
        store.append(k, k, [0, 1, 2], count=[4, 0])
    store.append(k, k, [0, 1, 2], count=[3, 1])
    with pytest.raises(ValueError, match=r"row 0 holds 3 tokens; appending 2 exceeds capacity 4"):
        store.append(k[:, :, :2], k[:, :, :2], [[3, 4], [1, 2]])
    assert store.write_pos(0) == 3 and store.write_pos(1) == 1  # refused appends change nothing
    with pytest.raises(ValueError, match=r"row 1 holds 1 tokens, cannot drop 2"):
        store.rewind(1, 2)
    with pytest.raises(ValueError, match=r"unknown dtype 'f64'"):
        kv.DenseStore(1, 1, 8, 4, dtype="f64")
    with pytest.raises(ValueError, match=r"window 0 and max_chunk 1 must be >= 1"):
        kv.RingStore(1, 1, 8, 0, 1)
    with pytest.raises(ValueError, match=r"capacity 0 < 1"):
        kv.DenseStore(1, 1, 8, 0)
    with pytest.raises(ValueError, match=r"q has batch 1, the store 2"):
        kv.attend(store, np.ones((1, 2, 1, 8)), [[3]])
    with pytest.raises(ValueError, match=r"unknown kernel"):
        kv.attend(store, np.ones((2, 2, 1, 8)), [[3], [1]], kernel="fast")
    with pytest.raises(ValueError):  # validated by the kernels: Hq not a multiple of Hkv
        kv.attend(store, np.ones((2, 3, 1, 8)), [[3], [1]])


# ---------------------------------------------------------------------------------------------
# Memory plan.

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
