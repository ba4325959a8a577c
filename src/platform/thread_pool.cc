#include "tessera/thread_pool.h"

#include <algorithm>

namespace tessera {
namespace {

// Waiting threads spin this many pause-iterations (tens of microseconds) before blocking on a
// condition variable: decode issues hundreds of short ParallelFor calls per token, and waking a
// blocked thread costs tens of microseconds on a VM (an inter-processor interrupt).
constexpr int kSpinIterations = 4000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

int DefaultThreadCount() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunItems(int thread_index) {
  for (;;) {
    int64_t item;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_item_ >= job_size_) return;
      item = next_item_++;
    }
    (*job_)(item, thread_index);
  }
}

void ThreadPool::WorkerLoop(int thread_index) {
  int64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinIterations && generation_.load(std::memory_order_acquire) == seen; ++i) CpuRelax();
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
    }
    RunItems(thread_index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_cv_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, ItemFn fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_size_ = n;
    next_item_ = 0;
    ++generation_;
  }
  start_cv_.notify_all();
  RunItems(0);
  for (int i = 0; i < kSpinIterations && active_.load(std::memory_order_acquire) != 0; ++i) CpuRelax();
  std::unique_lock<std::mutex> lock(mu_);
  // Wait until every item is claimed and every worker that joined this generation is done.
  done_cv_.wait(lock, [&] { return next_item_ >= job_size_ && active_ == 0; });
  job_ = nullptr;
  job_size_ = 0;
}

}  // namespace tessera
