"""Tessera's GGUF reader and writer against independent implementations: the `gguf` package
(llama.cpp's gguf-py, from PyPI) writes files ours must read value for value and byte for byte, and
reads the files ours writes; where the peers venv is installed (bench/setup_peers.sh), llama.cpp's
own C parser (libggml-base's gguf_init_from_file) loads our files too."""
from __future__ import annotations

import ctypes
import glob
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (python/requirements.txt) is not installed")
import tessera.gguf as tg  # noqa: E402

T = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# (key, gguf-py type, our type name, value); values chosen at the ends of each type's range.
SCALARS = [
    ("s.u8", T.UINT8, "u8", 255),
    ("s.i8", T.INT8, "i8", -128),
    ("s.u16", T.UINT16, "u16", 65535),
    ("s.i16", T.INT16, "i16", -32768),
    ("s.u32", T.UINT32, "u32", 4294967295),
    ("s.i32", T.INT32, "i32", -2147483648),
    ("s.u64", T.UINT64, "u64", 18446744073709551615),
    ("s.i64", T.INT64, "i64", -9223372036854775808),
    ("s.f32", T.FLOAT32, "f32", float(np.float32(0.1))),
    ("s.f64", T.FLOAT64, "f64", 0.1),
    ("s.bool", T.BOOL, "bool", True),
    ("s.string", T.STRING, "string", "\u2581Hello \u4e16\u754c"),
]
ARRAYS = [
    ("a.u8", T.UINT8, [0, 1, 255]),
    ("a.i8", T.INT8, [-128, 127]),
    ("a.u16", T.UINT16, [65535]),
    ("a.i16", T.INT16, [-1, 2]),
    ("a.u32", T.UINT32, [4294967295, 0]),
    ("a.i32", T.INT32, [-5, 6, 7]),
    ("a.u64", T.UINT64, [18446744073709551615]),
    ("a.i64", T.INT64, [-9223372036854775808, 1]),
    ("a.f32", T.FLOAT32, [1.5, -0.25]),
    ("a.f64", T.FLOAT64, [1e300, -2.5]),
    ("a.bool", T.BOOL, [True, False, True]),
    ("a.string", T.STRING, ["<pad>", "", "\u2581the", "<unused99>"]),
]
OUR_NAME = {T.UINT8: "u8", T.INT8: "i8", T.UINT16: "u16", T.INT16: "i16", T.UINT32: "u32", T.INT32: "i32",
            T.UINT64: "u64", T.INT64: "i64", T.FLOAT32: "f32", T.FLOAT64: "f64", T.BOOL: "bool", T.STRING: "string"}
BLOCK = {Q.Q4_0: (32, 18), Q.Q5_0: (32, 22), Q.Q8_0: (32, 34), Q.Q4_K: (256, 144), Q.Q5_K: (256, 176),
         Q.Q6_K: (256, 210), Q.Q4_1: (32, 20), Q.Q5_1: (32, 24)}


def _rng():
    return np.random.default_rng(20)


