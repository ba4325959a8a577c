"""KV cache stores (docs/kv-cache.md) and attention over them.

A store holds K [B, Hkv, slots, D] and V [B, Hkv, slots, Dv] plus, per slot, the token's absolute
position and image-block id; slots [0, valid_len(b)) of row b hold data. Stores are allocated once
(except ConcatStore, the reallocating baseline) and `append` writes in place:

  DenseStore(batch, kv_heads, head_dim, capacity)   token t of a row in slot t.
  RingStore(batch, kv_heads, head_dim, window, max_chunk)
      HF sliding_window W: W - 1 + max_chunk slots, token t in slot t mod capacity. Attend after
      every append (an append may overwrite keys the previous chunk needed) with window=(W-1, 0).
  ExternalStore(k_cache, v_cache, nonpad_kv_seqlen)
      caller-owned numpy buffers, mutated in place: the ONNX opset-24 external cache. append is
      TensorScatter (linear, write_indices = nonpad_kv_seqlen) of the new K/V into the caches,
      then nonpad_kv_seqlen += count; slots [0, nonpad[b]) are valid. The store keeps the arrays
      alive; change them only through the store (it also records positions and block ids).
  ConcatStore(batch, kv_heads, head_dim)
      "past + new -> new present" reallocated on every append (every row appends the same count).

Owned stores keep K/V in `dtype` (f32, bf16, f16; f32 input rounded to nearest even).

`attend(store, q, q_pos)` runs Tessera attention on the store's current view in place (no copy):
the keys are the store's slots with their recorded positions and blocks, kv_valid = valid_len.
`kv_memory_plan(config)` is what kv::KvCache would allocate for a model.
"""
from __future__ import annotations

import math

import numpy as np

from ._tessera import kv as _kv
from ._args import INT32, INT64, THREADS, int_arg

__all__ = ["DenseStore", "RingStore", "ExternalStore", "ConcatStore", "attend", "kv_memory_plan"]

# The same int32 argument check as tessera.attention.
from . import _as_i32 as _i32  # noqa: E402


