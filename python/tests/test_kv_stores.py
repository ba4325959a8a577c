# The stores tessera.kv owns -- DenseStore, RingStore, ConcatStore -- on their own: appends,
# rewinds, views, dtypes, errors, and attend on them.
#
# RingStore vs DenseStore over a random chunk / decode / rewind sequence: the same keys in a
# different slot order, so the tiled kernels differ by float32 reordering (ATOL = RTOL = 1e-5,
# helpers/tolerances.py); the reference kernel accumulates visible keys in position order and must
# be bit-identical.
from __future__ import annotations

import numpy as np
import pytest

import tessera
import tessera.kv as kv
from helpers.tolerances import ATOL, RTOL

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
# Each store's views, dtypes and errors; ConcatStore, the past + new baseline.

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
