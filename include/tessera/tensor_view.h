// Strided views of [batch, heads, seq, dim] tensors: what the attention kernels read and write,
// and what the KV stores and ONNX adapters hand them. Plain data at the core layer, so code that
// only moves tensors (kv, onnx) need not see the attention API.
#pragma once

#include <cstdint>

#include "tessera/dtype.h"

namespace tessera {

// A read-only [batch, heads, seq, dim] view; the innermost dim is contiguous, the other three
// have arbitrary element strides (a KV cache with capacity > seq, or ONNX's [B, S, H*D]).
struct HeadsView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t batch = 0, heads = 0, seq = 0, dim = 0;
  int64_t stride_batch = 0, stride_head = 0, stride_seq = 0;  // in elements

  // Contiguous [batch, heads, seq, dim].
  static HeadsView Dense(const void* data, DType dtype, int64_t batch, int64_t heads, int64_t seq,
                         int64_t dim) {
    return {data, dtype, batch, heads, seq, dim, heads * seq * dim, seq * dim, dim};
  }
  const char* At(int64_t b, int64_t h, int64_t s) const {
    return static_cast<const char*>(data) +
           (b * stride_batch + h * stride_head + s * stride_seq) * static_cast<int64_t>(DTypeSize(dtype));
  }
};

// The writable f32 output view [batch, heads, seq, dim].
struct OutView {
  float* data = nullptr;
  int64_t batch = 0, heads = 0, seq = 0, dim = 0;
  int64_t stride_batch = 0, stride_head = 0, stride_seq = 0;  // in elements

  static OutView Dense(float* data, int64_t batch, int64_t heads, int64_t seq, int64_t dim) {
    return {data, batch, heads, seq, dim, heads * seq * dim, seq * dim, dim};
  }
  float* At(int64_t b, int64_t h, int64_t s) const {
    return data + b * stride_batch + h * stride_head + s * stride_seq;
  }
};

}  // namespace tessera
