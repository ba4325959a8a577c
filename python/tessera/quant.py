"""Block-quantized weight formats with GGUF's layouts (docs/quantization.md).

Types: "q4_0", "q5_0", "q8_0", "q4_1", "q5_1" (blocks of 32 values) and "q4_k", "q5_k", "q6_k" (blocks
of 256).
A row of n values is n / block_size blocks back to back; the last axis of an array is the row.

  quantize(x, type)          float array [..., n] -> uint8 [..., row_bytes(type, n)], the bytes
                             llama.cpp's quantizer writes for the same values (no importance matrix)
  dequantize(q, type, n)     uint8 [..., row_bytes(type, n)] -> float32 [..., n], exactly ggml's values
  first_non_finite_block(q, type, n)   index of the first block with a NaN/inf scale, or -1
"""
from __future__ import annotations

import numpy as np

from . import _tessera

__all__ = ["TYPES", "block_size", "block_bytes", "row_bytes", "quantize", "dequantize",
           "first_non_finite_block"]

TYPES = ("q4_0", "q5_0", "q8_0", "q4_k", "q5_k", "q6_k", "q4_1", "q5_1")


def block_size(qtype: str) -> int:
    """Values per block (32 or 256)."""
    return _tessera.quant_block(qtype)[0]


def block_bytes(qtype: str) -> int:
    """Bytes per block."""
    return _tessera.quant_block(qtype)[1]


def row_bytes(qtype: str, n: int) -> int:
    """Bytes of a row of n values; ValueError unless n is a whole number of blocks."""
    elems, nbytes = _tessera.quant_block(qtype)
    if n < 0 or n % elems:
        raise ValueError(f"{qtype}: {n} values are not a whole number of blocks of {elems}")
    return n // elems * nbytes


def quantize(x, qtype: str) -> np.ndarray:
    a = np.ascontiguousarray(x, dtype=np.float32)
    if a.ndim == 0:
        raise ValueError("quantize needs at least one axis (the row)")
    out_last = row_bytes(qtype, a.shape[-1])
    return _tessera.quantize(a.reshape(-1), qtype).reshape(*a.shape[:-1], out_last)


def dequantize(q, qtype: str, n: int) -> np.ndarray:
    a = np.ascontiguousarray(q, dtype=np.uint8)
    want = row_bytes(qtype, n)
    if a.ndim == 0 or a.shape[-1] != want:
        raise ValueError(f"{qtype}: a row of {n} values takes {want} bytes, got shape {a.shape}")
    rows = a.size // want if want else 0
    return _tessera.dequantize(a.reshape(-1), qtype, rows * n).reshape(*a.shape[:-1], n)


def first_non_finite_block(q, qtype: str, n: int) -> int:
    """Over the flattened data as rows of n values: the first block (counting across rows) whose
    f16 scale(s) are NaN or inf, or -1."""
    a = np.ascontiguousarray(q, dtype=np.uint8).reshape(-1)
    want = row_bytes(qtype, n)
    if want == 0 or a.size % want:
        raise ValueError(f"{qtype}: {a.size} bytes are not whole rows of {n} values ({want} bytes)")
    return _tessera.first_non_finite_block(a, qtype, a.size // want * n)
