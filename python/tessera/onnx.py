"""ONNX-operator semantics on Tessera kernels.

`attention` is the ONNX `Attention` operator (opsets 23, 24 and 25); `group_query_attention` is
`com.microsoft.GroupQueryAttention` as onnxruntime's CPU kernel computes it; `tensor_scatter` is
the ONNX `TensorScatter` operator (opset 24), the update rule of external KV caches
(include/tessera/kv/tensor_scatter.h; tessera.kv.ExternalStore applies it in place). The attention
adapters map the node onto one structured-mask Tessera call (positions, valid key counts, causal
flag, window, sinks, and the ONNX mask as a strided dense-mask view); see
include/tessera/onnx/attention.h and include/tessera/onnx/group_query_attention.h for the exact
semantics. Float inputs may be float32, float16 or bfloat16 (ml_dtypes) numpy arrays, or anything
numpy converts; the kernels compute in float32 and 16-bit inputs get their outputs rounded back to
their type once, as ONNX types them. Bad input, and any attribute or input an adapter does not
implement, raises ValueError naming it.
"""
from __future__ import annotations

import numpy as np

from ._args import INT32, INT64, THREADS, int_arg
from ._tessera import onnx as _onnx

__all__ = ["attention", "group_query_attention", "tensor_scatter", "onnxruntime_library"]


def onnxruntime_library():
    """Path of libtessera_ort.so, the onnxruntime custom-op library providing
    com.tessera.TesseraGroupQueryAttention (docs/onnxruntime.md), for
    `onnxruntime.SessionOptions.register_custom_ops_library`."""
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtessera_ort.so")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is not built: scripts/setup.sh fetches onnxruntime's headers and builds it")
    return path

_HALF = ("float16", "bfloat16")  # 16-bit float dtypes kept as the outputs' type


def _is_float(a):
    return a.dtype.kind == "f" or a.dtype.name == "bfloat16"


def _f32(name, x):
    a = np.asarray(x)
    if a.dtype.kind not in "iu" and not _is_float(a):
        raise ValueError(f"{name} must be a float array, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _opt_f32(name, x):
    return None if x is None else _f32(name, x)


def _out_dtype(x):
    """The dtype an output typed like input `x` has: x's own for float16/bfloat16, else float32."""
    dt = getattr(x, "dtype", None)
    return dt if dt is not None and dt.name in _HALF else np.dtype(np.float32)


def _as(a, dtype):
    return a if a.dtype == dtype else a.astype(dtype)


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


def _refuse_unknown(op, names, extra):
    for name in extra:
        raise ValueError(f"{op}: {name!r} is not an input or attribute of {op} (known: {', '.join(names)})")


_ATTENTION_NAMES = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen", "is_causal",
                    "q_num_heads", "kv_num_heads", "scale", "softcap", "qk_matmul_output_mode",
                    "softmax_precision", "left_window_size", "right_window_size", "opset", "kernel",
                    "num_threads")


