// y = x W^T for a weight stored [out, in] row-major in f32, bf16 or f16 (as checkpoints store
// nn.Linear). Weight rows are decoded to f32 once per call and reused for every token.
#pragma once

#include <cstdint>

#include "tessera/dtype.h"
#include "tessera/thread_pool.h"

namespace tessera::ops {

struct WeightView {
  const void* data = nullptr;  // [out, in] row-major
  DType dtype = DType::kF32;
  int64_t out = 0, in = 0;
};

// x: [n, in] f32 with row stride x_stride; y: [n, out] f32 with row stride y_stride.
// Work is split over output rows; scratch is a stack buffer per row (in <= kMaxLinearIn).
inline constexpr int64_t kMaxLinearIn = 65536;
void Linear(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool* pool);

// Plain loops with double accumulation: the reference the tests compare Linear against.
void LinearReference(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride);

}  // namespace tessera::ops
