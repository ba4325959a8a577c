"""GGUF files through Tessera's own reader and writer (docs/gguf.md).

    contents = tessera.gguf.read("model.gguf")
    contents.metadata["general.architecture"]        # 'gemma3'
    contents.types["tokenizer.ggml.tokens"]          # 'array[string]'
    t = contents.tensors[0]; t.name, t.shape, t.type, t.data   # shape outermost first; raw bytes

    tessera.gguf.write("out.gguf",
                       metadata=[("general.architecture", "string", "gemma3"), ("n", "u32", 7),
                                 ("ids", "array[i32]", [1, 2])],
                       tensors=[("w", (2, 32), "q8_0", block_bytes), ("b", (4,), "f32", np_array)])

Types are GGUF's: u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool string, arrays as array[<type>];
tensor types are ggml's names (f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_K q5_K q6_K). Bad files and bad
arguments raise ValueError (MemoryError when the disk or memory is full) naming the file and field.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _tessera

__all__ = ["GgufContents", "GgufTensor", "read", "write", "GGML_TYPE_NAMES"]

# ggml type ids of the tensor types Tessera reads and writes.
GGML_TYPE_NAMES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 12: "q4_K",
                   13: "q5_K", 14: "q6_K", 30: "bf16"}


@dataclass
class GgufTensor:
    name: str
    shape: tuple  # outermost first (GGUF's ne[] reversed)
    type: str     # ggml's type name
    data: bytes   # the stored bytes

    def array(self) -> np.ndarray:
        """The data as a numpy array of its element type (f32/f16/bf16-as-uint16), or raw uint8 blocks."""
        dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}.get(self.type)
        if dtype is None:
            return np.frombuffer(self.data, dtype=np.uint8)
        return np.frombuffer(self.data, dtype=dtype).reshape(self.shape)


@dataclass
class GgufContents:
    version: int
    alignment: int
    metadata: dict = field(default_factory=dict)  # key -> value, in file order
    types: dict = field(default_factory=dict)     # key -> type name
    tensors: list = field(default_factory=list)   # [GgufTensor] in file order

    def tensor(self, name: str) -> GgufTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


def _text(b: bytes):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b  # GGUF strings are meant to be UTF-8; keep what the file holds when not


def read(path) -> GgufContents:
    """Reads and validates a GGUF file with Tessera's reader."""
    metadata, (version, alignment), tensors = _tessera.gguf_read(str(path))
    out = GgufContents(version=version, alignment=alignment)
    for key, type_name, value in metadata:
        if type_name == "string":
            value = _text(value)
        elif type_name == "array[string]":
            value = [_text(v) for v in value]
        out.metadata[key] = value
        out.types[key] = type_name
    for name, shape, type_id, data in tensors:
        out.tensors.append(GgufTensor(name, tuple(shape), GGML_TYPE_NAMES[type_id], data))
    return out


def write(path, metadata, tensors, alignment: int = 32) -> None:
    """Writes a GGUF (v3) with Tessera's writer.

    metadata: [(key, type, value)]; tensors: [(name, shape, type, data)] where data is a
    bytes-like object or numpy array holding exactly the tensor's bytes.
    """
    items = []
    for name, shape, type_name, data in tensors:
        buf = np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data
        items.append((name, [int(d) for d in shape], type_name, buf))
    _tessera.gguf_write(str(path), list(metadata), items, int(alignment))