def attention(Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal=0, q_num_heads=None, kv_num_heads=None, scale=None, softcap=0.0,
              qk_matmul_output_mode=None, softmax_precision=None, left_window_size=-1, right_window_size=-1,
              opset=25, kernel="auto", num_threads=0, **unknown):
    """ONNX `Attention` (opsets 23, 24, 25). Returns (Y, present_key, present_value), and
    qk_matmul_output fourth when qk_matmul_output_mode is given, with ONNX shapes.

    Q [B, Hq, S_q, D] | [B, S_q, Hq*D]; K [B, Hkv, S_kv, D] | [B, S_kv, Hkv*D];
    V [B, Hkv, S_kv, Dv] | [B, S_kv, Hkv*Dv]. 3-D inputs need q_num_heads and kv_num_heads (opset
        25 refuses them with 4-D inputs). float32, float16 or bfloat16: Y and qk_matmul_output
        take Q's type, present_key K's and present_value V's (16-bit outputs are the float32
        result rounded once).
    attn_mask: bool (True = attend) or float (added to the scores after softcap), broadcastable
        right-aligned to [B, Hq, S_q, L]; L <= T = P + S_kv, and keys >= L are masked (ONNX pads a
        short mask with -inf / False).
    past_key [B, Hkv, P, D] / past_value [B, Hkv, P, Dv]: present = concat(past, K/V) along the
        sequence, [B, Hkv, T, D] / [B, Hkv, T, Dv] (without a past, present is K/V in BHSD).
    nonpad_kv_seqlen [B] (int, opset >= 24; not with past): keys >= nonpad[b] are invisible.
    Query i sits at offset + i: offset = P with a past, nonpad[b] - S_q with nonpad_kv_seqlen, else
        0 (top-left, also when S_q < S_kv). is_causal: query i sees keys j <= offset + i.
    left_window_size L, right_window_size R (opset 25; -1 = unbounded): query i sees keys
        offset + i - L <= j <= offset + i + R, with or without is_causal.
    scale: default 1/sqrt(D). softcap > 0: scores become softcap * tanh(scores / softcap).
    softmax_precision (ONNX data type): None or 1 float32 (every kernel); 11 double; 10 float16 /
        16 bfloat16 round the softmax input and output to that type (the last three run the
        reference kernel).
    qk_matmul_output_mode: None = no fourth output; 0 the scaled Q.K of every pair, 1 after
        softcap, 2 plus the mask (-inf where a key is invisible), 3 the softmax weights; shape
        [B, Hq, S_q, T]. Computed in plain loops: a debugging output.
    A query row with no visible key yields zeros. Y is [B, Hq, S_q, Dv] (4-D) or [B, S_q, Hq*Dv].
    opset: 23, 24 or 25. kernel: auto, reference, prefill or decode (as in tessera.attention).
    num_threads=0 uses every core.
    """
    _refuse_unknown("Attention", _ATTENTION_NAMES, unknown)
    attrs = {
        "opset": int_arg("opset", opset, *INT32), "is_causal": int_arg("is_causal", is_causal, *INT64),
        "q_num_heads": _opt_int("q_num_heads", q_num_heads), "kv_num_heads": _opt_int("kv_num_heads", kv_num_heads),
        "scale": None if scale is None else float(scale), "softcap": float(softcap),
        "qk_matmul_output_mode": _opt_int("qk_matmul_output_mode", qk_matmul_output_mode),
        "softmax_precision": _opt_int("softmax_precision", softmax_precision),
        "left_window_size": int_arg("left_window_size", left_window_size, *INT64),
        "right_window_size": int_arg("right_window_size", right_window_size, *INT64),
    }
    outs = _onnx.attention(
        _f32("Q", Q), _f32("K", K), _f32("V", V), _mask(attn_mask), _opt_f32("past_key", past_key),
        _opt_f32("past_value", past_value),
        None if nonpad_kv_seqlen is None else _ints("nonpad_kv_seqlen", nonpad_kv_seqlen, np.int64),
        attrs, str(kernel), int_arg("num_threads", num_threads, *THREADS))
    types = (_out_dtype(np.asarray(Q)), _out_dtype(np.asarray(K)), _out_dtype(np.asarray(V)), _out_dtype(np.asarray(Q)))
    return tuple(_as(o, t) for o, t in zip(outs, types))


_CACHE_TYPES = ("float32", "bfloat16", "float16")


def _cache(name, x, inplace):
    """A KV cache for the binding: float32, or a uint16 view of a 16-bit one (in place: the caller's
    own memory)."""
    if x is None:
        return None
    if inplace:
        if not isinstance(x, np.ndarray) or x.dtype.name not in _CACHE_TYPES or not x.flags.c_contiguous:
            raise ValueError(f"GroupQueryAttention: inplace=True needs {name} as a C-contiguous float32, bfloat16 "
                             f"or float16 numpy array, got {type(x).__name__}"
                             + (f" of dtype {x.dtype}" if isinstance(x, np.ndarray) else ""))
        if not x.flags.writeable:
            raise ValueError(f"GroupQueryAttention: inplace=True needs a writable {name}")
        return x if x.dtype == np.float32 else x.view(np.uint16)
    a = np.asarray(x)
    if a.dtype.name in _HALF:
        return np.ascontiguousarray(a).view(np.uint16)
    return _f32(name, a)


