"""ONNX-operator semantics on Tessera kernels.

`attention` is the ONNX `Attention` operator (opsets 23 and 24); `group_query_attention` is
`com.microsoft.GroupQueryAttention` as onnxruntime's CPU kernel computes it; `tensor_scatter` is
the ONNX `TensorScatter` operator (opset 24), the update rule of external KV caches
(include/tessera/kv/tensor_scatter.h; tessera.kv.ExternalStore applies it in place). The attention
adapters map the node onto one structured-mask Tessera call (positions, valid key counts, causal
flag, window, and the ONNX mask as a strided dense-mask view); see
include/tessera/onnx/attention.h and include/tessera/onnx/group_query_attention.h for the exact
semantics. Inputs are float32 numpy arrays (other float dtypes are converted); bad input raises
ValueError with the C++ message.
"""
from __future__ import annotations

import numpy as np

from ._args import INT32, INT64, THREADS, int_arg
from ._tessera import onnx as _onnx

__all__ = ["attention", "group_query_attention", "tensor_scatter"]


def _f32(name, x):
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a float array, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _opt_f32(name, x):
    return None if x is None else _f32(name, x)


def _ints(name, x, dtype):
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer array, got dtype {a.dtype}")
    info = np.iinfo(dtype)
    if a.size and (a.min() < info.min or a.max() > info.max):
        raise ValueError(f"{name} has values outside {np.dtype(dtype).name}")
    return np.ascontiguousarray(a, dtype=dtype)


def _mask(x):
    if x is None:
        return None
    a = np.asarray(x)
    if a.dtype == np.bool_:
        return np.ascontiguousarray(a)
    return _f32("attn_mask", a)


def _opt_int(name, x):
    if x is None:
        return None
    if int(x) != x:
        raise ValueError(f"{name} must be an integer, got {x!r}")
    return int_arg(name, x, *INT64)


def attention(Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal=0, q_num_heads=None, kv_num_heads=None, scale=None, softcap=0.0, opset=24,
              kernel="auto", num_threads=0):
    """ONNX `Attention` (opset 23/24). Returns (Y, present_key, present_value) with ONNX shapes.

    Q [B, Hq, S_q, D] | [B, S_q, Hq*D]; K [B, Hkv, S_kv, D] | [B, S_kv, Hkv*D];
    V [B, Hkv, S_kv, Dv] | [B, S_kv, Hkv*Dv]. 3-D inputs need q_num_heads and kv_num_heads.
    attn_mask: bool (True = attend) or float (added to the scores after softcap), broadcastable
        right-aligned to [B, Hq, S_q, L]; L <= T = P + S_kv, and keys >= L are masked (ONNX pads a
        short mask with -inf / False).
    past_key [B, Hkv, P, D] / past_value [B, Hkv, P, Dv]: present = concat(past, K/V) along the
        sequence, [B, Hkv, T, D] / [B, Hkv, T, Dv] (without a past, present is K/V in BHSD).
    nonpad_kv_seqlen [B] (int, opset 24; not with past): keys >= nonpad[b] are invisible.
    is_causal: query i sees keys j <= i + offset, offset = P with a past, nonpad[b] - S_q with
        nonpad_kv_seqlen, else 0 (top-left, also when S_q < S_kv).
    scale: default 1/sqrt(D). softcap > 0: scores become softcap * tanh(scores / softcap).
    A query row with no visible key yields zeros. Y is [B, Hq, S_q, Dv] (4-D) or [B, S_q, Hq*Dv].
    opset: 23 or 24 (nonpad_kv_seqlen needs 24). kernel: auto, reference, prefill or decode (as in
    tessera.attention). num_threads=0 uses every core.
    """
    return _onnx.attention(
        _f32("Q", Q), _f32("K", K), _f32("V", V), _mask(attn_mask), _opt_f32("past_key", past_key),
        _opt_f32("past_value", past_value),
        None if nonpad_kv_seqlen is None else _ints("nonpad_kv_seqlen", nonpad_kv_seqlen, np.int64),
        int_arg("is_causal", is_causal, *INT64), _opt_int("q_num_heads", q_num_heads),
        _opt_int("kv_num_heads", kv_num_heads), None if scale is None else float(scale), float(softcap),
        int_arg("opset", opset, *INT32), str(kernel), int_arg("num_threads", num_threads, *THREADS))


