#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace tessera
