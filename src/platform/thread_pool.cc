#include "tessera/thread_pool.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <string>

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

// The pool whose job the current thread is running an item of, and its thread index there: a
// nested call runs inline and passes that index on, so per-thread scratch indexed by it is never
// shared with another thread of the same job.
thread_local const ThreadPool* tls_running_pool = nullptr;
thread_local int tls_thread_index = 0;

struct RunningPool {
  RunningPool(const ThreadPool* p, int index) : saved(tls_running_pool), saved_index(tls_thread_index) {
    tls_running_pool = p;
    tls_thread_index = index;
  }
  ~RunningPool() { tls_running_pool = saved, tls_thread_index = saved_index; }
  const ThreadPool* saved;
  int saved_index;
};

}  // namespace

int DefaultThreadCount() { return std::max(1u, std::thread::hardware_concurrency()); }

StatusOr<std::unique_ptr<ThreadPool>> ThreadPool::Create(int64_t num_threads) {
  if (num_threads < 1 || num_threads > kMaxThreads)
    return InvalidArgument("ThreadPool: threads must be in [1, " + std::to_string(kMaxThreads) + "], got " +
                           std::to_string(num_threads));
  auto pool = std::make_unique<ThreadPool>(static_cast<int>(num_threads));
  if (!pool->start_status().ok()) return pool->start_status();
  return pool;
}

ThreadPool::ThreadPool(int num_threads) {
  const int want = std::min(std::max(1, num_threads), kMaxThreads);
  for (int i = 1; i < want; ++i) {
    try {
      workers_.emplace_back([this, i] { WorkerLoop(i); });
    } catch (const std::exception& e) {  // std::system_error (EAGAIN: no memory for a stack) or bad_alloc
      start_status_ = ResourceExhausted("ThreadPool: could not start thread " + std::to_string(i + 1) + " of " +
                                        std::to_string(num_threads) + ": " + e.what());
      break;
    }
  }
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
    int64_t begin, end;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_item_ >= job_size_) return;
      begin = next_item_;
      const int64_t left = job_size_ - begin;
      int64_t take = std::max(least_, left / share_);
      if (left - take < least_) take = left;  // no short remainder of its own
      end = next_item_ = begin + take;
    }
    (*job_)(begin, end, thread_index);
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
    {
      RunningPool running(this, thread_index);
      RunItems(thread_index);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_cv_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, ItemFn fn) {
  if (n <= 0) return;
  auto items = [&fn](int64_t begin, int64_t end, int thread) {
    for (int64_t i = begin; i < end; ++i) fn(i, thread);
  };
  Run(n, 1, std::numeric_limits<int64_t>::max(), items);  // one item per claim
}

void ThreadPool::ParallelRanges(int64_t n, int64_t least, RangeFn fn) {
  if (n <= 0) return;
  Run(n, std::max<int64_t>(least, 1), 2 * static_cast<int64_t>(num_threads()), fn);
}

void ThreadPool::Run(int64_t n, int64_t least, int64_t share, RangeFn fn) {
  // Inline: nothing to share, or called from an item of this pool's running job (waiting for
  // the pool there would wait for ourselves).
  if (workers_.empty() || n == 1 || tls_running_pool == this) {
    fn(0, n, tls_running_pool == this ? tls_thread_index : 0);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  RunningPool running(this, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_size_ = n;
    next_item_ = 0;
    least_ = least, share_ = share;
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
