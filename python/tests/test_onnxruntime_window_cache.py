# com.tessera.TesseraGroupQueryAttention with sliding_window_cache = 1 (docs/onnxruntime.md,
# "Windowed caches"): window-sized past/present buffers that the operator evicts itself, as
# onnxruntime's GroupQueryAttention does for the model builder's sliding layers.
# Peers: onnxruntime's own com.microsoft.GroupQueryAttention with sliding_window_cache = 1 on the
# same steps (outputs within ATOL/RTOL, resident cache rows equal bit for bit; the resident count
# L(T) computed here from the contract), and the operator itself on a full-length linear cache
# (sliding_window_cache = 0) for steps with image blocks, which onnxruntime cannot run.
# Steps: a prompt longer than the cache (staged inside the op), decode steps across evictions, a
# multi-token step; unshared (present a new buffer) and in place (one OrtValue bound as past and
# present).
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from helpers.ort_graphs import run_gqa_ort
from helpers.tolerances import ATOL, RTOL
from test_onnxruntime_custom_op import HKV, HQ, D, session, tessera_gqa_model

W = 5
STEPS = [11, 1, 1, 1, 1, 1, 1, 3, 1, 1]  # new tokens per step


def resident(T, C):
    """Rows a window-sized cache of capacity C holds after T tokens: all while T <= C, then
    evicted C - W + 1 at a time (onnxruntime's GroupQueryAttention contract)."""
    if T <= C:
        return T
    g = C - W + 1
    return T - g * -(-(T - C) // g)


def step_inputs(rng, S):
    return (rng.standard_normal((1, S, HQ * D), dtype=np.float32),
            rng.standard_normal((1, S, HKV * D), dtype=np.float32),
            rng.standard_normal((1, S, HKV * D), dtype=np.float32))


def run_unshared(sess_run, C, steps, seed, blocks=None):
    """Steps where each present becomes the next past: [(output, present_key, present_value, T)]."""
    rng = np.random.default_rng(seed)
    pk = np.zeros((1, HKV, C, D), np.float32)
    pv = pk.copy()
    T, out = 0, []
    for n, S in enumerate(steps):
        q, k, v = step_inputs(rng, S)
        T += S
        y, pk, pv = sess_run(q, k, v, pk, pv, T, None if blocks is None else blocks[n])
        out.append((y, pk, pv, T))
    return out


def tessera_run(C, **attrs):
    sess = session(tessera_gqa_model(with_blocks=True, **attrs))

    def run(q, k, v, pk, pv, T, blk):
        feeds = {"query": q, "key": k, "value": v, "past_key": pk, "past_value": pv,
                 "seqlens_k": np.array([T - 1], np.int32), "total_sequence_length": np.array(T, np.int32),
                 "block_ids": np.zeros(q.shape[:2], np.int32) if blk is None else blk}
        return sess.run(None, feeds)
    return run


def ort_run(**attrs):
    def run(q, k, v, pk, pv, T, blk):
        return run_gqa_ort(q, k, v, pk, pv, [T - 1], T, num_heads=HQ, kv_num_heads=HKV, **attrs)
    return run


@pytest.mark.parametrize("extra", [0, 3])
@pytest.mark.parametrize("softcap", [0.0, 20.0])
def test_matches_group_query_attention_window_cache(extra, softcap):
    C = W + extra
    attrs = dict(local_window_size=W, softcap=softcap, sliding_window_cache=1)
    ours = run_unshared(tessera_run(C, **attrs), C, STEPS, seed=3)
    theirs = run_unshared(ort_run(**attrs), C, STEPS, seed=3)
    # Every key fed, [HKV, position, D], to check the resident rows independently of either op.
    rng = np.random.default_rng(3)
    keys = np.concatenate([step_inputs(rng, S)[1].reshape(S, HKV, D) for S in STEPS]).transpose(1, 0, 2)
    for (y, pk, pv, T), (y_o, pk_o, pv_o, T_o) in zip(ours, theirs):
        L = resident(T, C)
        assert pk.shape == pk_o.shape == (1, HKV, C, D)
        assert np.array_equal(pk[0, :, :L], keys[:, T - L:T])
        np.testing.assert_allclose(y, y_o, rtol=RTOL, atol=ATOL, err_msg=f"T={T}")
        assert np.array_equal(pk[:, :, :L], pk_o[:, :, :L]) and np.array_equal(pv[:, :, :L], pv_o[:, :, :L])


def test_in_place_equals_unshared():
    """One OrtValue bound as past and present (onnxruntime-genai's shared buffer): the same outputs
    and resident rows as the unshared runs, bit for bit."""
    C = W + 2
    attrs = dict(local_window_size=W, sliding_window_cache=1)
    unshared = run_unshared(tessera_run(C, **attrs), C, STEPS, seed=5)
    sess = session(tessera_gqa_model(with_blocks=True, **attrs))
    pk = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, HKV, C, D), np.float32))
    pv = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, HKV, C, D), np.float32))
    rng = np.random.default_rng(5)
    T = 0
    for S, (y_u, pk_u, pv_u, _) in zip(STEPS, unshared):
        q, k, v = step_inputs(rng, S)
        T += S
        io = sess.io_binding()
        for name, a in {"query": q, "key": k, "value": v, "seqlens_k": np.array([T - 1], np.int32),
                        "total_sequence_length": np.array(T, np.int32),
                        "block_ids": np.zeros((1, S), np.int32)}.items():
            io.bind_cpu_input(name, a)
        io.bind_ortvalue_input("past_key", pk)
        io.bind_ortvalue_input("past_value", pv)
        io.bind_output("output")
        io.bind_ortvalue_output("present_key", pk)
        io.bind_ortvalue_output("present_value", pv)
        sess.run_with_iobinding(io)
        L = resident(T, C)
        assert np.array_equal(io.copy_outputs_to_cpu()[0], y_u)
        assert np.array_equal(pk.numpy()[:, :, :L], pk_u[:, :, :L]) and np.array_equal(pv.numpy()[:, :, :L], pv_u[:, :, :L])


