#include "tessera/onnx/tensor_ref.h"

#include <cstdio>

namespace tessera::onnx {

const char* ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kFloat32: return "float32";
    case ElemType::kBool: return "bool";
    case ElemType::kInt32: return "int32";
    case ElemType::kInt64: return "int64";
    case ElemType::kBFloat16: return "bfloat16";
    case ElemType::kFloat16: return "float16";
  }
  return "?";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string FloatString(float x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(x));
  return buf;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace tessera::onnx
