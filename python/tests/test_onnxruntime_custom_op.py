# com.tessera.TesseraGroupQueryAttention in an onnxruntime session (libtessera_ort.so,
# docs/onnxruntime.md): one decoder step graph serving a prefill with image blocks and plain decode
# with the shared past/present buffer (IO binding of one OrtValue to past_key and present_key).
#
# Peers, each on the same inputs:
# - tessera.attention (the structured-mask kernels through the Python binding) on the cache the
#   step leaves, with the mask given as positions and block ids;
# - onnxruntime's own ONNX Attention (opset 23) with past_key/past_value and a dense float bias
#   that numpy builds pair by pair from the rule (window AND (causal OR same block)): what an
#   exporter falls back to for the image mask today.
# Cache rows written by a step are the step's K/V bit for bit (compared with ==, and against
# Attention's present_key); rows not yet written keep their bytes.
# Tolerance: ATOL = RTOL = 1e-5 (helpers/tolerances.py), float32 in another summation order.
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tessera
from helpers.ort_graphs import make_model, run_attention_ort, run_gqa_ort, single_node_model
from helpers.tolerances import ATOL, RTOL

INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
          "cos_cache", "sin_cache", "block_ids")
OUTPUTS = ("output", "present_key", "present_value")
B, HQ, HKV, D, CAP = 1, 4, 2, 8, 24


def tessera_gqa_model(with_blocks=True, **attrs):
    """A graph of one TesseraGroupQueryAttention node (no rotary caches); dynamic shapes, so one
    session serves prefill and decode."""
    names = [n for n in INPUTS if n not in ("cos_cache", "sin_cache") and (with_blocks or n != "block_ids")]
    node_inputs = [n if n in names else "" for n in INPUTS]
    while node_inputs[-1] == "":
        node_inputs.pop()
    node = helper.make_node("TesseraGroupQueryAttention", node_inputs, list(OUTPUTS), domain="com.tessera",
                            num_heads=HQ, kv_num_heads=HKV, **attrs)
    f, i32 = TensorProto.FLOAT, TensorProto.INT32
    shapes = {"query": (f, ["b", "s", HQ * D]), "key": (f, ["b", "s", HKV * D]), "value": (f, ["b", "s", HKV * D]),
              "past_key": (f, ["b", HKV, "c", D]), "past_value": (f, ["b", HKV, "c", D]),
              "seqlens_k": (i32, ["b"]), "total_sequence_length": (i32, []), "block_ids": (i32, ["b", "s"])}
    inputs = [helper.make_tensor_value_info(n, *shapes[n]) for n in names]
    outputs = [helper.make_tensor_value_info(n, f, None) for n in OUTPUTS]
    return make_model([node], inputs, outputs, (("", 21), ("com.tessera", 1)), ir_version=10)


def session(model):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.register_custom_ops_library(tessera.onnx.onnxruntime_library())
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def visible(qp, qb, kp, kb, window):
    """The mask rule, pair by pair: within the window (W keys including the query's own) and
    causal, or in the query's image block (bidirectional)."""
    in_window = window < 0 or qp - kp <= window - 1
    return in_window and (kp <= qp or (qb > 0 and qb == kb))


def dense_bias(q_pos, q_blk, k_blk, T, window):
    """[S, T] additive bias: 0 where visible, -inf elsewhere, built pair by pair."""
    bias = np.full((len(q_pos), T), -np.inf, np.float32)
    for i, (qp, qb) in enumerate(zip(q_pos, q_blk)):
        for j in range(T):
            if visible(qp, qb, j, k_blk[j], window):
                bias[i, j] = 0.0
    return bias


