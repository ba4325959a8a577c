// tessera._tessera.quantize / dequantize / first_non_finite_block: the core block formats
// (tessera/quant.h) on numpy rows, so the Python tests can compare them with gguf and llama.cpp.
#include <string>

#include "bindings.h"
#include "tessera/quant.h"

namespace tessera::py_bind {

namespace {

using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

QuantType TypeFromName(const std::string& name) {
  QuantType t;
  if (!ParseQuantType(name, &t))
    throw py::value_error("unknown quantized type '" + name + "' (q4_0, q5_0, q8_0, q4_k, q5_k, q6_k, q4_1, q5_1)");
  return t;
}

// Bytes of n values of type t; ValueError naming both when n is not a whole number of blocks.
int64_t RowBytes(QuantType t, int64_t n) {
  const int64_t bytes = QuantRowBytes(t, n);
  if (bytes < 0)
    throw py::value_error(std::string(QuantTypeName(t)) + ": " + std::to_string(n) +
                          " values are not a whole number of blocks of " + std::to_string(QuantBlockElems(t)));
  return bytes;
}

// n values packed by the caller: the byte count must be exactly a row of n values.
void CheckPacked(QuantType t, const U8Array& data, int64_t n) {
  const int64_t want = RowBytes(t, n);
  if (data.size() != want)
    throw py::value_error(std::string(QuantTypeName(t)) + ": " + std::to_string(n) + " values take " +
                          std::to_string(want) + " bytes, got " + std::to_string(data.size()));
}

}  // namespace

void BindQuant(py::module_& m) {
  m.def("quant_block", [](const std::string& name) {
    const QuantType t = TypeFromName(name);
    return py::make_tuple(QuantBlockElems(t), QuantBlockBytes(t));
  }, "(values, bytes) of one block of the named type");
  m.def("quantize", [](const F32Array& x, const std::string& name) {
    const QuantType t = TypeFromName(name);
    const int64_t n = x.size();
    py::array_t<uint8_t> out(RowBytes(t, n));
    {
      py::gil_scoped_release release;
      QuantizeRow(t, x.data(), out.mutable_data(), n);
    }
    return out;
  }, "the values of x (flattened) as blocks of the named type, bytes as llama.cpp's quantizer");
  m.def("dequantize", [](const U8Array& data, const std::string& name, int64_t n) {
    const QuantType t = TypeFromName(name);
    CheckPacked(t, data, n);
    py::array_t<float> out(n);
    {
      py::gil_scoped_release release;
      DequantizeRow(t, data.data(), out.mutable_data(), n);
    }
    return out;
  }, "n float32 values from blocks of the named type");
  m.def("first_non_finite_block", [](const U8Array& data, const std::string& name, int64_t n) {
    const QuantType t = TypeFromName(name);
    CheckPacked(t, data, n);
    return FirstNonFiniteBlock(t, data.data(), n);
  }, "index of the first block whose f16 scales are NaN or inf, or -1");
}

}  // namespace tessera::py_bind
