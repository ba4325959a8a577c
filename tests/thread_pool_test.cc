#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "tessera/thread_pool.h"

namespace tessera {
namespace {

TEST(ThreadPool, EveryItemRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> bad_thread{0};
        pool.ParallelFor(n, [&](int64_t i, int t) {
          hits[i].fetch_add(1);
          if (t < 0 || t >= threads) bad_thread.fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n;
        EXPECT_EQ(bad_thread.load(), 0);
      }
    }
  }
}

// The ranges one ParallelRanges call ran, sorted by their start; fails on a thread index out of range.
std::vector<std::pair<int64_t, int64_t>> RangesOf(ThreadPool& pool, int64_t n, int64_t least) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  pool.ParallelRanges(n, least, [&](int64_t b, int64_t e, int t) {
    EXPECT_TRUE(t >= 0 && t < pool.num_threads()) << t;
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(b, e);
  });
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

// Ranges cover [0, n) once, none shorter than `least` (unless n is), each from the part not yet
// handed out, 1/(2 threads) of it or `least`: so they never grow but for the last (which takes a
// short remainder with it), and their bounds follow from n, least and the thread count alone,
// not from which thread asked first (decode's row results then never depend on timing).
TEST(ThreadPool, RangesCoverOnceGuidedAndRepeatable) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000, 100000}) {
      for (int64_t least : {1, 5, 64}) {
        const auto first = RangesOf(pool, n, least);
        int64_t at = 0;
        for (size_t i = 0; i < first.size(); ++i) {
          const auto [b, e] = first[i];
          ASSERT_EQ(b, at) << "threads " << threads << " n " << n << " least " << least;
          ASSERT_GE(e - b, std::min(least, n));
          if (threads > 1 && i + 1 < first.size()) {
            ASSERT_EQ(e - b, std::max(least, (n - b) / (2 * threads)));
          }
          if (threads > 1 && i + 2 < first.size()) {
            ASSERT_GE(e - b, first[i + 1].second - first[i + 1].first);
          }
          at = e;
        }
        ASSERT_EQ(at, n);
        if (threads == 1) {
          EXPECT_LE(first.size(), 1u);  // inline: one range
        }
        for (int rep = 0; rep < 10; ++rep) ASSERT_EQ(RangesOf(pool, n, least), first);
      }
    }
  }
}

// From inside an item of the same pool a call runs inline: one range, on the caller's thread.
TEST(ThreadPool, NestedRangesRunInlineOnTheCallersThread) {
  ThreadPool pool(3);
  std::atomic<int> bad{0};
  pool.ParallelFor(6, [&](int64_t, int outer) {
    int calls = 0;
    pool.ParallelRanges(50, 4, [&](int64_t b, int64_t e, int t) {
      ++calls;
      if (b != 0 || e != 50 || t != outer) bad.fetch_add(1);
    });
    if (calls != 1) bad.fetch_add(1);
  });
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace tessera
