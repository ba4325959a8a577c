// The server's connection threads (server/connection_pool.h): a job that finds no idle thread gets
// a new one (so blocked connections do not hold up the next), up to the cap; past it jobs wait
// and still all run; shutdown runs what is queued and joins.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "server/connection_pool.h"

namespace tessera::server {
namespace {

// A latch the jobs block on until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(ServeConnectionPool, BlockedJobsGetTheirOwnThreadsUpToTheCap) {
  ConnectionPool pool(4);
  Gate gate;
  std::atomic<int> started{0}, finished{0};
  for (int i = 0; i < 3; ++i)
    pool.enqueue([&] {
      ++started;
      gate.Wait();
      ++finished;
    });
  // Three blocked jobs run at once on three threads.
  ASSERT_TRUE(WaitFor([&] { return started == 3; }));
  EXPECT_EQ(pool.threads(), 3u);
  // Beyond the cap jobs queue, and run once threads come free.
  for (int i = 0; i < 5; ++i)
    pool.enqueue([&] {
      ++started;
      gate.Wait();
      ++finished;
    });
  ASSERT_TRUE(WaitFor([&] { return started == 4; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(started, 4);
  EXPECT_EQ(pool.threads(), 4u);
  gate.Open();
  ASSERT_TRUE(WaitFor([&] { return finished == 8; }));
  EXPECT_EQ(pool.threads(), 4u);
  pool.shutdown();
}

TEST(ServeConnectionPool, IdleThreadsAreReusedAndShutdownRunsWhatIsQueued) {
  ConnectionPool pool(8);
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    pool.enqueue([&] { ++done; });
    ASSERT_TRUE(WaitFor([&] { return done == i + 1; }));
  }
  EXPECT_EQ(pool.threads(), 1u);  // one job at a time: the one thread serves them all
  Gate gate;
  pool.enqueue([&] { gate.Wait(); });
  for (int i = 0; i < 5; ++i) pool.enqueue([&] { ++done; });
  gate.Open();
  pool.shutdown();
  EXPECT_EQ(done, 25);
}

}  // namespace
}  // namespace tessera::server
