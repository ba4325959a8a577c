"""Tessera: grouped-query attention whose mask is structured data.

Shapes: q [B, Hq, S_q, D], k [B, Hkv, S_kv, D], v [B, Hkv, S_kv, Dv], float32 numpy arrays.
Mask arguments (shared by `attention` and `attention_bias`), per docs/attention.md:
  q_pos [B, S_q] / k_pos [B, S_kv] absolute positions (int32); defaults: k_pos = arange(S_kv),
      q_pos = kv_valid - S_q + arange(S_q) (bottom-right aligned);
  kv_valid [B]: key slots [0, kv_valid[b]) hold data (default S_kv);
  causal; window=(left, right) in keys before/after the query, -1 = unbounded
      (HF sliding_window=W is window=(W-1, 0));
  q_block [B, S_q] / k_block [B, S_kv]: block ids, -1 = no block (image tokens of one image share one);
  blocks_ignore_window: same-block pairs are visible even outside the window, i.e.
      (window AND causal) OR block instead of window AND (causal OR block) (what transformers'
      Gemma4UnifiedModel.forward builds for sliding layers; generation does not use it, see tessera.hf);
  bias: float32 additive or bool (True = attend), broadcastable to [B, Hq, S_q, S_kv].
"""
from __future__ import annotations

import math

import numpy as np

from . import _tessera
from ._args import INT32, INT64, THREADS, int_arg
from ._tessera import MAX_HEAD_DIM
from . import onnx  # noqa: F401  (tessera.onnx)
from .model import Model
from ._quantize import quantize  # noqa: F401  (tessera.quantize)
from .chat import ChatTemplate

__all__ = ["attention", "attention_bias", "MAX_HEAD_DIM", "onnx", "Model", "ChatTemplate"]

_EMPTY_I32 = np.empty(0, dtype=np.int32)
_EMPTY_F32 = np.empty(0, dtype=np.float32)


def _as_i32(name, x, shape):
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer array, got dtype {a.dtype}")
    if a.shape != shape:
        try:
            a = np.broadcast_to(a, shape)
        except ValueError:
            raise ValueError(f"{name} has shape {a.shape}, expected {shape}") from None
    if np.any(a > np.iinfo(np.int32).max) or np.any(a < np.iinfo(np.int32).min):
        raise ValueError(f"{name} has values outside int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def _mask_arrays(B, Hq, S_q, S_kv, q_pos, k_pos, kv_valid, q_block, k_block, bias, heads_for_bias):
    kv_valid = (np.full(B, S_kv, dtype=np.int32) if kv_valid is None
                else _as_i32("kv_valid", np.reshape(kv_valid, -1) if np.ndim(kv_valid) else kv_valid, (B,)))
    k_pos = (np.broadcast_to(np.arange(S_kv, dtype=np.int32), (B, S_kv)).copy() if k_pos is None
             else _as_i32("k_pos", k_pos, (B, S_kv)))
    if q_pos is None:
        q_pos = (kv_valid[:, None] - S_q + np.arange(S_q, dtype=np.int32)[None, :]).astype(np.int32)
    else:
        q_pos = _as_i32("q_pos", q_pos, (B, S_q))
    if (q_block is None) != (k_block is None):
        raise ValueError("q_block and k_block must be given together")
    if q_block is not None:
        q_block = _as_i32("q_block", q_block, (B, S_q))
        k_block = _as_i32("k_block", k_block, (B, S_kv))
    else:
        q_block = k_block = _EMPTY_I32
    if bias is None:
        bias = _EMPTY_F32
    else:
        bias = np.asarray(bias)
        if bias.dtype != np.bool_:
            bias = bias.astype(np.float32, copy=False)
        try:
            bias = np.broadcast_to(bias, (B, heads_for_bias, S_q, S_kv))
        except ValueError:
            raise ValueError(f"bias of shape {bias.shape} does not broadcast to "
                             f"{(B, heads_for_bias, S_q, S_kv)}") from None
    return q_pos, k_pos, kv_valid, q_block, k_block, bias


def _window(window):
    if len(window) != 2:
        raise ValueError(f"window must be (left, right), got {window!r}")
    return int_arg("window[0]", window[0], *INT32), int_arg("window[1]", window[1], *INT32)


def attention(q, k, v, *, q_pos=None, k_pos=None, kv_valid=None, causal=True, window=(-1, -1),
              q_block=None, k_block=None, blocks_ignore_window=False, bias=None, scale=None, softcap=0.0,
              kv_dtype="f32", kernel="auto", num_threads=0, precision="f32"):
    """Grouped-query attention with a structured mask; returns [B, Hq, S_q, Dv] float32.

    K/V are stored in `kv_dtype` (f32, bf16, f16; rounded to nearest even) and computed in f32.
    precision="bf16" (with kv_dtype="bf16") rounds q and the softmax weights to bf16 before their
    products, as a bf16 model computes; on CPUs with AVX-512-BF16 that runs at twice the f32 rate.
    `kernel` is auto, reference, prefill or decode; num_threads=0 uses every core.
    Non-finite values (docs/reliability.md): a masked key is never read, whatever K/V hold; NaN or
    inf in a visible q or k makes that output row NaN; a non-finite v reaches only its column of
    the rows that see it; a row with no visible key is zeros. Every kernel gives the same.
    """
    q = np.asarray(q, dtype=np.float32)
    k = np.asarray(k, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v must be 4-D [B, H, S, D], got {q.shape}, {k.shape}, {v.shape}")
    B, Hq, S_q, D = q.shape
    S_kv = k.shape[2]
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"batch mismatch: q {q.shape}, k {k.shape}, v {v.shape}")
    if D < 1:  # before the default scale 1/sqrt(D) divides by it
        raise ValueError(f"head_dim (the last axis of q) must be >= 1, got {D}")
    arrays = _mask_arrays(B, Hq, S_q, S_kv, q_pos, k_pos, kv_valid, q_block, k_block, bias, Hq)
    wl, wr = _window(window)
    num_threads = int_arg("num_threads", num_threads, *THREADS)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    return _tessera._attention(q, k, v, arrays[0], arrays[1], arrays[2], bool(causal), wl, wr,
                               bool(blocks_ignore_window), arrays[3],
                               arrays[4], arrays[5], scale, float(softcap), str(kv_dtype), str(kernel),
                               num_threads, str(precision))


def attention_bias(batch, s_q, s_kv, *, q_pos=None, k_pos=None, kv_valid=None, causal=True,
                   window=(-1, -1), q_block=None, k_block=None, blocks_ignore_window=False, bias=None,
                   masked_value=-np.inf):
    """The same mask as a dense additive float32 bias [B, 1, S_q, S_kv]: 0 where visible (plus
    `bias` if given), `masked_value` elsewhere (-inf, or e.g. np.finfo(np.float32).min)."""
    batch, s_q, s_kv = (int_arg(n, x, 0, INT64[1]) for n, x in (("batch", batch), ("s_q", s_q), ("s_kv", s_kv)))
    arrays = _mask_arrays(batch, 1, s_q, s_kv, q_pos, k_pos, kv_valid, q_block, k_block, bias, 1)
    wl, wr = _window(window)
    return _tessera._attention_bias(batch, s_q, s_kv, arrays[0], arrays[1], arrays[2],
                                    bool(causal), wl, wr, bool(blocks_ignore_window), arrays[3], arrays[4],
                                    arrays[5], float(masked_value))
