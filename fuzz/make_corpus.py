#!/usr/bin/env python3
"""Writes the committed seed corpora under fuzz/corpus/ (valid files plus hand-made edge cases).

Run from the repository root with the project's .venv (numpy). The tokenizer seeds are small
SentencePiece models trained with Debian's spm_train on a few lines of text (identity
normalization keeps them a few hundred bytes instead of ~240 KB of NFKC tables), e.g.
  spm_train --input=text.txt --model_prefix=unigram --vocab_size=60 --model_type=unigram \
            --normalization_rule_name=identity --character_coverage=1.0 --hard_vocab_limit=false
and are written by hand into fuzz/corpus/tokenizer/.
"""
import io
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def npy_bytes(a, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, a)
    else:
        np.lib.format.write_array(b, a, version=version)
    return b.getvalue()


def npy_with_header(header, data=b""):
    h = header.encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


def npy():
    put("npy", "f32_2d.npy", npy_bytes(np.arange(12, dtype="<f4").reshape(3, 4)))
    put("npy", "f32_1d.npy", npy_bytes(np.array([1.5, -2.0, np.inf], dtype="<f4")))
    put("npy", "f32_empty_rows.npy", npy_bytes(np.zeros((0, 4), dtype="<f4")))
    put("npy", "f32_v2.npy", npy_bytes(np.ones((2, 2), dtype="<f4"), version=(2, 0)))
    put("npy", "f64.npy", npy_bytes(np.ones(3, dtype="<f8")))
    put("npy", "fortran.npy", npy_bytes(np.asfortranarray(np.ones((2, 3), dtype="<f4"))))
    put("npy", "rank3.npy", npy_bytes(np.ones((1, 2, 2), dtype="<f4")))
    put("npy", "bad_dim.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (abc, 4), }\n"))
    put("npy", "short_data.npy", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }\n",
                                                b"\0" * 12))
    put("npy", "huge_dims.npy", npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }\n"))
    put("npy", "bad_magic.npy", b"\x93NUMPX\x01\x00\x00\x00")


