# tessera.kv.ExternalStore: a KV cache in the caller's numpy buffers, written the way ONNX
# TensorScatter writes them (nonpad_kv_seqlen = the valid length per row).
#
# The opset-24 external-cache decode loop: TensorScatter(key_cache, new_k, write_indices = nonpad)
# + TensorScatter(value_cache, ...) + Attention(is_causal=1, nonpad_kv_seqlen), one onnxruntime
# 1.32.0 graph per step, against ExternalStore.append + tessera.kv.attend with q_pos = nonpad[b] -
# S_q + i (ORT's causal alignment with nonpad_kv_seqlen). A right-padded batched prefill (count <
# S_new) scatters the padding rows too, exactly as ORT does, so the caches match bit for bit;
# rewinding the store is ORT with a smaller write_indices/nonpad.
#
# Tolerance: outputs within ATOL = RTOL = 1e-5 (float32 against float32 in another summation
# order, helpers/tolerances.py); caches are byte copies on both sides and must match exactly.
from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper

import tessera
import tessera.kv as kv
from helpers.ort_graphs import make_model, session
from helpers.tolerances import ATOL, RTOL
from tessera.onnx import tensor_scatter


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
    return session(make_model(nodes, ins, outs))


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
