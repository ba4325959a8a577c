"""Random test inputs. Each maker keeps the generator stream its tests were tuned on: `draw` says
whether N(0, 1) is drawn in float64 and cast (np.float64) or drawn in float32 directly (np.float32);
the two give different numbers from the same seed."""
from __future__ import annotations

import numpy as np


def randn(rng, *shape, draw=np.float32):
    """N(0, 1) float32 of `shape`."""
    if draw == np.float32:
        return rng.standard_normal(shape, dtype=np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def qkv(rng, B=2, Hq=4, Hkv=2, S_q=7, S_kv=40, D=16, Dv=12, draw=np.float64):
    """q [B, Hq, S_q, D], k [B, Hkv, S_kv, D], v [B, Hkv, S_kv, Dv], drawn in that order."""
    return (randn(rng, B, Hq, S_q, D, draw=draw), randn(rng, B, Hkv, S_kv, D, draw=draw),
            randn(rng, B, Hkv, S_kv, Dv, draw=draw))


class GqaStep:
    """One GroupQueryAttention step's inputs for S tokens of B rows, in its [B, S, heads * D] layout:
    query, key, value, or (packed) query = [query | key | value] with key = value = None."""

    def __init__(self, rng, B, S, Hq, Hkv, D, packed=False):
        self.query = randn(rng, B, S, Hq * D)
        self.key, self.value = randn(rng, B, S, Hkv * D), randn(rng, B, S, Hkv * D)
        if packed:
            self.query = np.concatenate([self.query, self.key, self.value], axis=2)
            self.key = self.value = None


def heads_first(x, H):
    """[B, S, H*D] (the GroupQueryAttention layout) -> [B, H, S, D] (tessera.attention's)."""
    B, S, HD = x.shape
    return np.ascontiguousarray(x.reshape(B, S, H, HD // H).transpose(0, 2, 1, 3))


def attention_feeds(seed, B, Hq, Hkv, S_q, S_kv, D, Dv=None, *, rank=4, past=0, mask_shape=None, mask_kind=None,
               nonpad=None, fully_masked_rows=False):
    """Random inputs of one ONNX Attention node, keyed by input name: Q, K, V (4-D, or 3-D with
    rank=3), past_key/past_value of `past` tokens, attn_mask of `mask_shape` (bool: 30% False;
    float: N(0, 1) with 20% -inf; fully_masked_rows: query row 0 masked everywhere),
    nonpad_kv_seqlen. Returns (feeds, attrs with the head counts for rank 3)."""
    rng = np.random.default_rng(seed)
    Dv = D if Dv is None else Dv
    r = lambda *s: randn(rng, *s)  # noqa: E731
    if rank == 4:
        feeds = {"Q": r(B, Hq, S_q, D), "K": r(B, Hkv, S_kv, D), "V": r(B, Hkv, S_kv, Dv)}
        attrs = {}
    else:
        feeds = {"Q": r(B, S_q, Hq * D), "K": r(B, S_kv, Hkv * D), "V": r(B, S_kv, Hkv * Dv)}
        attrs = {"q_num_heads": Hq, "kv_num_heads": Hkv}
    if past:
        feeds["past_key"], feeds["past_value"] = r(B, Hkv, past, D), r(B, Hkv, past, Dv)
    if mask_shape is not None:
        if mask_kind == "bool":
            m = rng.random(mask_shape) > 0.3
            if fully_masked_rows:
                m[..., 0, :] = False
        else:
            m = r(*mask_shape)
            m[rng.random(mask_shape) < 0.2] = -np.inf
            if fully_masked_rows:
                m[..., 0, :] = -np.inf
        feeds["attn_mask"] = m
    if nonpad is not None:
        feeds["nonpad_kv_seqlen"] = np.asarray(nonpad, dtype=np.int64)
    return feeds, attrs