def safetensors(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st_header():
    f32 = np.arange(6, dtype="<f4").tobytes()
    put("safetensors_header", "valid_mixed.safetensors", safetensors(
        [("w.f32", "F32", [2, 3], f32), ("w.bf16", "BF16", [4], b"\x80\x3f" * 4), ("w.f16", "F16", [2], b"\x00\x3c" * 2),
         ("ids", "I64", [1], b"\x01" + b"\0" * 7), ("empty", "F32", [0, 5], b""), ("scalar", "F32", [], f32[:4])],
        metadata={"format": "pt"}))
    put("safetensors_header", "gemma_names.safetensors", safetensors(
        [("model.language_model.embed_tokens.weight", "BF16", [4, 2], b"\x00\x3f" * 8),
         ("model.language_model.norm.weight", "F32", [2], f32[:8])]))
    put("safetensors_header", "empty_header.safetensors", safetensors([]))
    put("safetensors_header", "overlap.safetensors", struct.pack("<Q", 96) + json.dumps(
        {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()[:96].ljust(96) + b"\0" * 16)
    put("safetensors_header", "len_past_end.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
    put("safetensors_header", "misaligned.safetensors", safetensors([("x", "F32", [1], b"\0" * 4)], pad=False) + b"")


def st_index():
    shard = safetensors([("model.embed_tokens.weight", "F32", [2, 2], np.ones(4, dtype="<f4").tobytes()),
                         ("model.norm.weight", "BF16", [2], b"\x80\x3f" * 2),
                         ("lm_head.weight", "F16", [2, 2], b"\x00\x3c" * 4)])
    sep = b"\n--shard--\n"
    wm = {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
          "model.norm.weight": "model-00002-of-00002.safetensors",
          "lm_head.weight": "model-00002-of-00002.safetensors"}
    put("safetensors_index", "valid.txt", json.dumps({"metadata": {"total_size": 24}, "weight_map": wm}).encode()
        + sep + shard)
    put("safetensors_index", "missing_tensor.txt", json.dumps({"weight_map": {"absent": "a.safetensors"}}).encode()
        + sep + shard)
    put("safetensors_index", "traversal.txt", json.dumps({"weight_map": {"x": "../model.safetensors"}}))
    put("safetensors_index", "subdir.txt", json.dumps({"weight_map": {"x": "sub/model.safetensors"}}))
    put("safetensors_index", "non_string.txt", json.dumps({"weight_map": {"x": 3}}))
    put("safetensors_index", "no_shard.txt", json.dumps({"weight_map": {"x": "a.safetensors"}}))
    put("safetensors_index", "no_weight_map.txt", json.dumps({"metadata": {}}))


def configs():
    models = os.path.join(os.path.dirname(ROOT), "..", "tests", "testdata", "models")
    for m in sorted(os.listdir(models)):
        p = os.path.join(models, m, "config.json")
        if os.path.exists(p):
            with open(p, "rb") as f:
                put("model_config", m + ".json", f.read())
    base = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
    put("model_config", "sparse_gemma3_text.json", json.dumps(base))
    put("model_config", "sparse_gemma3.json", json.dumps({"model_type": "gemma3", "text_config": base}))
    put("model_config", "rope_linear.json", json.dumps(dict(base, num_hidden_layers=6,
                                                            rope_scaling={"rope_type": "linear", "factor": 8.0})))
    put("model_config", "rope_linear_tiny_factor.json", json.dumps(dict(base, num_hidden_layers=6, rope_scaling={
        "rope_type": "linear", "factor": 1e-300})))
    g4 = dict(base, model_type="gemma4_text", num_kv_shared_layers=1, layer_types=["sliding_attention", "full_attention"],
              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                               "full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                                  "partial_rotary_factor": 0.25}})
    put("model_config", "gemma4_shared.json", json.dumps(g4))
    put("model_config", "not_object.json", "[1, 2, 3]")
    put("model_config", "bad_type.json", json.dumps(dict(base, hidden_size="64")))


def drafter_configs():
    models = os.path.join(os.path.dirname(ROOT), "..", "tests", "testdata", "models")
    for m in ("gemma4_assistant", "gemma4_assistant_copy"):
        with open(os.path.join(models, m, "config.json"), "rb") as f:
            data = f.read()
        put("drafter_config", m + ".json", data)
    cfg = json.loads(data)
    put("drafter_config", "ordered.json", json.dumps(dict(cfg, use_ordered_embeddings=True)))
    put("drafter_config", "no_text.json", json.dumps({"model_type": "gemma4_assistant"}))
    put("drafter_config", "partly_shared.json", json.dumps(dict(cfg, text_config=dict(cfg["text_config"],
                                                                                      num_kv_shared_layers=1))))
    put("drafter_config", "main_type.json", json.dumps(dict(cfg["text_config"])))


def images():
    """Tiny JPEG/PNG seeds for the image decoder (needs PIL): each colour type and JPEG mode once."""
    from PIL import Image

    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8))

    def enc(im, fmt, **kw):
        b = io.BytesIO()
        im.save(b, fmt, **kw)
        return b.getvalue()

    exif = Image.Exif()
    exif[0x0112] = 6
    put("image_decode", "rgb.png", enc(rgb, "PNG"))
    put("image_decode", "rgba.png", enc(rgb.convert("RGBA"), "PNG"))
    put("image_decode", "gray1.png", enc(rgb.convert("1"), "PNG"))
    put("image_decode", "la.png", enc(rgb.convert("LA"), "PNG"))
    put("image_decode", "palette_trns.png", enc(rgb.convert("P"), "PNG", transparency=2))
    put("image_decode", "rgb.jpg", enc(rgb, "JPEG", quality=50))
    put("image_decode", "gray.jpg", enc(rgb.convert("L"), "JPEG", quality=50))
    put("image_decode", "cmyk.jpg", enc(rgb.convert("CMYK"), "JPEG", quality=50))
    put("image_decode", "progressive.jpg", enc(rgb, "JPEG", quality=50, progressive=True))
    put("image_decode", "exif6.jpg", enc(rgb, "JPEG", quality=50, exif=exif.tobytes()))
    put("image_decode", "exif6.png", enc(rgb, "PNG", exif=exif.tobytes()))


def gguf_bytes(kvs, tensors, version=3, alignment=32, pad=True):
    """A GGUF image written field by field (little-endian). kvs: [(key, type id, packed value bytes)];
    tensors: [(name, ne innermost first, ggml type id, data bytes)], laid out packed at `alignment`."""
    def s(x):
        x = x.encode() if isinstance(x, str) else x
        return struct.pack("<Q", len(x)) + x

    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, value in kvs:
        out += s(key) + struct.pack("<I", t) + value
    offset, data = 0, b""
    for name, ne, t, blob in tensors:
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne)
        out += struct.pack("<IQ", t, offset)
        padded = blob + b"\0" * (-len(blob) % alignment)
        data += padded
        offset += len(padded)
    if pad and tensors:
        out += b"\0" * (-len(out) % alignment)
    return out + data


def gguf():
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x

    def arr(t, fmt, values):
        return struct.pack("<IQ", t, len(values)) + b"".join(struct.pack("<" + fmt, v) for v in values)

    rng = np.random.default_rng(0)
    kvs = [
        ("general.architecture", 8, s("gemma3")),
        ("gemma3.block_count", 4, struct.pack("<I", 2)),
        ("gemma3.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-6)),
        ("u8", 0, b"\xff"), ("i8", 1, b"\x80"), ("u16", 2, b"\xff\xff"), ("i16", 3, b"\x00\x80"),
        ("i32", 5, struct.pack("<i", -7)), ("b", 7, b"\x01"), ("u64", 10, struct.pack("<Q", 2**64 - 1)),
        ("i64", 11, struct.pack("<q", -(2**63))), ("f64", 12, struct.pack("<d", 0.1)),
        ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("<pad>") + s("\u2581a") + s("")),
        ("tokenizer.ggml.scores", 9, arr(6, "f", [0.0, -1.5, 2.0])),
        ("tokenizer.ggml.token_type", 9, arr(5, "i", [3, 1, 1])),
        ("bools", 9, arr(7, "B", [1, 0])), ("u64s", 9, arr(10, "Q", [0, 2**64 - 1])),
        ("f64s", 9, arr(12, "d", [1e300])), ("empty", 9, arr(0, "B", [])),
    ]

    def blocks(n_blocks, block_bytes):
        return rng.integers(0, 256, n_blocks * block_bytes, dtype=np.uint8).tobytes()

    tensors = [
        ("token_embd.weight", [4, 3], 0, rng.standard_normal(12).astype("<f4").tobytes()),
        ("f16", [8], 1, rng.standard_normal(8).astype("<f2").tobytes()),
        ("bf16", [4, 2], 30, blocks(8, 2)),
        ("blk.0.attn_q.weight", [64, 2], 2, blocks(4, 18)),
        ("q5_0", [32], 6, blocks(1, 22)),
        ("blk.0.ffn_down.weight", [32, 2], 8, blocks(2, 34)),
        ("q4_K", [256], 12, blocks(1, 144)),
        ("q5_K", [256], 13, blocks(1, 176)),
        ("q6_K", [256], 14, blocks(1, 210)),
        ("empty", [0, 4], 0, b""),
    ]
    put("gguf", "full.gguf", gguf_bytes(kvs, tensors))
    put("gguf", "q8_0_only.gguf", gguf_bytes(kvs[:3], tensors[5:6]))
    put("gguf", "v2.gguf", gguf_bytes(kvs[:1], tensors[:2], version=2))
    put("gguf", "align64.gguf", gguf_bytes([("general.alignment", 4, struct.pack("<I", 64))] + kvs[:2],
                                           tensors[3:5], alignment=64))
    put("gguf", "metadata_only.gguf", gguf_bytes(kvs, []))
    put("gguf", "empty.gguf", gguf_bytes([], []))
    # refused: nested array, q8_1 tensor, truncated data, big-endian version
    put("gguf", "nested.gguf", gguf_bytes([("n", 9, struct.pack("<IQ", 9, 1) + arr(4, "I", [1]))], []))
    put("gguf", "q8_1.gguf", gguf_bytes([], [("t", [32], 9, blocks(1, 36))]))
    put("gguf", "truncated.gguf", gguf_bytes(kvs[:1], tensors[:1])[:-20])
    put("gguf", "big_endian.gguf", b"GGUF" + struct.pack(">IQQ", 3, 0, 0))


def gguf_model():
    """Gemma 3 / Gemma 4 metadata as llama.cpp's converter writes it, with a tiny token_embd (the
    config reads only its shape) and Gemma 4's rope_freqs; tokenizer keys for ReadGgufVocab."""
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x

    def u32(v):
        return 4, struct.pack("<I", v)

    def f32(v):
        return 6, struct.pack("<f", v)

    def arr(t, fmt, values):
        return 9, struct.pack("<IQ", t, len(values)) + b"".join(struct.pack("<" + fmt, v) for v in values)

    def kv(items):
        return [(k, t, v) for k, (t, v) in items]

    tok = [("tokenizer.ggml.model", (8, s("llama"))),
           ("tokenizer.ggml.tokens", (9, struct.pack("<IQ", 8, 4) + s("<pad>") + s("<eos>") + s("<bos>") + s("a"))),
           ("tokenizer.ggml.scores", arr(6, "f", [0.0, 0.0, 0.0, -1.0])),
           ("tokenizer.ggml.bos_token_id", u32(2)), ("tokenizer.ggml.eos_token_id", u32(1))]
    embd = ("token_embd.weight", [8, 4], 0, np.arange(32, dtype="<f4").tobytes())
    g3 = [("general.architecture", (8, s("gemma3"))), ("gemma3.block_count", u32(7)),
          ("gemma3.context_length", u32(4096)), ("gemma3.embedding_length", u32(8)),
          ("gemma3.feed_forward_length", u32(16)), ("gemma3.attention.head_count", u32(2)),
          ("gemma3.attention.head_count_kv", u32(1)), ("gemma3.attention.key_length", u32(4)),
          ("gemma3.attention.value_length", u32(4)), ("gemma3.attention.layer_norm_rms_epsilon", f32(1e-6)),
          ("gemma3.rope.freq_base", f32(1e6)), ("gemma3.rope.freq_base_swa", f32(1e4)),
          ("gemma3.rope.scaling.type", (8, s("linear"))), ("gemma3.rope.scaling.factor", f32(8.0)),
          ("gemma3.attention.sliding_window", u32(4)), ("gemma3.final_logit_softcapping", f32(30.0))]
    put("gguf_model", "gemma3.gguf", gguf_bytes(kv(g3 + tok), [embd]))
    g4 = [("general.architecture", (8, s("gemma4"))), ("gemma4.block_count", u32(4)),
          ("gemma4.context_length", u32(4096)), ("gemma4.embedding_length", u32(8)),
          ("gemma4.feed_forward_length", arr(5, "i", [16, 16, 32, 32])), ("gemma4.attention.head_count", u32(2)),
          ("gemma4.attention.head_count_kv", arr(5, "i", [1, 2, 1, 2])), ("gemma4.attention.key_length", u32(8)),
          ("gemma4.attention.value_length", u32(8)), ("gemma4.attention.key_length_swa", u32(4)),
          ("gemma4.attention.value_length_swa", u32(4)), ("gemma4.attention.layer_norm_rms_epsilon", f32(1e-6)),
          ("gemma4.rope.freq_base", f32(1e6)), ("gemma4.rope.freq_base_swa", f32(1e4)),
          ("gemma4.attention.sliding_window", u32(4)), ("gemma4.attention.shared_kv_layers", u32(2)),
          ("gemma4.attention.sliding_window_pattern", arr(7, "B", [1, 0, 1, 0])),
          ("gemma4.embedding_length_per_layer_input", u32(2)), ("gemma4.rope.dimension_count", u32(8))]
    freqs = ("rope_freqs.weight", [4], 0, np.array([1, 1e30, 1e30, 1e30], dtype="<f4").tobytes())
    ple = ("per_layer_token_embd.weight", [8, 8], 0, np.zeros(64, dtype="<f4").tobytes())
    put("gguf_model", "gemma4.gguf", gguf_bytes(kv(g4 + tok), [embd, freqs, ple]))
    moe = [("gemma4.expert_count", u32(4)), ("gemma4.expert_used_count", u32(2)),
           ("gemma4.expert_feed_forward_length", u32(8))]
    put("gguf_model", "gemma4_moe.gguf", gguf_bytes(kv(g4 + moe + tok), [embd, freqs, ple]))
    put("gguf_model", "clip.gguf", gguf_bytes([("general.architecture", 8, s("clip"))], []))
    put("gguf_model", "wrong_type.gguf", gguf_bytes(kv(g3[:1] + [("gemma3.block_count", (8, s("7")))] + g3[2:]), [embd]))


def quant():
    # Byte 0 picks the type (q4_0, q5_0, q8_0, q4_k, q5_k, q6_k); the rest is two blocks of it.
    rng = np.random.default_rng(0)
    block_bytes = (18, 22, 34, 144, 176, 210)
    scale_at = (0, 0, 0, 0, 0, 208)
    for k, bb in enumerate(block_bytes):
        blocks = rng.integers(0, 256, 2 * bb, dtype=np.uint8)
        for b in range(2):
            blocks[b * bb + scale_at[k]:b * bb + scale_at[k] + 2] = np.array([0x3c00], np.uint16).view(np.uint8)
        put("quant", f"blocks{k}", bytes([k]) + blocks.tobytes())
        bad = blocks.copy()
        bad[bb + scale_at[k]:bb + scale_at[k] + 2] = np.array([0x7c00], np.uint16).view(np.uint8)
        put("quant", f"inf_scale{k}", bytes([k]) + bad.tobytes())
        put("quant", f"floats{k}", bytes([k]) + rng.standard_normal(512).astype("<f4").tobytes())


if __name__ == "__main__":
    quant()
    npy()
    st_header()
    st_index()
    configs()
    drafter_configs()
    images()
    gguf()
    gguf_model()
    sys.exit(0)
