// How decode's row dots split weight rows among threads (ops/row_ranges.h), and that a batch of
// quantized jobs split across job boundaries still gives each job its own call's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "ops/quant_linear.h"
#include "ops/row_ranges.h"
#include "quant_blocks.h"
#include "tessera/thread_pool.h"

namespace tessera {
namespace {

using testing::MakeQuantProblem;
using testing::QuantProblem;

std::vector<std::pair<int64_t, int64_t>> RowRangesOf(ThreadPool* pool, int64_t rows, int64_t row_bytes) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  ops::ParallelRowRanges(pool, rows, row_bytes, [&](int64_t r0, int64_t r1) {
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(r0, r1);
  });
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

// Rows covered once, in whole groups but the last; a call under kGuidedRowBytes per thread in one
// range per thread, a larger one in guided ranges of at least kLeastRangeBytes; no pool, one range.
TEST(RowRanges, SmallCallsSplitEquallyLargeOnesGuided) {
  ThreadPool pool(2);
  struct Case {
    int64_t rows, row_bytes;
    bool guided;
  };
  // A Gemma-3-1B k_proj and o_proj in Q4_0, an MLP matrix, a Q8_0 LM head, and odd row counts.
  for (const Case c : {Case{256, 648, false}, Case{1152, 576, false}, Case{6912, 648, true},
                       Case{262144, 1224, true}, Case{1001, 100, false}, Case{40000, 100, true}}) {
    const auto ranges = RowRangesOf(&pool, c.rows, c.row_bytes);
    int64_t at = 0;
    for (const auto& [r0, r1] : ranges) {
      ASSERT_EQ(r0, at) << c.rows;
      ASSERT_EQ(r0 % ops::kRowGroup, 0);
      if (c.guided && r1 < c.rows) {
        ASSERT_GE((r1 - r0) * c.row_bytes, ops::kLeastRangeBytes);
      }
      at = r1;
    }
    ASSERT_EQ(at, c.rows);
    EXPECT_EQ(c.rows * c.row_bytes >= 2 * ops::kGuidedRowBytes, c.guided) << "the case's own premise";
    if (!c.guided) {
      EXPECT_EQ(ranges.size(), 2u) << c.rows;  // one per thread
    } else {
      EXPECT_GT(ranges.size(), 8u) << c.rows;  // long ranges first, then shorter ones
      EXPECT_LT(ranges.back().second - ranges.back().first, ranges.front().second - ranges.front().first);
    }
    EXPECT_EQ(RowRangesOf(nullptr, c.rows, c.row_bytes), (std::vector<std::pair<int64_t, int64_t>>{{0, c.rows}}));
  }
}

// Quantized jobs large enough for guided ranges, of row counts that are not whole groups, so the
// ranges start inside jobs and cross from one job into the next: each job's rows the bits of its
// own QuantRowDot with no pool (one range), and nothing written past them.
TEST(RowRanges, BatchRangesAcrossJobsGiveEachJobItsOwnBits) {
  std::mt19937 rng(7);
  ThreadPool pool(3);
  constexpr float kUnwritten = -12345.0f;
  const QuantType types[] = {QuantType::kQ4_0, QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ6_K};
  std::vector<QuantProblem> probs;
  std::vector<ops::LinearJob> jobs;
  std::vector<std::vector<float>> ys;
  int64_t bytes = 0;
  for (int j = 0; j < 7; ++j) {
    const int64_t out = 1000 + 37 * j, in = 1024, n = 1 + j % 2;
    probs.push_back(MakeQuantProblem(rng, types[j % 4], n, in, out));
    bytes += out * QuantRowBytes(types[j % 4], in);
    ys.emplace_back(n * probs.back().ys, kUnwritten);
    jobs.push_back({probs.back().View(), probs.back().x.data(), n, probs.back().xs, ys.back().data(), probs.back().ys});
  }
  ASSERT_GE(bytes, 3 * ops::kGuidedRowBytes) << "the test's premise: guided ranges";
  ops::QuantRowDotBatch(jobs.data(), int64_t(jobs.size()), &pool);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const ops::LinearJob& job = jobs[j];
    std::vector<float> alone(ys[j].size(), kUnwritten);
    ops::QuantRowDot(job.w, job.x, job.n, job.x_stride, alone.data(), job.y_stride, nullptr);
    ASSERT_EQ(std::memcmp(alone.data(), ys[j].data(), alone.size() * sizeof(float)), 0) << "job " << j;
  }
}

}  // namespace
}  // namespace tessera
