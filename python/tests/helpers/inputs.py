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
