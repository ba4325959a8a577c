// tessera._tessera.gguf_read / gguf_write: Tessera's GGUF reader and writer for Python (the
// wrapper is python/tessera/gguf.py). Values carry their GGUF type names, so a test can compare
// both the values and the types another implementation reads or writes.
#include <pybind11/stl.h>

#include <cstring>

#include "bindings.h"
#include "tessera/gguf.h"

namespace tessera::py_bind {
namespace {

using io::GgufFile;
using io::GgufType;
using io::GgufWriter;

constexpr const char* kTypeNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
constexpr int kNumTypes = sizeof(kTypeNames) / sizeof(kTypeNames[0]);

const char* TypeName(GgufType t) { return kTypeNames[static_cast<int>(t)]; }

GgufType ParseType(const std::string& name, const std::string& key) {
  for (int i = 0; i < kNumTypes; ++i)
    if (name == kTypeNames[i] && i != static_cast<int>(GgufType::kArray)) return static_cast<GgufType>(i);
  throw py::value_error("gguf_write: key '" + key + "': unknown type '" + name +
                        "' (u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool string, or array[<type>])");
}

bool IsIntType(GgufType t) {
  return t != GgufType::kF32 && t != GgufType::kF64 && t != GgufType::kBool && t != GgufType::kString &&
         t != GgufType::kArray;
}

template <typename T>
T Take(StatusOr<T> v) {
  ThrowIfError(v.status());
  return std::move(v.value());
}

// One metadata value as Python: str (bytes when not UTF-8), int, float, bool, or a list of them.
py::object ScalarValue(const GgufFile& f, const std::string& key, GgufType t) {
  if (t == GgufType::kString) return py::bytes(Take(f.GetString(key)));
  if (t == GgufType::kBool) return py::bool_(Take(f.GetBool(key)));
  if (t == GgufType::kF32 || t == GgufType::kF64) return py::float_(Take(f.GetFloat(key)));
  if (t == GgufType::kU64) return py::int_(Take(f.GetU64(key)));
  return py::int_(Take(f.GetInt(key)));
}

py::object ArrayValue(const GgufFile& f, const std::string& key, GgufType t) {
  py::list out;
  if (t == GgufType::kString) {
    for (const std::string& s : Take(f.GetStringArray(key))) out.append(py::bytes(s));
  } else if (t == GgufType::kBool) {
    for (bool b : Take(f.GetBoolArray(key))) out.append(py::bool_(b));
  } else if (t == GgufType::kF32 || t == GgufType::kF64) {
    for (double v : Take(f.GetF64Array(key))) out.append(py::float_(v));
  } else if (t == GgufType::kU64) {
    for (uint64_t v : Take(f.GetU64Array(key))) out.append(py::int_(v));
  } else {
    for (int64_t v : Take(f.GetIntArray(key))) out.append(py::int_(v));
  }
  return out;
}

// (metadata: [(key, type name, value)] in file order, tensors: [(name, shape, ggml type id, bytes)]).
py::tuple Read(const std::string& path) {
  GgufFile f = Take(GgufFile::Open(path));
  py::list metadata;
  for (const std::string& key : f.Keys()) {
    const GgufType t = Take(f.TypeOf(key));
    if (t == GgufType::kArray) {
      const GgufType e = Take(f.ArrayTypeOf(key));
      metadata.append(py::make_tuple(key, std::string("array[") + TypeName(e) + "]", ArrayValue(f, key, e)));
    } else {
      metadata.append(py::make_tuple(key, TypeName(t), ScalarValue(f, key, t)));
    }
  }
  py::list tensors;
  for (const io::GgufTensor& t : f.tensors()) {
    py::bytes data(static_cast<const char*>(t.data), t.data ? t.nbytes : 0);
    tensors.append(py::make_tuple(t.name, t.shape, t.ggml_type, data));
  }
  return py::make_tuple(metadata, py::make_tuple(f.version(), f.alignment()), tensors);
}

std::vector<int64_t> Ints(const py::handle& values, const std::string& key) {
  std::vector<int64_t> out;
  for (const py::handle& v : values) {
    if (!py::isinstance<py::int_>(v)) throw py::value_error("gguf_write: key '" + key + "': expected integers");
    out.push_back(v.cast<int64_t>());
  }
  return out;
}

void SetArray(GgufWriter& w, const std::string& key, GgufType e, const py::handle& value) {
  if (e == GgufType::kString) {
    w.SetStringArray(key, value.cast<std::vector<std::string>>());
  } else if (e == GgufType::kBool) {
    w.SetBoolArray(key, value.cast<std::vector<bool>>());
  } else if (e == GgufType::kF32) {
    w.SetF32Array(key, value.cast<std::vector<float>>());
  } else if (e == GgufType::kF64) {
    w.SetF64Array(key, value.cast<std::vector<double>>());
  } else if (e == GgufType::kU64) {
    w.SetU64Array(key, value.cast<std::vector<uint64_t>>());
  } else {
    w.SetIntArray(key, e, Ints(value, key));
  }
}

void SetValue(GgufWriter& w, const std::string& key, const std::string& type, const py::handle& value) {
  if (type.rfind("array[", 0) == 0 && type.back() == ']') {
    SetArray(w, key, ParseType(type.substr(6, type.size() - 7), key), value);
    return;
  }
  const GgufType t = ParseType(type, key);
  if (t == GgufType::kString) {
    w.SetString(key, value.cast<std::string>());
  } else if (t == GgufType::kBool) {
    w.SetBool(key, value.cast<bool>());
  } else if (t == GgufType::kF32) {
    w.SetF32(key, value.cast<float>());
  } else if (t == GgufType::kF64) {
    w.SetF64(key, value.cast<double>());
  } else if (t == GgufType::kU64) {
    w.SetU64(key, value.cast<uint64_t>());
  } else if (IsIntType(t)) {
    w.SetInt(key, t, value.cast<int64_t>());
  }
}

struct TensorType {
  const char* name;
  bool quant;
  DType dtype;
  QuantType q;
  int64_t block_elems, block_bytes;  // ggml's block layouts
};
constexpr TensorType kTensorTypes[] = {
    {"f32", false, DType::kF32, QuantType::kNone, 1, 4},     {"f16", false, DType::kF16, QuantType::kNone, 1, 2},
    {"bf16", false, DType::kBF16, QuantType::kNone, 1, 2},   {"q4_0", true, DType::kF32, QuantType::kQ4_0, 32, 18},
    {"q5_0", true, DType::kF32, QuantType::kQ5_0, 32, 22},   {"q8_0", true, DType::kF32, QuantType::kQ8_0, 32, 34},
    {"q4_K", true, DType::kF32, QuantType::kQ4_K, 256, 144}, {"q5_K", true, DType::kF32, QuantType::kQ5_K, 256, 176},
    {"q6_K", true, DType::kF32, QuantType::kQ6_K, 256, 210}, {"q4_1", true, DType::kF32, QuantType::kQ4_1, 32, 20},
    {"q5_1", true, DType::kF32, QuantType::kQ5_1, 32, 24},
};

// The data must be exactly the tensor's size (the fill copies it whole). Shapes the writer will
// refuse anyway (negative, overflowing, not a block multiple) are left to its message.
void CheckSize(const std::string& name, const std::vector<int64_t>& shape, const TensorType& tt, size_t size) {
  uint64_t numel = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) return;
  const int64_t ne0 = shape.empty() ? 1 : shape.back();
  if (ne0 % tt.block_elems != 0) return;
  uint64_t expected = 0;
  if (__builtin_mul_overflow(numel / tt.block_elems, static_cast<uint64_t>(tt.block_bytes), &expected)) return;
  if (expected != size)
    throw py::value_error("gguf_write: tensor '" + name + "' of " + tt.name + " needs " + std::to_string(expected) +
                          " bytes of data, got " + std::to_string(size));
}

// metadata: [(key, type name, value)]; tensors: [(name, shape, type name, bytes-like)]. Each
// tensor's bytes are copied by its fill at Write time and must be exactly the size its type needs.
void Write(const std::string& path, const py::list& metadata, const py::list& tensors, uint32_t alignment) {
  GgufWriter w;
  for (const py::handle& item : metadata) {
    const py::tuple kv = item.cast<py::tuple>();
    if (kv.size() != 3) throw py::value_error("gguf_write: metadata items are (key, type, value)");
    SetValue(w, kv[0].cast<std::string>(), kv[1].cast<std::string>(), kv[2]);
  }
  std::vector<std::string> datas;  // owned copies: the fills run inside Write
  datas.reserve(tensors.size());
  for (const py::handle& item : tensors) {
    const py::tuple t = item.cast<py::tuple>();
    if (t.size() != 4) throw py::value_error("gguf_write: tensors are (name, shape, type, data)");
    const std::string name = t[0].cast<std::string>();
    const std::vector<int64_t> shape = t[1].cast<std::vector<int64_t>>();
    const std::string type = t[2].cast<std::string>();
    const py::buffer_info info = t[3].cast<py::buffer>().request();
    datas.emplace_back(static_cast<const char*>(info.ptr), static_cast<size_t>(info.size * info.itemsize));
    const std::string* data = &datas.back();
    GgufWriter::Fill fill = [data](char* dst) {
      std::memcpy(dst, data->data(), data->size());
      return Status::Ok();
    };
    const TensorType* tt = nullptr;
    for (const TensorType& c : kTensorTypes)
      if (type == c.name) tt = &c;
    if (tt == nullptr)
      throw py::value_error("gguf_write: tensor '" + name + "': unknown type '" + type +
                            "' (f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q4_K q5_K q6_K)");
    CheckSize(name, shape, *tt, data->size());
    if (tt->quant)
      w.AddQuantTensor(name, shape, tt->q, fill);
    else
      w.AddTensor(name, shape, tt->dtype, fill);
  }
  ThrowIfError(w.Write(path, alignment));
}

}  // namespace

void BindGguf(py::module_& m) {
  m.def("gguf_read", &Read, py::arg("path"),
        "(metadata [(key, type, value)], (version, alignment), tensors [(name, shape, ggml type id, bytes)])");
  m.def("gguf_write", &Write, py::arg("path"), py::arg("metadata"), py::arg("tensors"), py::arg("alignment") = 32);
}

}  // namespace tessera::py_bind
