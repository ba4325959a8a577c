// y = x W^T for a weight stored [out, in] row-major in f32, bf16 or f16 (as checkpoints store
// nn.Linear), on the runtime-dispatched SIMD dot (ops/simd.h).
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
// Picks the row-dot path for a few tokens (decode: each weight row is read once, memory-bound) and
// the blocked GEMM (ops/gemm.h) for more (prefill: compute-bound).
void Linear(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool* pool);

// The row-dot path alone: a few row ranges per thread, four weight rows share each token-row load.
void LinearRowDot(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                  ThreadPool* pool);

// Plain loops with double accumulation: the reference the tests compare Linear against.
void LinearReference(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride);

}  // namespace tessera::ops