def _quantized(qtype, shape, rng):
    """Blocks for a [rows, cols] tensor: gguf-py's own quantizer where it has one, random bytes otherwise."""
    rows, cols = shape
    if qtype in (Q.Q4_0, Q.Q5_0, Q.Q8_0, Q.Q4_1, Q.Q5_1):
        return gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), qtype)
    elems, nbytes = BLOCK[qtype]
    return rng.integers(0, 256, size=(rows, cols // elems * nbytes), dtype=np.uint8)


def _tensors(rng):
    """[(name, shape outermost first, ggml type name, gguf-py type or None, array as gguf-py takes it)]."""
    out = [
        ("f32", (3, 5), "f32", None, rng.standard_normal((3, 5)).astype(np.float32)),
        ("f16", (2, 4), "f16", None, rng.standard_normal((2, 4)).astype(np.float16)),
        ("bf16", (2, 8), "bf16", Q.BF16, rng.integers(0, 65536, size=(2, 8), dtype=np.uint16)),
        ("vec", (7,), "f32", None, rng.standard_normal(7).astype(np.float32)),
    ]
    for name, q, shape in [("q4_0", Q.Q4_0, (2, 64)), ("q5_0", Q.Q5_0, (3, 32)), ("q8_0", Q.Q8_0, (4, 96)),
                           ("q4_K", Q.Q4_K, (2, 256)), ("q5_K", Q.Q5_K, (1, 512)), ("q6_K", Q.Q6_K, (3, 256)),
                           ("q4_1", Q.Q4_1, (2, 32)), ("q5_1", Q.Q5_1, (2, 64))]:
        out.append((name, shape, name, q, _quantized(q, shape, rng)))
    return out


def _write_with_gguf_py(path, tensors, alignment=None):
    w = gguf.GGUFWriter(str(path), "gemma3")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, vtype, _, value in SCALARS:
        w.add_key_value(key, value, vtype)
    for key, vtype, value in ARRAYS:
        w.add_key_value(key, value, T.ARRAY, sub_type=vtype)
    for name, _, _, qtype, arr in tensors:
        if qtype is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("alignment", [None, 64])
def test_files_written_by_gguf_py_read_the_same(tmp_path, alignment):
    tensors = _tensors(_rng())
    path = tmp_path / "py.gguf"
    _write_with_gguf_py(path, tensors, alignment)
    c = tg.read(path)
    assert c.version == 3
    assert c.alignment == (alignment or 32)
    assert c.metadata["general.architecture"] == "gemma3"
    for key, _, ours, value in SCALARS:
        assert c.types[key] == ours, key
        assert c.metadata[key] == value, key
    for key, vtype, value in ARRAYS:
        assert c.types[key] == f"array[{OUR_NAME[vtype]}]", key
        assert c.metadata[key] == value, key
    assert [t.name for t in c.tensors] == [t[0] for t in tensors]
    for (name, shape, type_name, _, arr), t in zip(tensors, c.tensors):
        assert t.shape == shape, name
        assert t.type == type_name, name
        assert t.data == np.ascontiguousarray(arr).tobytes(), name
    # and the reader's own view of the same file agrees on every offset
    ref = gguf.GGUFReader(str(path))
    for rt, t in zip(ref.tensors, c.tensors):
        assert rt.name == t.name and bytes(rt.data.tobytes()) == t.data


def _write_with_ours(path, tensors, alignment=32):
    meta = [("general.architecture", "string", "gemma3")]
    meta += [(key, ours, value) for key, _, ours, value in SCALARS]
    meta += [(key, f"array[{OUR_NAME[vtype]}]", value) for key, vtype, value in ARRAYS]
    tg.write(path, meta, [(name, shape, type_name, arr) for name, shape, type_name, _, arr in tensors],
             alignment=alignment)


@pytest.mark.parametrize("alignment", [32, 128])
def test_files_written_by_ours_read_by_gguf_py(tmp_path, alignment):
    tensors = _tensors(_rng())
    path = tmp_path / "ours.gguf"
    _write_with_ours(path, tensors, alignment)
    r = gguf.GGUFReader(str(path))
    assert r.alignment == alignment
    fields = r.fields
    assert fields["general.architecture"].contents() == "gemma3"
    for key, vtype, _, value in SCALARS:
        assert fields[key].types == [vtype], key
        got = fields[key].contents()
        assert (got == value) if vtype != T.FLOAT32 else np.float32(got) == np.float32(value), key
    for key, vtype, value in ARRAYS:
        assert fields[key].types == [T.ARRAY, vtype], key
        assert fields[key].contents() == value, key
    if alignment != 32:
        assert fields["general.alignment"].contents() == alignment
    assert [t.name for t in r.tensors] == [t[0] for t in tensors]
    for (name, shape, type_name, qtype, arr), t in zip(tensors, r.tensors):
        assert list(reversed(t.shape.tolist())) == list(shape), name  # gguf-py lists ne[] innermost first
        expect_type = qtype if qtype is not None else {"f32": Q.F32, "f16": Q.F16}[type_name]
        assert t.tensor_type == expect_type, name
        assert t.data.tobytes() == np.ascontiguousarray(arr).tobytes(), name
        assert t.data_offset % alignment == 0, name
    if any(t[3] in (Q.Q4_0, Q.Q5_0, Q.Q8_0) for t in tensors):  # and the blocks decode as gguf-py decodes them
        t = next(t for t in r.tensors if t.name == "q8_0")
        ours = tg.read(path).tensor("q8_0")
        np.testing.assert_array_equal(gguf.quants.dequantize(t.data, Q.Q8_0),
                                      gguf.quants.dequantize(np.frombuffer(ours.data, np.uint8).reshape(4, -1), Q.Q8_0))


def _libggml_base():
    libs = glob.glob(os.path.join(REPO, "bench/.peers/venv/lib/python3*/site-packages/llama_cpp/lib/libggml-base.so"))
    return libs[0] if libs else None


class _Params(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(ctypes.c_void_p))]


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _ggml():
    """llama.cpp's libggml-base with the prototypes of the gguf/ggml calls used here."""
    lib = ctypes.CDLL(_libggml_base())
    P, I64, SZ, STR = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t, ctypes.c_char_p
    protos = {
        "gguf_init_from_file": (P, [STR, _Params]), "gguf_init_empty": (P, []), "gguf_free": (None, [P]),
        "gguf_get_n_kv": (I64, [P]), "gguf_get_n_tensors": (I64, [P]), "gguf_get_alignment": (SZ, [P]),
        "gguf_get_data_offset": (SZ, [P]), "gguf_get_version": (ctypes.c_uint32, [P]),
        "gguf_get_key": (STR, [P, I64]), "gguf_get_tensor_name": (STR, [P, I64]),
        "gguf_get_tensor_offset": (SZ, [P, I64]), "gguf_get_tensor_type": (ctypes.c_int, [P, I64]),
        "gguf_get_tensor_size": (SZ, [P, I64]), "gguf_get_arr_n": (SZ, [P, I64]),
        "gguf_get_val_u64": (ctypes.c_uint64, [P, I64]), "gguf_get_val_str": (STR, [P, I64]),
        "gguf_set_val_str": (None, [P, STR, STR]), "gguf_set_val_u32": (None, [P, STR, ctypes.c_uint32]),
        "gguf_set_val_i64": (None, [P, STR, ctypes.c_int64]), "gguf_set_val_f64": (None, [P, STR, ctypes.c_double]),
        "gguf_set_val_bool": (None, [P, STR, ctypes.c_bool]),
        "gguf_set_arr_data": (None, [P, STR, ctypes.c_int, P, SZ]),
        "gguf_set_arr_str": (None, [P, STR, ctypes.POINTER(STR), SZ]),
        "gguf_add_tensor": (None, [P, P]), "gguf_write_to_file": (ctypes.c_bool, [P, STR, ctypes.c_bool]),
        "ggml_init": (P, [_InitParams]), "ggml_free": (None, [P]),
        "ggml_new_tensor_2d": (P, [P, ctypes.c_int, I64, I64]), "ggml_set_name": (P, [P, STR]),
        "ggml_get_data": (P, [P]), "ggml_nbytes": (SZ, [P]),
    }
    for name, (res, args) in protos.items():
        getattr(lib, name).restype = res
        getattr(lib, name).argtypes = args
    return lib


_NO_GGML = "llama.cpp's libggml-base (bench/.peers, installed by bench/setup_peers.sh) is absent"


@pytest.mark.skipif(_libggml_base() is None, reason=_NO_GGML)
def test_llama_cpp_parser_loads_our_files(tmp_path):
    lib = _ggml()
    for alignment in (32, 256):
        tensors = _tensors(_rng())
        path = tmp_path / f"ours{alignment}.gguf"
        _write_with_ours(path, tensors, alignment)
        ggml_ctx = ctypes.c_void_p()
        # no_alloc=False: llama.cpp also reads every tensor's data into a ggml context
        ctx = lib.gguf_init_from_file(str(path).encode(), _Params(False, ctypes.pointer(ggml_ctx)))
        assert ctx, "llama.cpp's gguf_init_from_file refused our file"
        try:
            assert lib.gguf_get_version(ctx) == 3
            assert lib.gguf_get_alignment(ctx) == alignment
            n_kv = lib.gguf_get_n_kv(ctx)
            keys = [lib.gguf_get_key(ctx, i).decode() for i in range(n_kv)]
            ours = tg.read(path)
            assert keys == list(ours.metadata)
            assert lib.gguf_get_val_u64(ctx, keys.index("s.u64")) == 18446744073709551615
            assert lib.gguf_get_arr_n(ctx, keys.index("a.string")) == 4
            assert lib.gguf_get_val_str(ctx, keys.index("s.string")).decode() == "\u2581Hello \u4e16\u754c"
            data_offset = lib.gguf_get_data_offset(ctx)
            raw = path.read_bytes()
            assert lib.gguf_get_n_tensors(ctx) == len(tensors)
            for j, (name, shape, type_name, _, arr) in enumerate(tensors):
                assert lib.gguf_get_tensor_name(ctx, j).decode() == name
                assert tg.GGML_TYPE_NAMES[lib.gguf_get_tensor_type(ctx, j)] == type_name
                size = lib.gguf_get_tensor_size(ctx, j)
                off = data_offset + lib.gguf_get_tensor_offset(ctx, j)
                assert raw[off:off + size] == np.ascontiguousarray(arr).tobytes(), name
        finally:
            lib.gguf_free(ctx)
            lib.ggml_free(ggml_ctx)


@pytest.mark.skipif(_libggml_base() is None, reason=_NO_GGML)
def test_files_written_by_llama_cpp_read_by_ours(tmp_path):
    """llama.cpp's own C writer (gguf_write_to_file), with ggml tensors of every type we run."""
    lib = _ggml()
    rng = _rng()
    gctx = lib.gguf_init_empty()
    mem = lib.ggml_init(_InitParams(1 << 20, None, False))
    try:
        lib.gguf_set_val_str(gctx, b"general.architecture", b"gemma3")
        lib.gguf_set_val_u32(gctx, b"gemma3.block_count", 26)
        lib.gguf_set_val_i64(gctx, b"i64", -(2**63))
        lib.gguf_set_val_f64(gctx, b"f64", 0.1)
        lib.gguf_set_val_bool(gctx, b"bool", True)
        scores = np.array([0.5, -1.0, 2.25], np.float32)
        lib.gguf_set_arr_data(gctx, b"tokenizer.ggml.scores", int(T.FLOAT32), scores.ctypes.data, 3)
        words = [b"<pad>", b"\xe2\x96\x81a", b""]
        lib.gguf_set_arr_str(gctx, b"tokenizer.ggml.tokens", (ctypes.c_char_p * 3)(*words), 3)
        expect = {}
        for name, type_id, ne0, ne1 in [("f32", 0, 5, 3), ("f16", 1, 4, 2), ("bf16", 30, 8, 1), ("q4_0", 2, 64, 2),
                                        ("q5_0", 6, 32, 3), ("q8_0", 8, 96, 1), ("q4_K", 12, 256, 2),
                                        ("q5_K", 13, 512, 1), ("q6_K", 14, 256, 3), ("q4_1", 3, 32, 2),
                                        ("q5_1", 7, 64, 2)]:
            t = lib.ggml_new_tensor_2d(mem, type_id, ne0, ne1)
            lib.ggml_set_name(t, name.encode())
            data = rng.integers(0, 256, lib.ggml_nbytes(t), dtype=np.uint8).tobytes()
            ctypes.memmove(lib.ggml_get_data(t), data, len(data))
            lib.gguf_add_tensor(gctx, t)
            # ggml stores only the dimensions up to the last one above 1: a one-row matrix is 1-D
            expect[name] = ((ne1, ne0) if ne1 > 1 else (ne0,), type_id, data)
        path = tmp_path / "llama.gguf"
        assert lib.gguf_write_to_file(gctx, str(path).encode(), False)
    finally:
        lib.gguf_free(gctx)
        lib.ggml_free(mem)
    c = tg.read(path)
    assert c.metadata["general.architecture"] == "gemma3"
    assert (c.types["gemma3.block_count"], c.metadata["gemma3.block_count"]) == ("u32", 26)
    assert (c.types["i64"], c.metadata["i64"]) == ("i64", -(2**63))
    assert (c.types["f64"], c.metadata["f64"]) == ("f64", 0.1)
    assert (c.types["bool"], c.metadata["bool"]) == ("bool", True)
    assert c.types["tokenizer.ggml.scores"] == "array[f32]"
    assert c.metadata["tokenizer.ggml.scores"] == [0.5, -1.0, 2.25]
    assert c.metadata["tokenizer.ggml.tokens"] == ["<pad>", "\u2581a", ""]
    assert [t.name for t in c.tensors] == list(expect)
    for t in c.tensors:
        shape, type_id, data = expect[t.name]
        assert t.shape == shape and t.type == tg.GGML_TYPE_NAMES[type_id] and t.data == data, t.name


def test_bad_files_raise_value_error_naming_the_file(tmp_path):
    tensors = _tensors(_rng())
    path = tmp_path / "good.gguf"
    _write_with_ours(path, tensors)
    raw = path.read_bytes()
    bad = tmp_path / "cut.gguf"
    for n in (0, 3, 20, 100, len(raw) // 2, len(raw) - 40):
        bad.write_bytes(raw[:n])
        with pytest.raises(ValueError, match="cut.gguf"):
            tg.read(bad)
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "big") + bytes(16))
    with pytest.raises(ValueError, match="big-endian"):
        tg.read(bad)
    # a tensor type Tessera does not run: gguf-py writes q2_K blocks happily
    w = gguf.GGUFWriter(str(bad), "gemma3")
    w.add_tensor("blk.0.w", np.zeros((2, 84), np.uint8), raw_dtype=Q.Q2_K)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ValueError, match=r"tensor 'blk.0.w' has ggml type q2_K"):
        tg.read(bad)
    with pytest.raises(ValueError, match="no/such.gguf"):
        tg.read(tmp_path / "no/such.gguf")


def test_writer_errors_raise_and_leave_no_file(tmp_path):
    out = tmp_path / "out.gguf"
    with pytest.raises(ValueError, match="value 300 does not fit u8"):
        tg.write(out, [("k", "u8", 300)], [])
    with pytest.raises(ValueError, match="unknown type 'u128'"):
        tg.write(out, [("k", "u128", 1)], [])
    with pytest.raises(ValueError, match="needs 68 bytes of data, got 67"):
        tg.write(out, [], [("w", (2, 32), "q8_0", bytes(67))])
    with pytest.raises(ValueError, match="rows of 48 values, not a multiple of its block of 32"):
        tg.write(out, [], [("w", (2, 48), "q8_0", bytes(1))])
    with pytest.raises(ValueError, match="unknown type 'q2_K'"):
        tg.write(out, [], [("w", (256,), "q2_K", bytes(84))])
    assert os.listdir(tmp_path) == []
