// Views of the dense, row-major tensors an ONNX node consumes and produces. ONNX tensors carry
// no strides, so a view is a pointer, an element type and a shape; the adapters turn them into
// strided HeadsView/OutView/DenseMask views for the kernels without copying.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::onnx {

// The element types the adapters accept (ONNX names: float, bool, int32, int64, bfloat16, float16).
enum class ElemType { kFloat32, kBool, kInt32, kInt64, kBFloat16, kFloat16 };

const char* ElemTypeName(ElemType t);

// "[2, 3, 4]" for error messages.
std::string ShapeString(const std::vector<int64_t>& shape);

// Compact form ("%g") of a float attribute for error messages.
std::string FloatString(float x);

// Product of the dims (1 for a scalar).
int64_t NumElements(const std::vector<int64_t>& shape);

// A read-only input tensor. bool is one byte per element (0 = false, anything else = true).
struct TensorRef {
  const void* data = nullptr;
  ElemType type = ElemType::kFloat32;
  std::vector<int64_t> shape;  // row-major, contiguous; {} = scalar

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t dim(int64_t i) const { return shape[static_cast<size_t>(i)]; }
  const float* f32() const { return static_cast<const float*>(data); }
  const int32_t* i32() const { return static_cast<const int32_t*>(data); }
  const int64_t* i64() const { return static_cast<const int64_t*>(data); }
};

// A caller-allocated output tensor: f32, except the KV caches GroupQueryAttention also keeps in
// bf16 or f16.
struct MutableTensorRef {
  void* data = nullptr;
  std::vector<int64_t> shape;  // row-major, contiguous
  ElemType type = ElemType::kFloat32;

  float* f32() const { return static_cast<float*>(data); }
};

}  // namespace tessera::onnx