def _float(name, x, dtype):
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a float array, got dtype {a.dtype}")
    if a.ndim != 4:
        raise ValueError(f"{name} must be 4-D [B, Hkv, S_new, D], got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=dtype)


class _Store:
    """The common interface; see the module docstring."""

    _impl = None

    def _input_dtype(self, x):
        # Owned stores convert on write: float16 goes in as is, anything else as float32.
        return np.float16 if np.asarray(x).dtype == np.float16 else np.float32

    def append(self, k, v, pos, count=None, block=None):
        """Appends k [B, Hkv, S_new, D] / v [B, Hkv, S_new, Dv] (float32).

        pos [B, S_new] (broadcast; int): absolute positions, strictly increasing per row and
        after the row's newest position. count [B] (None = S_new): tokens of row b to append, a
        prefix of S_new. block [B, S_new] (None = no blocks): image block ids, -1 = none.
        Bad input raises ValueError and leaves the store unchanged.
        """
        k = _float("k", k, self._input_dtype(k))
        v = _float("v", v, k.dtype)
        B, S = k.shape[0], k.shape[2]
        pos = _i32("pos", pos, (B, S))
        count = None if count is None else _i32("count", np.reshape(count, -1) if np.ndim(count) else count, (B,))
        block = None if block is None else _i32("block", block, (B, S))
        self._impl.append(k, v, pos, count, block)

    def can_rewind(self, b, n):
        """Whether rewind(b, n) would succeed."""
        return self._impl.can_rewind(int_arg("b", b, *INT64), int_arg("n", n, *INT64))[0]

    def rewind(self, b, n):
        """Drops the last n tokens of row b. Exact for dense and external stores; a ring refuses
        (ValueError, store unchanged) once it has overwritten a key the new end's window needs;
        ConcatStore always refuses."""
        self._impl.rewind(int_arg("b", b, *INT64), int_arg("n", n, *INT64))

    def view(self, raw=False):
        """Copies of (k, v, k_pos, k_block, kv_valid): k [B, Hkv, slots, D], v [B, Hkv, slots, Dv]
        as float32 (bf16/f16 widened exactly; raw=True: f16 as float16, bf16 as uint16 bits),
        k_pos / k_block [B, slots] int32 (empty slots: position 2**31 - 1, block -1), kv_valid [B]
        int32 (slots [0, kv_valid[b]) hold data)."""
        return self._impl.view(bool(raw))

    @property
    def capacity(self):
        """Slots per row."""
        return self._impl.capacity

    def write_pos(self, b):
        """Tokens appended to row b (minus rewinds)."""
        return self._impl.write_pos(int_arg("b", b, *INT64))

    def valid_len(self, b):
        """Slots of row b holding data (a ring: min(write_pos, capacity))."""
        return self._impl.valid_len(int_arg("b", b, *INT64))

    @property
    def bytes(self):
        """Memory the store owns (K, V, positions, blocks; an external store's K/V are the caller's)."""
        return self._impl.bytes

    @property
    def batch(self):
        return self._impl.batch

    @property
    def kv_heads(self):
        return self._impl.kv_heads

    @property
    def head_dim(self):
        return self._impl.head_dim

    @property
    def v_head_dim(self):
        return self._impl.v_head_dim

    @property
    def dtype(self):
        """Storage dtype: f32, bf16 or f16."""
        return self._impl.dtype

    def __repr__(self):
        rows = ", ".join(str(self.valid_len(b)) for b in range(self.batch))
        return (f"{type(self).__name__}(batch={self.batch}, kv_heads={self.kv_heads}, head_dim={self.head_dim}, "
                f"v_head_dim={self.v_head_dim}, capacity={self.capacity}, dtype={self.dtype}, valid=[{rows}])")


def _sizes(**sizes):
    """The store constructor's integer arguments, in order, each checked to fit int64 by name."""
    return [int_arg(name, v, *INT64) for name, v in sizes.items()]


class DenseStore(_Store):
    """[B, Hkv, capacity, D]: token t of row b in slot t; rows advance independently."""

    def __init__(self, batch, kv_heads, head_dim, capacity, *, v_head_dim=None, dtype="f32"):
        self._impl = _kv.make_dense(*_sizes(batch=batch, kv_heads=kv_heads, head_dim=head_dim,
                                            v_head_dim=head_dim if v_head_dim is None else v_head_dim,
                                            capacity=capacity), str(dtype))


class RingStore(_Store):
    """Sliding-window ring (HF sliding_window = window): window - 1 + max_chunk slots, token t in
    slot t mod capacity; appends of at most max_chunk tokens per row."""

    def __init__(self, batch, kv_heads, head_dim, window, max_chunk, *, v_head_dim=None, dtype="f32"):
        self._impl = _kv.make_ring(*_sizes(batch=batch, kv_heads=kv_heads, head_dim=head_dim,
                                           v_head_dim=head_dim if v_head_dim is None else v_head_dim, window=window,
                                           max_chunk=max_chunk), str(dtype))
        self.window = int(window)
        self.max_chunk = int(max_chunk)


class ConcatStore(_Store):
    """The reallocating "past + new -> present" baseline; capacity = tokens held."""

    def __init__(self, batch, kv_heads, head_dim, *, v_head_dim=None, dtype="f32"):
        self._impl = _kv.make_concat(*_sizes(batch=batch, kv_heads=kv_heads, head_dim=head_dim,
                                             v_head_dim=head_dim if v_head_dim is None else v_head_dim), str(dtype))


class ExternalStore(_Store):
    """The ONNX opset-24 external cache over caller-owned numpy arrays (mutated in place).

    k_cache [B, Hkv, max_seq, D], v_cache [B, Hkv, max_seq, Dv]: C-contiguous writable float32 (or
    float16) arrays; nonpad_kv_seqlen [B] int64 writable: slots [0, nonpad[b]) of row b are valid
    (already-valid slots are taken to hold positions 0..nonpad[b]-1). append scatters the whole
    update [B, Hkv, S_new, D] at write_indices = nonpad (ONNX TensorScatter, linear: nonpad[b] +
    S_new <= max_seq even for rows with count < S_new), then nonpad += count.
    """

    def __init__(self, k_cache, v_cache, nonpad_kv_seqlen):
        for name, a in (("k_cache", k_cache), ("v_cache", v_cache), ("nonpad_kv_seqlen", nonpad_kv_seqlen)):
            if not isinstance(a, np.ndarray):
                raise ValueError(f"ExternalStore: {name} must be a numpy array (it is updated in place), "
                                 f"got {type(a).__name__}")
        self._impl = _kv.make_external(k_cache, v_cache, nonpad_kv_seqlen)
        self.k_cache, self.v_cache, self.nonpad_kv_seqlen = k_cache, v_cache, nonpad_kv_seqlen

    def _input_dtype(self, x):
        return self.k_cache.dtype  # TensorScatter copies bytes: updates come in the cache dtype


def attend(store, q, q_pos=None, *, causal=True, window=(-1, -1), q_block=None, blocks_ignore_window=False,
           scale=None, softcap=0.0, kernel="auto", num_threads=0, precision="f32"):
    """Attention of q [B, Hq, S_q, D] (float32) over `store`, read in place; returns [B, Hq, S_q, Dv].

    Keys are the store's slots: k_pos = their recorded positions, k_block = their block ids,
    kv_valid[b] = valid_len(b). q_pos [B, S_q] (broadcast): absolute query positions; default
    write_pos(b) - S_q + arange(S_q) (the newest tokens, for positions counted from 0; this is the
    ONNX nonpad_kv_seqlen causal alignment for an ExternalStore). Mask (see tessera.attention):
    causal, window=(left, right) (-1 = unbounded; HF sliding_window W is (W-1, 0)), q_block [B, S_q]
    (with the stored k_block), blocks_ignore_window. scale: default 1/sqrt(D). softcap > 0:
    softcap * tanh(s / softcap). kernel: auto, reference, prefill, decode. num_threads=0: every core.
    A query with no visible key yields zeros. precision: "f32", or "bf16" (a bf16 store only) to
    round q and the softmax weights to bf16 before their products (tessera.attention).
    """
    if not isinstance(store, _Store):
        raise ValueError(f"attend needs a tessera.kv store, got {type(store).__name__}")
    q = np.asarray(q)
    if q.dtype.kind not in "fiu":
        raise ValueError(f"q must be a float array, got dtype {q.dtype}")
    q = np.ascontiguousarray(q, dtype=np.float32)
    if q.ndim != 4:
        raise ValueError(f"q must be 4-D [B, Hq, S_q, D], got shape {q.shape}")
    B, _, S_q, D = q.shape
    if B != store.batch:
        raise ValueError(f"q has batch {B}, the store {store.batch}")
    if q_pos is None:
        q_pos = np.array([[store.write_pos(b) - S_q + i for i in range(S_q)] for b in range(B)], dtype=np.int64)
    q_pos = _i32("q_pos", q_pos, (B, S_q))
    q_block = None if q_block is None else _i32("q_block", q_block, (B, S_q))
    if len(window) != 2:
        raise ValueError(f"window must be (left, right), got {window!r}")
    if D < 1:  # before the default scale 1/sqrt(D) divides by it
        raise ValueError(f"head_dim (the last axis of q) must be >= 1, got {D}")
    wl, wr = int_arg("window[0]", window[0], *INT32), int_arg("window[1]", window[1], *INT32)
    num_threads = int_arg("num_threads", num_threads, *THREADS)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    return store._impl.attend(q, q_pos, bool(causal), wl, wr, q_block, bool(blocks_ignore_window), scale,
                              float(softcap), str(kernel), num_threads, str(precision))


_PLAN_KEYS = {"layers", "num_kv_shared_layers", "batch", "max_context", "max_chunk", "dtype"}


def _layer(i, spec):
    if isinstance(spec, dict):
        unknown = set(spec) - {"kind", "kv_heads", "head_dim", "v_head_dim", "window"}
        if unknown:
            raise ValueError(f"layer {i}: unknown keys {sorted(unknown)}")
        head_dim = spec["head_dim"]
        return (str(spec["kind"]), *_sizes(kv_heads=spec["kv_heads"], head_dim=head_dim,
                                           v_head_dim=spec.get("v_head_dim", head_dim), window=spec.get("window", 0)))
    spec = tuple(spec)
    if len(spec) not in (4, 5):
        raise ValueError(f"layer {i}: expected (kind, kv_heads, head_dim, v_head_dim[, window]), got {spec!r}")
    kind, heads, d, dv = spec[:4]
    return (str(kind), *_sizes(kv_heads=heads, head_dim=d, v_head_dim=dv, window=spec[4] if len(spec) == 5 else 0))


def kv_memory_plan(config):
    """What kv::KvCache::Plan allocates for `config`; returns (layers, total_bytes).

    config: dict with
      layers: [(kind, kv_heads, head_dim, v_head_dim, window)] per layer, kind "full" or
          "sliding", window = HF sliding_window (sliding layers); dicts with those keys also work;
      num_kv_shared_layers (0): the last n layers read the K/V of the last earlier non-shared
          layer of the same kind (Gemma KV sharing);
      batch (1), max_context (4096), max_chunk (256), dtype ("bf16"; f32, bf16, f16).
    A sliding layer gets a ring of window - 1 + max_chunk slots when that is below max_context,
    otherwise (and full layers) a dense store of max_context slots. layers[i] is a dict: layer,
    kind, store ("dense", "ring" or "shared"), owner (the layer whose store it reads), slots
    (per row; 0 for shared) and bytes (K + V + int32 positions and block ids, each buffer
    rounded up to 64 bytes). Invalid configs raise ValueError.
    """
    unknown = set(config) - _PLAN_KEYS
    if unknown:
        raise ValueError(f"kv_memory_plan: unknown config keys {sorted(unknown)}")
    layers = [_layer(i, s) for i, s in enumerate(config["layers"])]
    sizes = _sizes(num_kv_shared_layers=config.get("num_kv_shared_layers", 0), batch=config.get("batch", 1),
                   max_context=config.get("max_context", 4096), max_chunk=config.get("max_chunk", 256))
    plan, total, _ = _kv.memory_plan(layers, *sizes, str(config.get("dtype", "bf16")))
    return plan, total
