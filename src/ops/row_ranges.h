// How decode's weight-streaming calls (the row dots: one or a few tokens, each weight row read
// once) split their rows among the pool's threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tessera/thread_pool.h"

namespace tessera::ops {

inline constexpr int64_t kRowGroup = 16;  // rows per range step: the AVX-512 32-value kernels' width
// A call of fewer weight bytes than this per thread takes one equal range per thread: each range
// starts cold (its first rows come from memory before a kernel's prefetch runs ahead of it), and a
// Gemma-3-1B k_proj in sixteen 16-row items ran at a third of the read bandwidth
// (bench/results/quant_e2e.md, "Small matrices in decode").
inline constexpr int64_t kGuidedRowBytes = int64_t{1} << 20;
// Larger calls take the pool's guided ranges down to this many bytes: long streams first, short
// ranges at the end. Equal ranges had left the threads up to one range apart at the end of every
// call, a whole 20 MiB range of a Gemma-3 LM head split in sixteen (bench/results/quant_decode_balance.md).
inline constexpr int64_t kLeastRangeBytes = 64 * 1024;

// Calls run(r0, r1) on ranges of [0, rows) (whole kRowGroup groups but the last) that cover it once,
// rows of row_bytes each; without a pool, one range.
template <typename F>
void ParallelRowRanges(ThreadPool* pool, int64_t rows, int64_t row_bytes, const F& run) {
  if (!pool) return run(int64_t{0}, rows);
  const int64_t threads = pool->num_threads(), groups = (rows + kRowGroup - 1) / kRowGroup;
  const int64_t group_bytes = std::max<int64_t>(1, row_bytes * kRowGroup);
  const int64_t least = rows * row_bytes < threads * kGuidedRowBytes
                            ? std::max<int64_t>(1, groups / threads)  // (the last range takes the rest)
                            : (kLeastRangeBytes + group_bytes - 1) / group_bytes;
  pool->ParallelRanges(groups, least, [&](int64_t g0, int64_t g1, int) {
    run(g0 * kRowGroup, std::min(rows, g1 * kRowGroup));
  });
}

}  // namespace tessera::ops