class Decoder:
    """Runs steps of one session with the shared buffer and keeps what every peer needs."""

    def __init__(self, window=-1, softcap=0.0, scale=None):
        attrs = {"local_window_size": window, "softcap": softcap}
        if scale is not None:
            attrs["scale"] = scale
        self.window, self.softcap, self.scale = window, softcap, scale
        self.sess = session(tessera_gqa_model(**attrs))
        self.past_k = ort.OrtValue.ortvalue_from_numpy(np.zeros((B, HKV, CAP, D), np.float32))
        self.past_v = ort.OrtValue.ortvalue_from_numpy(np.zeros((B, HKV, CAP, D), np.float32))
        self.k_rows, self.v_rows, self.blocks = [], [], []  # [S, Hkv, D] per step, block ids per token

    def step(self, rng, block_ids):
        S, P = len(block_ids), sum(len(b) for b in self.blocks)
        q = rng.standard_normal((B, S, HQ * D), dtype=np.float32)
        k = rng.standard_normal((B, S, HKV * D), dtype=np.float32)
        v = rng.standard_normal((B, S, HKV * D), dtype=np.float32)
        io = self.sess.io_binding()
        feeds = {"query": q, "key": k, "value": v, "seqlens_k": np.array([P + S - 1], np.int32),
                 "total_sequence_length": np.array(P + S, np.int32),
                 "block_ids": np.array([block_ids], np.int32)}
        for n, a in feeds.items():
            io.bind_cpu_input(n, a)
        io.bind_ortvalue_input("past_key", self.past_k)
        io.bind_ortvalue_input("past_value", self.past_v)
        io.bind_output("output")
        io.bind_ortvalue_output("present_key", self.past_k)
        io.bind_ortvalue_output("present_value", self.past_v)
        ptr = self.past_k.data_ptr()
        self.sess.run_with_iobinding(io)
        out, pk, pv = io.get_outputs()
        assert pk.data_ptr() == ptr, "present_key must be the past buffer"
        self.k_rows.append(k.reshape(S, HKV, D))
        self.v_rows.append(v.reshape(S, HKV, D))
        self.blocks.append(list(block_ids))
        return q, out.numpy()

    def check_cache(self):
        """Rows [0, T) are the K/V fed so far, bit for bit; the rest still zeros."""
        T = sum(len(b) for b in self.blocks)
        for cache, rows in ((self.past_k.numpy(), self.k_rows), (self.past_v.numpy(), self.v_rows)):
            want = np.concatenate(rows).transpose(1, 0, 2)  # [Hkv, T, D]
            assert np.array_equal(cache[0, :, :T], want)
            assert not cache[0, :, T:].any()

    def tessera_reference(self, q):
        """tessera.attention over the cache: positions and block ids as mask data."""
        S, T = q.shape[1], sum(len(b) for b in self.blocks)
        k_blk = np.concatenate(self.blocks)
        cached = T - S  # earlier steps' tokens: in no block for this step (docs/onnxruntime.md)
        k_block = np.where((np.arange(T) >= cached) & (k_blk > 0), k_blk, -1).astype(np.int32)[None]
        q_block = k_block[:, cached:]
        out = tessera.attention(q.reshape(B, S, HQ, D).transpose(0, 2, 1, 3),
                                self.past_k.numpy()[:, :, :T], self.past_v.numpy()[:, :, :T],
                                q_pos=np.arange(cached, T, dtype=np.int32)[None],
                                k_pos=np.arange(T, dtype=np.int32)[None], causal=True,
                                window=(self.window - 1 if self.window > 0 else -1, -1),
                                q_block=q_block, k_block=k_block, scale=self.scale, softcap=self.softcap)
        return out.transpose(0, 2, 1, 3).reshape(B, S, HQ * D)

    def attention_peer(self, q):
        """onnxruntime's Attention (opset 23): past + new K/V, dense bias; returns Y, present_key."""
        S, T = q.shape[1], sum(len(b) for b in self.blocks)
        P = T - S
        k_blk = np.concatenate(self.blocks).copy()
        k_blk[:P] = 0  # cached tokens are in no block for this step
        bias = dense_bias(np.arange(P, T), k_blk[P:], k_blk, T, self.window)
        kk, vv = self.past_k.numpy()[:, :, :T], self.past_v.numpy()[:, :, :T]
        feeds = {"Q": q.reshape(B, S, HQ, D).transpose(0, 2, 1, 3).copy(), "K": kk[:, :, P:].copy(),
                 "V": vv[:, :, P:].copy(), "attn_mask": bias, "past_key": kk[:, :, :P].copy(),
                 "past_value": vv[:, :, :P].copy()}
        attrs = {"softcap": self.softcap or None, "scale": self.scale}
        y, present_k, _ = run_attention_ort(23, feeds, attrs)
        return y.transpose(0, 2, 1, 3).reshape(B, S, HQ * D), present_k


# Prefill of 12 tokens: text, an image block of 5 (id 1), text, a block of 2 (id 2), text.
PREFILL_BLOCKS = [0, 0, 0, 1, 1, 1, 1, 1, 0, 2, 2, 0]


