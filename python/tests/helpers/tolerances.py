"""Tolerances shared by several test files, with the reason for each value.

ATOL, RTOL: float32 against float32 computed in another order -- onnxruntime (MLAS GEMM, softmax
per row) or another Tessera kernel / slot order (8-lane dot products, online softmax over 64-key
tiles, split-K merge in decode). Inputs are N(0, 1) and outputs convex combinations of V rows
(|Y| < ~4); observed differences are <= 1e-6, so 1e-5 leaves ~10x margin while an off-by-one in a
position, window edge, mask or cache offset moves outputs by O(0.1).

BF16_ULP: the relative spacing of bfloat16 (8 significant bits); one rounding is within half of it.
"""
from __future__ import annotations

import numpy as np

ATOL = RTOL = 1e-5
BF16_ULP = 2.0 ** -8


def assert_outputs_close(names, got, want, what="", atol=ATOL, rtol=RTOL):
    """Each named output: the same shape, then within atol + rtol * |want|."""
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, f"{what} {name}: shape {g.shape} != {w.shape}"
        np.testing.assert_allclose(g, w, atol=atol, rtol=rtol, err_msg=f"{what} {name}")
