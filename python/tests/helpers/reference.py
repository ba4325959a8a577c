"""Plain numpy models of attention in float64, written from docs/attention.md, the ONNX operator
texts and transformers' eager attention -- never from Tessera's C++, and never calling Tessera.

Mask conventions (one function serves both the ONNX/Tessera and the transformers semantics):
  * `vis` False or a -inf `bias` entry excludes a key; a query row left with no key is zero (the ONNX
    Attention rule, Tessera's too).
  * A finite bias, however negative, is only added to the score: a row whose keys all carry float32
    min averages them, as transformers' eager attention does with its float mask.
"""
from __future__ import annotations

import numpy as np
import pytest


def visible(B, S_q, S_kv, q_pos, k_pos, kv_valid, causal, window, q_block, k_block):
    """[B, S_q, S_kv] bool: the structured mask of docs/attention.md, one (query, key) pair at a time."""
    vis = np.zeros((B, S_q, S_kv), dtype=bool)
    left, right = window
    for b in range(B):
        for i in range(S_q):
            for j in range(S_kv):
                if j >= kv_valid[b]:
                    continue
                d = int(q_pos[b, i]) - int(k_pos[b, j])
                if left >= 0 and d > left:
                    continue
                if right >= 0 and -d > right:
                    continue
                in_block = q_block is not None and q_block[b, i] >= 0 and q_block[b, i] == k_block[b, j]
                if causal and d < 0 and not in_block:
                    continue
                vis[b, i, j] = True
    return vis


def attention(q, k, v, vis, scale, softcap=0.0, bias=None, out_dtype=np.float32, sink=None, probs=False):
    """softmax(softcap(q k^T * scale) + bias) v over the visible keys, in float64.

    q [B, Hq, S_q, D], k [B, Hkv, S_kv, D], v [B, Hkv, S_kv, Dv]; query head h reads kv head
    h // (Hq / Hkv). vis [B, S_q, S_kv] or None (all visible); bias broadcasts to [B, Hq, S_q, S_kv].
    sink [Hq]: a per-head logit added to every softmax denominator (attention sinks).
    out_dtype: float32 where the caller compares a float32 reference, float64 to keep every bit.
    probs=True also returns the weights [B, Hq, S_q, S_kv] (0 for invisible keys)."""
    B, Hq, S_q, D = q.shape
    Hkv, S_kv = k.shape[1], k.shape[2]
    group = Hq // Hkv
    kk = np.repeat(k.astype(np.float64), group, axis=1)
    vv = np.repeat(v.astype(np.float64), group, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), kk) * scale
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if bias is not None:
        s = s + np.broadcast_to(bias, s.shape)
    if vis is None:
        vis = np.ones((B, S_q, S_kv), dtype=bool)
    mask = np.broadcast_to(vis[:, None], s.shape)
    if bias is not None:
        mask = mask & np.isfinite(np.broadcast_to(bias, s.shape))
    s = np.where(mask, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.where(mask, np.exp(s - m), 0.0)
    denom = w.sum(-1, keepdims=True)
    if sink is not None:  # (a row with no visible key stays zero: its numerators are all 0)
        denom = denom + np.exp(np.asarray(sink, np.float64).reshape(1, -1, 1, 1) - m)
    w = w / np.where(denom > 0, denom, 1.0)
    out = np.einsum("bhqk,bhkd->bhqd", w, vv).astype(out_dtype)
    return (out, w) if probs else out


def group_query_attention(query, cache_k, cache_v, seqlens_k, num_heads, kv_num_heads, local_window_size=-1,
                          softcap=0.0, scale=None, attention_bias=None, causal=True, sink=None, probs=False,
                          rotary=None):
    """com.microsoft.GroupQueryAttention after its cache update (src/onnx/group_query_attention.h), float64.

    query [B, S, >= num_heads * D] (a packed QKV's leading part is the query); cache_k/v [B, Hkv, C, D]
    already hold the step's keys. Row b has T_b = seqlens_k[b] + 1 keys; its S query rows sit at
    positions T_b - min(S, T_b) onwards, padding rows (s >= T_b) included. causal=False: every key
    j < T_b. local_window_size W: the W most recent keys including the query's own; softcap is
    applied before attention_bias [1 or B, 1 or Hq, S, total]; sink [Hq] joins every denominator.
    rotary (cos, sin, positions [B, S], interleaved) rotates the query rows first (see `rotate`).
    Returns [B, S, num_heads * D], and with probs=True the weights [B, Hq, S, C] too."""
    B, S, _ = query.shape
    C, D = cache_k.shape[2], cache_k.shape[3]
    scale = 1 / np.sqrt(D) if not scale else scale
    q = query[:, :, :num_heads * D].reshape(B, S, num_heads, D)
    if rotary is not None:
        q = rotate(q, *rotary)
    q = q.transpose(0, 2, 1, 3)
    T = np.asarray(seqlens_k, np.int64) + 1
    pos = (T - np.minimum(S, T))[:, None] + np.arange(S)[None, :]  # [B, S]
    j = np.arange(C)[None, None, :]
    vis = (j < T[:, None, None]) & ((j <= pos[:, :, None]) | (not causal))
    if local_window_size >= 0:
        vis &= pos[:, :, None] - j < local_window_size
    bias = None
    if attention_bias is not None:  # keys past total_sequence_length are invisible: pad with 0
        bias = np.zeros(attention_bias.shape[:3] + (C,))
        bias[..., :attention_bias.shape[3]] = attention_bias
    out = attention(q, cache_k, cache_v, vis, scale, softcap, bias, out_dtype=np.float64, sink=sink, probs=probs)
    w = None
    if probs:
        out, w = out
    out = out.transpose(0, 2, 1, 3).reshape(B, S, num_heads * D)
    return (out, w) if probs else out


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x [B, S, H, D] in float64 (GroupQueryAttention's do_rotary): the first
    R = 2 * cos.shape[1] dims of token (b, s) rotate by row positions[b, s] of cos/sin; pairs
    (2i, 2i + 1) when interleaved, else (i, i + R/2)."""
    x = np.array(x, dtype=np.float64)
    half = cos.shape[1]
    c = np.asarray(cos, np.float64)[positions][:, :, None, :]
    s = np.asarray(sin, np.float64)[positions][:, :, None, :]
    i1 = np.arange(half) * 2 if interleaved else np.arange(half)
    i2 = i1 + 1 if interleaved else i1 + half
    x1, x2 = x[..., i1].copy(), x[..., i2].copy()
    x[..., i1] = x1 * c - x2 * s
    x[..., i2] = x1 * s + x2 * c
    return x


def round_bf16(a):
    """float32 -> nearest-even bfloat16, returned as float64 (skips the test without ml_dtypes)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def bf16_precision_causal_attention(q, k, v):
    """Bottom-right causal attention at precision bf16: q, K/V and the normalized softmax weights
    rounded to bf16, products exact, sums in float64. Returns float64 [B, Hq, S_q, Dv]."""
    hq, hkv, s_q, d = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    s_kv = k.shape[2]
    kb, vb = np.repeat(round_bf16(k), hq // hkv, axis=1), np.repeat(round_bf16(v), hq // hkv, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", round_bf16(q), kb) / np.sqrt(d)
    q_pos = s_kv - s_q + np.arange(s_q)
    s = np.where(np.arange(s_kv)[None, :] <= q_pos[:, None], s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", round_bf16(w / w.sum(-1, keepdims=True)), vb)
