// A fixed pool of worker threads with a blocking parallel-for. Passed explicitly to every
// kernel that wants parallelism; there is no global pool.
//
// Thread safety: any thread may call ParallelFor at any time. Calls from different threads take
// turns (one job runs at a time, each with every worker); a call made from inside a job's item
// runs its items inline on that thread, under that thread's index. So one pool can serve several
// sessions, a loader and attention calls at once, each getting the result it would get alone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/status.h"

namespace tessera {

class ThreadPool {
 public:
  // Most threads one pool may have; more is a clear error, not an attempt to start them.
  static constexpr int kMaxThreads = 1024;

  // A pool of num_threads threads (the caller counts as one), or an error naming the thread
  // that could not be started (e.g. out of memory for its stack).
  static StatusOr<std::unique_ptr<ThreadPool>> Create(int64_t num_threads);

  // num_threads counts the calling thread: ThreadPool(1) runs everything inline. Never fails:
  // when a thread cannot be started the pool keeps those it has and start_status() says why.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  const Status& start_status() const { return start_status_; }

  // A non-owning reference to a callable `void(Args..., int thread)`: passing a lambda allocates
  // nothing (std::function may allocate for large captures, on every kernel call).
  template <typename... Args>
  class FnRef {
   public:
    template <typename F>
    FnRef(const F& f) : obj_(&f), call_([](const void* o, Args... a) { (*static_cast<const F*>(o))(a...); }) {}  // NOLINT
    void operator()(Args... a) const { call_(obj_, a...); }

   private:
    const void* obj_;
    void (*call_)(const void*, Args...);
  };
  using ItemFn = FnRef<int64_t, int>;             // (item, thread)
  using RangeFn = FnRef<int64_t, int64_t, int>;  // (begin, end, thread)

  // Calls fn(item, thread_index) for every item in [0, n); thread_index < num_threads().
  // Items are handed out dynamically; returns when all are done. `fn` must outlive the call.
  void ParallelFor(int64_t n, ItemFn fn);

  // Calls fn(begin, end, thread_index) on ranges that cover [0, n) once, handed out as threads ask
  // (guided): each takes 1/(2 threads) of what is left, at least `least` units (the last range may
  // have fewer). Long ranges first, each one stream; short ones at the end, where they let the
  // threads finish within a short range of each other. Without other threads: one range [0, n).
  void ParallelRanges(int64_t n, int64_t least, RangeFn fn);

 private:
  void WorkerLoop(int thread_index);
  void RunItems(int thread_index);
  void Run(int64_t n, int64_t least, int64_t share, RangeFn fn);

  std::vector<std::thread> workers_;
  Status start_status_;
  std::mutex call_mu_;  // one job at a time; held by the calling thread for the whole job
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const RangeFn* job_ = nullptr;
  int64_t job_size_ = 0;
  int64_t next_item_ = 0;
  int64_t least_ = 1, share_ = 1;  // a claim takes max(least_, what is left / share_)
  // Written under mu_; atomic so that waiting threads can spin on them before blocking.
  std::atomic<int64_t> generation_{0};
  std::atomic<int> active_{0};
  bool stop_ = false;
};

// Threads to use when the caller does not say: the hardware concurrency, at least 1.
int DefaultThreadCount();

}  // namespace tessera
