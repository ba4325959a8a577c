# com.microsoft.GroupQueryAttention (onnxruntime 1.32.0, past and present sharing one buffer)
# against tessera.kv stores fed the same tokens: the cache rows [0, T_b) equal a DenseStore's, and
# the valid output rows equal tessera.kv.attend on it (local_window_size W = window (W-1, 0)); a
# RingStore with window W gives the same outputs.
#
# Tolerance: outputs within ATOL = RTOL = 1e-5 (float32 against float32 in another summation
# order, helpers/tolerances.py); caches are byte copies on every side and must match exactly.
from __future__ import annotations

import numpy as np
import pytest

import tessera
import tessera.kv as kv
from helpers.inputs import GqaStep, heads_first
from helpers.ort_graphs import run_gqa_ort
from helpers.tolerances import ATOL, RTOL


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
        inputs = GqaStep(rng, B, S, Hq, Hkv, D)
        query, key, value = inputs.query, inputs.key, inputs.value
        seqlens_k, total = T - 1, int(T.max())
        out, pk, pv = tessera.onnx.group_query_attention(query, key, value, cache[0], cache[1], seqlens_k, total,
                                                         **attrs)
        assert pk is cache[0] and pv is cache[1]
        want, ort_cache_k, ort_cache_v = run_gqa_ort(query, key, value, ort_cache[0], ort_cache[1], seqlens_k, total,
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