@pytest.mark.parametrize("window,softcap,scale", [(-1, 0.0, None), (4, 30.0, None), (6, 0.0, 0.3)])
def test_prefill_with_image_blocks_then_decode(window, softcap, scale):
    rng = np.random.default_rng(7)
    dec = Decoder(window, softcap, scale)
    for block_ids in [PREFILL_BLOCKS, [0], [0], [0]]:
        q, out = dec.step(rng, block_ids)
        dec.check_cache()
        np.testing.assert_allclose(out, dec.tessera_reference(q), rtol=RTOL, atol=ATOL)
        y, present_k = dec.attention_peer(q)
        np.testing.assert_allclose(out, y, rtol=RTOL, atol=ATOL)
        T = present_k.shape[2]
        assert np.array_equal(present_k, dec.past_k.numpy()[:, :, :T])


def test_blocks_change_the_output():
    """The block ids reach the mask: the same prefill with every token text differs exactly in
    the image tokens' rows (which now see later tokens of their block)."""
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    _, with_blocks = Decoder().step(rng_a, PREFILL_BLOCKS)
    _, text_only = Decoder().step(rng_b, [0] * len(PREFILL_BLOCKS))
    differs = np.abs(with_blocks - text_only).max(axis=2)[0] > 1e-3
    # The last token of a block sees nothing new; every other block token does.
    assert differs.tolist() == [False, False, False, True, True, True, True, False, False, True, False, False]


def test_matches_group_query_attention_without_blocks():
    """Without block ids the op is onnxruntime's GroupQueryAttention: same outputs, same cache."""
    rng = np.random.default_rng(11)
    S = 6
    q = rng.standard_normal((B, S, HQ * D), dtype=np.float32)
    k = rng.standard_normal((B, S, HKV * D), dtype=np.float32)
    v = rng.standard_normal((B, S, HKV * D), dtype=np.float32)
    past = np.zeros((B, HKV, CAP, D), np.float32)
    feeds = {"query": q, "key": k, "value": v, "past_key": past, "past_value": past.copy(),
             "seqlens_k": np.array([S - 1], np.int32), "total_sequence_length": np.array(S, np.int32)}
    ours = session(tessera_gqa_model(with_blocks=False, local_window_size=3, softcap=20.0)).run(None, feeds)
    theirs = run_gqa_ort(q, k, v, past, past.copy(), [S - 1], S, num_heads=HQ, kv_num_heads=HKV,
                         local_window_size=3, softcap=20.0)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=RTOL, atol=ATOL)
    for a, b in zip(ours[1:], theirs[1:]):
        assert a.shape == b.shape and np.array_equal(a[:, :, :S], b[:, :, :S])


def run_one(block_ids, S=4, attrs=None, **overrides):
    rng = np.random.default_rng(0)
    feeds = {"query": rng.standard_normal((B, S, HQ * D), dtype=np.float32),
             "key": rng.standard_normal((B, S, HKV * D), dtype=np.float32),
             "value": rng.standard_normal((B, S, HKV * D), dtype=np.float32),
             "past_key": np.zeros((B, HKV, CAP, D), np.float32), "past_value": np.zeros((B, HKV, CAP, D), np.float32),
             "seqlens_k": np.array([S - 1], np.int32), "total_sequence_length": np.array(S, np.int32),
             "block_ids": np.asarray(block_ids, np.int32)}
    feeds.update(overrides)
    return session(tessera_gqa_model(**(attrs or {}))).run(None, feeds)


@pytest.mark.parametrize("block_ids,overrides,message", [
    ([[0, 1, -2, 0]], {}, r"block_ids\[0\]\[2\] = -2 is negative"),
    ([[0, 1, 1]], {}, r"block_ids must be \[1, 4\]"),
    ([[0, 1, 1, 0]], {"seqlens_k": np.array([30], np.int32)}, r"seqlens_k\[0\] = 30 is outside"),
    ([[0, 1, 1, 0]], {"key": np.zeros((B, 3, HKV * D), np.float32)}, r"key must be \[1, 4, 16\]"),
    ([[0, 1, 1, 0]], {"past_key": np.zeros((B, HKV, 2, D), np.float32),
                      "past_value": np.zeros((B, HKV, 2, D), np.float32),
                      "seqlens_k": np.array([6], np.int32), "total_sequence_length": np.array(7, np.int32)},
     r"past_key holds only 2"),
])
def test_bad_inputs_raise(block_ids, overrides, message):
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match=message):
        run_one(block_ids, **overrides)


