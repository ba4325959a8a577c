"""tessera.quantize: a Hugging Face Gemma 3 / Gemma 4 checkpoint to a GGUF (docs/quantizing.md)."""
from __future__ import annotations

import os

from . import _tessera


def quantize(model, type, out):  # noqa: A002 -- the CLI's --type
    """Writes `out`, a GGUF of the checkpoint directory `model` quantized to `type` ("q8_0", "q4_0",
    "q4_k_m" or "q5_k_m") that Tessera and llama.cpp both run: llama.cpp's converter's metadata and tensor
    names, the checkpoint's tokenizer, and the tensor types llama.cpp's quantizer picks.
    Returns {tensor name: stored type} in file order. Bad input raises ValueError naming it."""
    return dict(_tessera.quantize_checkpoint(os.fspath(model), str(type), os.fspath(out)))