@pytest.mark.parametrize("ignore_window", [0, 1])
def test_image_blocks_equal_the_linear_cache(ignore_window):
    """With image blocks (a block longer than the window in the first prompt, another in a later
    step): the windowed cache gives the outputs of the same operator on a full-length cache."""
    C = W + 1
    steps = [14, 1, 4, 1, 1]
    first = np.zeros((1, 14), np.int32)
    first[0, 2:10] = 1
    later = np.array([[0, 2, 2, 0]], np.int32)
    blocks = [first, np.zeros((1, 1), np.int32), later, np.zeros((1, 1), np.int32), np.zeros((1, 1), np.int32)]
    attrs = dict(local_window_size=W, blocks_ignore_window=ignore_window)
    windowed = run_unshared(tessera_run(C, sliding_window_cache=1, **attrs), C, steps, seed=7, blocks=blocks)
    linear = run_unshared(tessera_run(sum(steps), **attrs), sum(steps), steps, seed=7, blocks=blocks)
    for (y, pk, _, T), (y_l, pk_l, _, _) in zip(windowed, linear):
        np.testing.assert_allclose(y, y_l, rtol=RTOL, atol=ATOL, err_msg=f"T={T}")
        L = resident(T, C)
        assert np.array_equal(pk[:, :, :L], pk_l[:, :, T - L:T])
    # The blocks matter here: without them the outputs differ.
    plain = run_unshared(tessera_run(C, sliding_window_cache=1, **attrs), C, steps, seed=7)
    assert not np.allclose(plain[0][0], windowed[0][0])


@pytest.mark.parametrize("attrs, C, message", [
    (dict(sliding_window_cache=1), W, "sliding_window_cache = 1 needs local_window_size > 0"),
    (dict(sliding_window_cache=1, local_window_size=W), W - 1, "capacity 4 must be >= local_window_size 5"),
    (dict(sliding_window_cache=2, local_window_size=W), W, "sliding_window_cache must be one of 0, 1"),
])
def test_bad_window_cache_raises(attrs, C, message):
    run = tessera_run(C, **attrs)
    with pytest.raises(Exception, match=message):
        run_unshared(run, C, [2], seed=1)