def test_bad_attributes_fail_session_creation():
    with pytest.raises(Exception, match="num_heads 4 and kv_num_heads 3"):
        session(_bad_heads_model())
    with pytest.raises(Exception, match="blocks_ignore_window must be one of 0, 1, got 2"):
        run_one([[0, 1, 1, 0]], attrs={"blocks_ignore_window": 2})


def test_attribute_types():
    """No schema checks a custom op's attributes: an int set as a float is refused by name, a
    float set as an int (softcap=30) is that value."""
    with pytest.raises(Exception, match="attribute local_window_size must be an int, got the float 4"):
        run_one([[0, 1, 1, 0]], attrs={"local_window_size": 4.0})
    as_int = run_one([[0, 1, 1, 0]], attrs={"softcap": 3, "scale": 1})
    as_float = run_one([[0, 1, 1, 0]], attrs={"softcap": 3.0, "scale": 1.0})
    assert all(np.array_equal(a, b) for a, b in zip(as_int, as_float))
    default = run_one([[0, 1, 1, 0]])
    assert not np.array_equal(as_float[0], default[0])


def _bad_heads_model():
    model = tessera_gqa_model()
    for a in model.graph.node[0].attribute:
        if a.name == "kv_num_heads":
            a.i = 3
    return model


def run_node(feeds, **attrs):
    """One TesseraGroupQueryAttention node with static shapes taken from `feeds` (None = absent)."""
    model, f = single_node_model("TesseraGroupQueryAttention", INPUTS, feeds, OUTPUTS,
                                 (("", 21), ("com.tessera", 1)), domain="com.tessera", **attrs)
    return session(model).run(None, f)


