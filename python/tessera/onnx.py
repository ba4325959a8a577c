"""ONNX-operator semantics (Attention opsets 23/24, com.microsoft.GroupQueryAttention) on Tessera kernels."""
from ._tessera import onnx as _onnx  # noqa: F401
