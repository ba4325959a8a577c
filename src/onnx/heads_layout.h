// The two ONNX activation layouts as kernel views, and row copies between them (the KV-cache
// concatenation and in-place writes of the adapters).
//   BSHD: [batch, seq, heads * dim]  (ONNX 3-D inputs, GroupQueryAttention query/key/value/output)
//   BHSD: [batch, heads, seq, dim]   (ONNX 4-D inputs, past/present caches, "BNSH")
#pragma once

#include <cstdint>

#include "tessera/tensor_view.h"

namespace tessera::onnx {

// `data` is [B, S, row_stride] f32 with heads*dim <= row_stride (row_stride > heads*dim for one
// part of a packed QKV row, whose first element `data` then points at).
inline HeadsView BshdView(const float* data, int64_t B, int64_t S, int64_t heads, int64_t dim, int64_t row_stride) {
  return {data, DType::kF32, B, heads, S, dim, S * row_stride, dim, row_stride};
}

// `data` is [B, heads, capacity, dim] f32; the view exposes the first `seq` <= capacity rows.
inline HeadsView BhsdView(const float* data, int64_t B, int64_t heads, int64_t seq, int64_t dim, int64_t capacity) {
  return {data, DType::kF32, B, heads, seq, dim, heads * capacity * dim, capacity * dim, dim};
}

// `data` is [B, S, heads * dim] f32.
inline OutView BshdOut(float* data, int64_t B, int64_t S, int64_t heads, int64_t dim) {
  return {data, B, heads, S, dim, S * heads * dim, dim, heads * dim};
}

// `data` is [B, heads, capacity, dim] f32; the view exposes the first `seq` <= capacity rows.
inline OutView BhsdOut(float* data, int64_t B, int64_t heads, int64_t seq, int64_t dim, int64_t capacity) {
  return {data, B, heads, seq, dim, heads * capacity * dim, capacity * dim, dim};
}

// dst rows [dst_s0, dst_s0 + n) of head (b, h) = src rows [src_s0, src_s0 + n) of the same head.
// src must be f32 with src.dim == dst.dim; the ranges must not overlap.
void CopyHeadRows(const HeadsView& src, int64_t src_s0, const OutView& dst, int64_t dst_s0, int64_t b, int64_t h,
                  int64_t n);

// dst rows [s0, s0 + n) of head (b, h) = 0.
void ZeroHeadRows(const OutView& dst, int64_t s0, int64_t b, int64_t h, int64_t n);

// A writable KV cache [B, heads, capacity, dim] in f32, bf16 or f16 (GroupQueryAttention's
// present buffers).
struct CacheView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t batch = 0, heads = 0, capacity = 0, dim = 0;

  char* At(int64_t b, int64_t h, int64_t s) const {
    return static_cast<char*>(data) + ((b * heads + h) * capacity + s) * dim * static_cast<int64_t>(DTypeSize(dtype));
  }
  // The first `seq` rows as a kernel input.
  HeadsView Read(int64_t seq) const {
    return {data, dtype, batch, heads, seq, dim, heads * capacity * dim, capacity * dim, dim};
  }
};

// dst rows [dst_s0, dst_s0 + n) of head (b, h) = src rows [src_s0, src_s0 + n), converted to the
// cache's dtype (rounding to nearest even; a copy when the dtypes agree). The ranges must not overlap.
void CopyRowsToCache(const HeadsView& src, int64_t src_s0, const CacheView& dst, int64_t dst_s0, int64_t b, int64_t h,
                     int64_t n);

// dst rows [s0, s0 + n) of head (b, h) = 0.
void ZeroCacheRows(const CacheView& dst, int64_t s0, int64_t b, int64_t h, int64_t n);

}  // namespace tessera::onnx