def gqa_feeds(rng, batch, S, d, lengths, past_len=0, cap=CAP):
    """A step of `S` new tokens per row after `past_len` cached ones (random past rows)."""
    return {"query": rng.standard_normal((batch, S, HQ * d), dtype=np.float32),
            "key": rng.standard_normal((batch, S, HKV * d), dtype=np.float32),
            "value": rng.standard_normal((batch, S, HKV * d), dtype=np.float32),
            "past_key": rng.standard_normal((batch, HKV, cap, d), dtype=np.float32),
            "past_value": rng.standard_normal((batch, HKV, cap, d), dtype=np.float32),
            "seqlens_k": np.asarray(lengths, np.int32) - 1,
            "total_sequence_length": np.array(max(lengths), np.int32)}


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_matches_group_query_attention(interleaved):
    """do_rotary with cos/sin caches: a first prompt of two rows (one right-padded), then a decode
    step, equal to onnxruntime's GroupQueryAttention (rotated cache rows within 1e-6)."""
    rng = np.random.default_rng(5)
    d, max_pos = 16, 32
    angles = np.arange(max_pos)[:, None] * (10000.0 ** (-np.arange(d // 2) / (d // 2)))[None]
    tables = {"cos_cache": np.cos(angles).astype(np.float32), "sin_cache": np.sin(angles).astype(np.float32)}
    attrs = dict(num_heads=HQ, kv_num_heads=HKV, do_rotary=1, rotary_interleaved=interleaved)
    for S, lengths in ((5, [5, 3]), (1, [6, 4])):
        feeds = {**gqa_feeds(rng, 2, S, d, lengths), **tables}
        ours = run_node(feeds, **attrs)
        theirs = run_gqa_ort(feeds["query"], feeds["key"], feeds["value"], feeds["past_key"], feeds["past_value"],
                             feeds["seqlens_k"], int(feeds["total_sequence_length"]), extra=tables, **attrs)
        for b, T in enumerate(lengths):
            valid = min(S, T)
            np.testing.assert_allclose(ours[0][b, :valid], theirs[0][b, :valid], rtol=RTOL, atol=ATOL)
            for a, o in zip(ours[1:], theirs[1:]):
                np.testing.assert_allclose(a[b, :, :T], o[b, :, :T], rtol=0, atol=1e-6)


def test_batch_rows_have_their_own_blocks():
    """Two rows with different block layouts: each row's output is that row run alone, and
    tessera.attention with the same blocks as mask data."""
    rng = np.random.default_rng(9)
    S = 6
    blocks = np.array([[0, 1, 1, 1, 0, 0], [2, 2, 0, 0, 3, 3]], np.int32)
    feeds = {**gqa_feeds(rng, 2, S, D, [S, S]), "block_ids": blocks}
    out, pk, pv = run_node(feeds, num_heads=HQ, kv_num_heads=HKV)
    for b in range(2):
        alone = run_node({n: (a[b:b + 1] if n not in ("total_sequence_length",) else a) for n, a in feeds.items()},
                         num_heads=HQ, kv_num_heads=HKV)
        assert np.array_equal(out[b], alone[0][0])
        blk = np.where(blocks[b:b + 1] > 0, blocks[b:b + 1], -1)
        want = tessera.attention(feeds["query"][b:b + 1].reshape(1, S, HQ, D).transpose(0, 2, 1, 3),
                                 pk[b:b + 1, :, :S], pv[b:b + 1, :, :S], q_block=blk, k_block=blk)
        np.testing.assert_allclose(out[b], want.transpose(0, 2, 1, 3).reshape(S, HQ * D), rtol=RTOL, atol=ATOL)


def test_concurrent_runs_of_one_session():
    """onnxruntime lets several threads run one session: each run gets its own result (the
    kernel's arenas are taken under a lock), equal to the same run alone."""
    from concurrent.futures import ThreadPoolExecutor
    sess = session(tessera_gqa_model())
    rng = np.random.default_rng(4)
    runs = []
    for r in range(6):
        S = 5 + r
        f = gqa_feeds(rng, 1, S, D, [S])
        f["block_ids"] = np.array([[0] + [r + 1] * (S - 2) + [0]], np.int32)
        runs.append(f)
    alone = [sess.run(None, f) for f in runs]
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(lambda f: sess.run(None, f), runs * 3))
    for i, out in enumerate(together):
        for a, b in zip(out, alone[i % len(runs)]):
            assert np.array_equal(a, b)


def test_packed_qkv_equals_separate():
    rng = np.random.default_rng(12)
    S = 7
    feeds = {**gqa_feeds(rng, 1, S, D, [S]), "block_ids": np.array([[0, 3, 3, 3, 0, 0, 0]], np.int32)}
    separate = run_node(feeds, num_heads=HQ, kv_num_heads=HKV)
    packed = dict(feeds, query=np.concatenate([feeds["query"], feeds["key"], feeds["value"]], axis=2),
                  key=None, value=None)
    together = run_node(packed, num_heads=HQ, kv_num_heads=HKV)
    for a, b in zip(separate, together):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(8))
def test_random_steps_against_attention_with_bias(seed):
    """Random prompt length, blocks, window, softcap and past: one step of each, against
    onnxruntime's Attention + dense bias (the pair-by-pair rule)."""
    rng = np.random.default_rng(100 + seed)
    past = int(rng.integers(0, 6))
    S = int(rng.integers(1, 14))
    window = int(rng.choice([-1, 1, 3, 6]))
    softcap = float(rng.choice([0.0, 5.0]))
    blocks = np.zeros(S, np.int32)
    for blk_id in (1, 2):
        if S > 2 and rng.random() < 0.7:
            a = int(rng.integers(0, S - 1))
            blocks[a: a + int(rng.integers(2, 5))] = blk_id
    T = past + S
    feeds = {**gqa_feeds(rng, 1, S, D, [T]), "block_ids": blocks[None]}
    out, pk, pv = run_node(feeds, num_heads=HQ, kv_num_heads=HKV, local_window_size=window, softcap=softcap)
    k_blk = np.concatenate([np.zeros(past, np.int32), blocks])
    bias = dense_bias(np.arange(past, T), blocks, k_blk, T, window)
    heads = lambda x, h: x.reshape(1, S, h, D).transpose(0, 2, 1, 3).copy()  # noqa: E731
    y, present_k, present_v = run_attention_ort(23, {
        "Q": heads(feeds["query"], HQ), "K": heads(feeds["key"], HKV), "V": heads(feeds["value"], HKV),
        "attn_mask": bias, "past_key": feeds["past_key"][:, :, :past].copy(),
        "past_value": feeds["past_value"][:, :, :past].copy()}, {"softcap": softcap or None})
    np.testing.assert_allclose(out, y.transpose(0, 2, 1, 3).reshape(1, S, HQ * D), rtol=RTOL, atol=ATOL)
    assert np.array_equal(pk[:, :, :T], present_k) and np.array_equal(pv[:, :, :T], present_v)
