#include "ops/gemm.h"

#include <algorithm>
#include <cstdint>

#include "ops/simd.h"
#include "tessera/dtype.h"

namespace tessera::ops {
namespace {

constexpr int64_t kMr = 6;    // tokens per micro-tile
constexpr int64_t kNr = 16;   // output columns per micro-tile (one packed panel)
constexpr int64_t kKc = 256;  // depth of a packed block
constexpr int64_t kNc = 128;  // output columns per packed block: kKc x kNc f32 = 128 KiB, L2-resident

// Widens W[o0 .. o0+nc, k0 .. k0+kc] into panels bp[p][k][16] (columns past nc are zero).
void PackBlock(const SimdKernels& simd, const WeightView& w, int64_t o0, int64_t nc, int64_t k0, int64_t kc, float* bp) {
  const size_t es = DTypeSize(w.dtype);
  for (int64_t p = 0; p * kNr < nc; ++p) {
    const int rows = static_cast<int>(std::min(kNr, nc - p * kNr));
    simd.pack_panel16(static_cast<int>(w.dtype), static_cast<const char*>(w.data) + ((o0 + p * kNr) * w.in + k0) * es,
                      w.in, rows, kc, bp + p * kc * kNr);
  }
}

// Output columns per block: the widest multiple of kNr up to kNc whose blocks spread evenly over
// the threads (hidden 1152 = 9 blocks of 128 left one of two threads idle for a ninth of the
// down projection; 12 blocks of 96 do not).
int64_t BlockColumns(int64_t out, int threads) {
  int64_t best = kNc, best_span = INT64_MAX;
  for (int64_t nc = kNc; nc >= kNc / 2; nc -= kNr) {
    const int64_t blocks = (out + nc - 1) / nc;
    const int64_t span = (blocks + threads - 1) / threads * nc;  // columns on the busiest thread
    if (span < best_span) best = nc, best_span = span;
  }
  return best;
}

}  // namespace

void Gemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
          ThreadPool* pool) {
  const SimdKernels& simd = Simd();
  const int threads = pool ? pool->num_threads() : 1;
  const int64_t block_cols = BlockColumns(w.out, threads);
  const int64_t col_blocks = (w.out + block_cols - 1) / block_cols;
  // Enough items to keep every thread busy; token ranges are whole micro-tiles.
  const int64_t tiles = (n + kMr - 1) / kMr;
  const int64_t row_blocks = std::min<int64_t>(tiles, std::max<int64_t>(1, (2 * threads + col_blocks - 1) / col_blocks));
  const int64_t tiles_per_block = (tiles + row_blocks - 1) / row_blocks;
  auto run = [&](int64_t item, int) {
    const int64_t cb = item % col_blocks, rb = item / col_blocks;
    const int64_t o0 = cb * block_cols, nc = std::min(block_cols, w.out - o0);
    const int64_t t_begin = rb * tiles_per_block * kMr, t_end = std::min(n, t_begin + tiles_per_block * kMr);
    alignas(64) float bp[kKc * kNc];  // packed f32 weight block, [nc / 16][kc][16]
    for (int64_t k0 = 0; k0 < w.in; k0 += kKc) {
      const int64_t kc = std::min(kKc, w.in - k0);
      PackBlock(simd, w, o0, nc, k0, kc, bp);
      for (int64_t t = t_begin; t < t_end; t += kMr) {
        const int mr = static_cast<int>(std::min(kMr, t_end - t));
        const float* rows[kMr];
        for (int r = 0; r < kMr; ++r) rows[r] = x + (t + (r < mr ? r : 0)) * x_stride + k0;
        for (int64_t j = 0; j < nc; j += kNr) {
          simd.gemm_tile(rows, bp + (j / kNr) * kc * kNr, kc, y + t * y_stride + o0 + j, y_stride, mr,
                         static_cast<int>(std::min(kNr, nc - j)), k0 > 0);
        }
      }
    }
  };
  const int64_t items = col_blocks * row_blocks;
  if (pool) {
    pool->ParallelFor(items, run);
  } else {
    for (int64_t i = 0; i < items; ++i) run(i, 0);
  }
}

}  // namespace tessera::ops
