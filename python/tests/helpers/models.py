"""The tiny random-weight checkpoints of tests/testdata/models (python/scripts/make_tiny_checkpoints.py):
where they are, their goldens, and rewriting their safetensors file for the tests that need a
patched or converted copy (format: 8-byte little-endian header size, JSON header, raw data)."""
from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# The C++ build whose binaries (tessera CLI, benchmarks) the subprocess tests run.
BUILD_DIR = os.environ.get("TESSERA_BUILD_DIR", os.path.join(REPO, "build", "release"))
MODELS_DIR = os.path.join(REPO, "tests", "testdata", "models")
NAMES = ["gemma3_text", "gemma3", "gemma4_text", "gemma4", "gemma4_unified", "gemma4_moe"]


def model_dir(name):
    return os.path.join(MODELS_DIR, name)


def load_golden(name, file="golden.npz"):
    """A checkpoint's golden arrays (golden.npz: transformers' float32 run; golden_bf16.npz: bf16)."""
    return dict(np.load(os.path.join(MODELS_DIR, name, file)))


def mm_kwargs(z, prefix=""):
    """The multimodal arguments a golden holds (prefix "gen_" for the generation prompt's)."""
    kw = {}
    for key in ("token_type_ids", "mm_token_type_ids", "image_embeds"):
        if prefix + key in z:
            kw[key] = z[prefix + key]
    return kw


def read_safetensors(path):
    """(header dict, offset of the data section, the whole file as bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), 8 + n, data


_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def load_tensors(path):
    """A safetensors file as {name: array} (read-only views of the file's bytes); our own reader, so
    the tests need no safetensors package (it comes with the peers, which a small disk goes without)."""
    header, base, data = read_safetensors(path)
    out = {}
    for k, v in header.items():
        if k != "__metadata__":
            a, b = v["data_offsets"]
            out[k] = np.frombuffer(data[base + a:base + b], dtype=_DTYPES[v["dtype"]]).reshape(v["shape"])
    return out


def write_tensors(path, tensors):
    """Writes {name: (dtype, shape, raw bytes)} as a safetensors file (dtype: "F32", "F16", "BF16", ...)."""
    header, off = {}, 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(raw for _, _, raw in tensors.values()))


def write_f32_tensors(path, tensors):
    """Writes {name: array} as an all-F32 safetensors file (the fixtures' own type)."""
    for name, a in tensors.items():
        assert np.asarray(a).dtype.kind == "f", name
    write_tensors(path, {name: ("F32", np.shape(a), np.ascontiguousarray(a, dtype=np.float32).tobytes())
                         for name, a in tensors.items()})


def copy_config(src, dst):
    """Creates `dst` holding src's config.json; the caller writes dst/model.safetensors."""
    os.makedirs(dst, exist_ok=True)
    shutil.copyfile(os.path.join(src, "config.json"), os.path.join(dst, "config.json"))