def _cache(name, x, inplace):
    if x is None:
        return None
    if inplace:
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or not x.flags.c_contiguous:
            raise ValueError(f"GroupQueryAttention: inplace=True needs {name} as a C-contiguous float32 "
                             f"numpy array, got {type(x).__name__}"
                             + (f" of dtype {x.dtype}" if isinstance(x, np.ndarray) else ""))
        if not x.flags.writeable:
            raise ValueError(f"GroupQueryAttention: inplace=True needs a writable {name}")
        return x
    return _f32(name, x)


def group_query_attention(query, key, value, past_key, past_value, seqlens_k, total_sequence_length, *,
                          num_heads, kv_num_heads, local_window_size=-1, softcap=0.0, scale=None,
                          attention_bias=None, inplace=True, kernel="auto", num_threads=0):
    """com.microsoft.GroupQueryAttention (onnxruntime CPU semantics, no rotary).

    Returns (output [B, S, num_heads*D], present_key, present_value).

    query [B, S, num_heads*D], key/value [B, S, kv_num_heads*D]; key=value=None means query is
        packed QKV [B, S, (num_heads + 2*kv_num_heads)*D].
    past_key/past_value [B, kv_num_heads, C, D] (BNSH) or None for a first prompt without cache.
    seqlens_k [B] (int32): tokens in the cache after this step minus one, T_b = seqlens_k[b] + 1.
        The step holds Q_b = min(S, T_b) valid rows (rows >= Q_b of a first prompt are padding)
        at positions P_b .. T_b - 1, P_b = T_b - Q_b, written to cache rows [P_b, T_b).
    total_sequence_length (int32 scalar): >= every T_b; attention_bias last dim.
    inplace=True (default): present_key/present_value ARE past_key/past_value, updated in place
        (C >= total_sequence_length; C-contiguous writable float32 arrays; rows >= T_b untouched).
        inplace=False: separate present buffers of capacity max(total_sequence_length, C) holding
        past rows [0, P_b), the new rows, zeros beyond (onnxruntime's unshared mode).
    local_window_size W > 0: a query sees its W most recent keys, itself included; -1 = off;
        0 = no key at all (zero output, as onnxruntime).
    softcap > 0: scores = softcap * tanh(scores / softcap), before attention_bias.
    scale: default (None or 0) 1/sqrt(D).
    attention_bias [B or 1, num_heads or 1, S, total_sequence_length] float, by absolute key position.
    kernel: auto, reference, prefill or decode (as in tessera.attention). num_threads=0 uses every core.
    """
    key = _opt_f32("key", key)
    value = _opt_f32("value", value)
    return _onnx.group_query_attention(
        _f32("query", query), key, value, _cache("past_key", past_key, inplace),
        _cache("past_value", past_value, inplace), _ints("seqlens_k", seqlens_k, np.int32),
        _ints("total_sequence_length", total_sequence_length, np.int32),
        _opt_f32("attention_bias", attention_bias), int_arg("num_heads", num_heads, *INT64),
        int_arg("kv_num_heads", kv_num_heads, *INT64), int_arg("local_window_size", local_window_size, *INT64),
        float(softcap), 0.0 if scale is None else float(scale), bool(inplace) and past_key is not None,
        str(kernel), int_arg("num_threads", num_threads, *THREADS))


def tensor_scatter(past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    """ONNX `TensorScatter` (opset 24). Returns present, a new array shaped and typed as past_cache.

    present = past_cache, then along `axis` (any axis but 0, the batch; default -2, the sequence
    axis of [B, H, max_seq, D]): present[b, ..., idx(i), ...] = update[b, ..., i, ...] for
    i < update.shape[axis], idx(i) = write_indices[b] + i (mode="linear": must stay below
    past_cache.shape[axis]) or that value modulo past_cache.shape[axis] (mode="circular").
    update matches past_cache in every other dim and in dtype (any numpy dtype except object; data
    is copied by item size). write_indices [B] int (None = zeros) must be >= 0.
    Bad input (shapes, dtypes, an index that leaves the cache in linear mode) raises ValueError.
    """
    past = np.ascontiguousarray(past_cache)
    upd = np.ascontiguousarray(update)
    if upd.dtype != past.dtype:
        raise ValueError(f"TensorScatter: update dtype {upd.dtype} differs from past_cache dtype {past.dtype}")
    wi = None if write_indices is None else _ints("write_indices", write_indices, np.int64)
    if int(axis) != axis:
        raise ValueError(f"TensorScatter: axis must be an integer, got {axis!r}")
    return _onnx.tensor_scatter(past, upd, wi, int_arg("axis", axis, *INT64), str(mode))
