// Blocked GEMM for prefill-sized Linear calls: y[n, out] = x[n, in] W[out, in]^T with W in f32,
// bf16 or f16. Weight panels are widened to f32 once per block into a packed [k][16] layout on the
// stack and reused by every token of the block, so the micro-tile (ops/simd.h gemm_tile) runs at
// the FMA rate instead of the weight-streaming rate of the row-dot path. At precision bf16 on CPUs
// with AVX-512-BF16, bf16 weights are packed as pair panels instead and the tile is the dot
// product's (ops/bf16_dot.h pv_tile), at twice the FMA rate.
#pragma once

#include <cstdint>

#include "ops/linear.h"
#include "tessera/thread_pool.h"

namespace tessera::ops {

// Same contract as Linear (ops/linear.h). Work is split over blocks of output columns and, when
// there are too few of those for the pool, over token ranges. Allocates nothing.
// At precision bf16 (bf16 weights only) each token's result is the same whatever n or position.
// x_pairs (optional, GemmScratchWords(n, in) words, 64-byte aligned): at precision bf16 on the
// dot-product path, x is rounded into it as bf16 pairs once per call; without it each block of
// output columns rounds the x rows of its tiles again (out / 64-128 passes over x: 1.2-1.3x slower
// with in = 15360 at 256 tokens). The results are the same bit for bit either way.
void Gemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
          ThreadPool* pool, MatmulPrecision precision = MatmulPrecision::kF32, uint32_t* x_pairs = nullptr);

// Words of the x_pairs scratch for n tokens of `in` features (rows padded to 64 bytes).
int64_t GemmScratchWords(int64_t n, int64_t in);

}  // namespace tessera::ops