# Inputs and attributes of com.microsoft.GroupQueryAttention the adapter does not implement, with
# the value that means "off" (accepted), and why.
_GQA_REFUSED = {
    "query_seqlens": (None, "right-padded chunks with an explicit valid count per row (query_seqlens)"),
    "sliding_window_cache": (0, "window-sized caches evicted inside the node (sliding_window_cache=1)"),
    "k_scale": (None, "quantized KV caches (k_scale)"),
    "v_scale": (None, "quantized KV caches (v_scale)"),
    "kv_cache_bit_width": (None, "quantized KV caches (kv_cache_bit_width)"),
    "k_quant_type": ("NONE", "quantized KV caches (k_quant_type)"),
    "v_quant_type": ("NONE", "quantized KV caches (v_quant_type)"),
    "q_norm_weight": (None, "Q/K RMS normalization inside the node (q_norm_weight); apply it before the node"),
    "k_norm_weight": (None, "Q/K RMS normalization inside the node (k_norm_weight); apply it before the node"),
}
# Attributes without effect unless a refused input is given.
_GQA_INERT = ("qk_norm_epsilon", "q_norm_epsilon", "k_norm_epsilon")
_GQA_NAMES = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
              "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink", "num_heads",
              "kv_num_heads", "local_window_size", "softcap", "scale", "causal", "do_rotary",
              "rotary_interleaved", "smooth_softmax", "qk_output", "inplace", "kernel", "num_threads")


def _refuse_gqa(extra):
    for name, value in extra.items():
        if name in _GQA_REFUSED:
            off, what = _GQA_REFUSED[name]
            given = isinstance(value, np.ndarray) or not (value == off or (name == "kv_cache_bit_width" and value == 0))
            if value is None or not given:
                continue
            shown = f"<array of shape {value.shape}>" if isinstance(value, np.ndarray) else repr(value)
            raise ValueError(f"GroupQueryAttention: {name}={shown} is not supported: Tessera does not implement "
                             f"{what}")
        if name not in _GQA_INERT:
            _refuse_unknown("GroupQueryAttention", _GQA_NAMES + tuple(_GQA_REFUSED) + _GQA_INERT, [name])


def group_query_attention(query, key, value, past_key, past_value, seqlens_k, total_sequence_length, *,
                          num_heads, kv_num_heads, local_window_size=-1, softcap=0.0, scale=None,
                          attention_bias=None, cos_cache=None, sin_cache=None, position_ids=None, head_sink=None,
                          causal=1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1, qk_output=0,
                          inplace=True, kernel="auto", num_threads=0, **unsupported):
    """com.microsoft.GroupQueryAttention (onnxruntime CPU semantics).

    Returns (output [B, S, num_heads*D], present_key, present_value), and output_qk fourth when
    qk_output is 1 or 2.

    query [B, S, num_heads*D], key/value [B, S, kv_num_heads*D]; key=value=None means query is
        packed QKV [B, S, (num_heads + 2*kv_num_heads)*D]. float32, float16 or bfloat16: output
        and output_qk take query's type (the float32 result rounded once).
    past_key/past_value [B, kv_num_heads, C, D] (BNSH) or None for a first prompt without cache;
        float32, bfloat16 or float16 (new rows are rounded to the cache's type).
    seqlens_k [B] (int32): tokens in the cache after this step minus one, T_b = seqlens_k[b] + 1.
        The step holds Q_b = min(S, T_b) valid rows (rows >= Q_b of a first prompt are padding)
        at positions P_b .. T_b - 1, P_b = T_b - Q_b, written to cache rows [P_b, T_b).
    total_sequence_length (int32 scalar): >= every T_b; attention_bias last dim.
    inplace=True (default): present_key/present_value ARE past_key/past_value, updated in place
        (C >= total_sequence_length; C-contiguous writable arrays; rows >= T_b untouched).
        inplace=False: separate present buffers of capacity max(total_sequence_length, C) holding
        past rows [0, P_b), the new rows, zeros beyond (onnxruntime's unshared mode).
    causal=1: query s sees keys up to its own position; causal=0: every key j < T_b.
    local_window_size W > 0 (causal only): a query sees its W most recent keys, itself included;
        -1 = off; 0 = no key at all (zero output, as onnxruntime).
    do_rotary=1 with cos_cache/sin_cache [max_position, R/2] (R <= D): query and new key rows
        rotate by their position's angle before attention and before the cache; interleaved pairs
        (2i, 2i+1) with rotary_interleaved=1, else (i, i + R/2). Positions: P_b + s, or
        position_ids [B, S] (int, each < max_position); in a first prompt (S == total_sequence_length) only its first
        element p0 is read and row s sits at p0 + s, as in onnxruntime.
    head_sink [num_heads]: per-head logit added to every softmax denominator; without it,
        smooth_softmax=1 adds a sink of 0 (exp(0) = 1) for every head.
    softcap > 0: scores = softcap * tanh(scores / softcap), before attention_bias.
    scale: default (None or 0) 1/sqrt(D).
    attention_bias [B or 1, num_heads or 1, S, total_sequence_length] float, by absolute key position.
    qk_output: 1 returns the scores after softcap and bias (0 where a key is invisible), 2 the
        softmax weights, as output_qk [B, num_heads, S, total_sequence_length].
    Refused by name (ValueError): query_seqlens, sliding_window_cache=1, quantized caches
        (k_scale, v_scale, kv_cache_bit_width, k/v_quant_type), q_norm_weight/k_norm_weight.
    kernel: auto, reference, prefill or decode (as in tessera.attention). num_threads=0 uses every core.
    """
    _refuse_gqa(unsupported)
    inplace = bool(inplace) and past_key is not None
    q_arr, key_arr = np.asarray(query), None if key is None else np.asarray(key)
    if past_key is not None:
        cache_type = np.asarray(past_key).dtype.name
        if cache_type not in _CACHE_TYPES:
            cache_type = "float32"  # (converted below; in place refuses it)
    else:
        cache_type = _out_dtype(key_arr if key_arr is not None else q_arr).name
    attrs = {
        "num_heads": int_arg("num_heads", num_heads, *INT64), "kv_num_heads": int_arg("kv_num_heads", kv_num_heads, *INT64),
        "local_window_size": int_arg("local_window_size", local_window_size, *INT64), "softcap": float(softcap),
        "scale": 0.0 if scale is None else float(scale), "causal": int_arg("causal", causal, *INT64),
        "do_rotary": int_arg("do_rotary", do_rotary, *INT64),
        "rotary_interleaved": int_arg("rotary_interleaved", rotary_interleaved, *INT64),
        "smooth_softmax": int_arg("smooth_softmax", smooth_softmax, *INT64),
        "qk_output": int_arg("qk_output", qk_output, *INT64),
    }
    caches = [_cache("past_key", past_key, inplace), _cache("past_value", past_value, inplace)]
    if past_key is not None and past_value is not None and cache_type in _HALF:
        if np.asarray(past_value).dtype.name != cache_type:
            raise ValueError(f"GroupQueryAttention: past_value dtype {np.asarray(past_value).dtype} differs from "
                             f"past_key dtype {cache_type}")
    inputs = [
        _f32("query", q_arr), _opt_f32("key", key), _opt_f32("value", value), caches[0], caches[1],
        _ints("seqlens_k", seqlens_k, np.int32),
        _ints("total_sequence_length", total_sequence_length, np.int32), _opt_f32("cos_cache", cos_cache),
        _opt_f32("sin_cache", sin_cache), None if position_ids is None else _ints("position_ids", position_ids, np.int64),
        _opt_f32("attention_bias", attention_bias), _opt_f32("head_sink", head_sink)]
    outs = list(_onnx.group_query_attention(inputs, cache_type, attrs, inplace, str(kernel),
                                            int_arg("num_threads", num_threads, *THREADS)))
    if inplace:
        outs[1], outs[2] = past_key, past_value  # the caller's arrays, updated
    elif cache_type in _HALF:
        outs[1], outs[2] = outs[1].view(cache_type), outs[2].view(cache_type)
    out_type = _out_dtype(q_arr)
    outs[0] = _as(outs[0], out_type)
    if len(outs) == 4:
        outs[3] = _as(outs[3], out_type)
    return tuple(outs)


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
