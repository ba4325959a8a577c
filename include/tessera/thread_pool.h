// A fixed pool of worker threads with a blocking parallel-for. Passed explicitly to every
// kernel that wants parallelism; there is no global pool.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  // num_threads counts the calling thread: ThreadPool(1) runs everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(item, thread_index) for every item in [0, n); thread_index < num_threads().
  // Items are handed out dynamically; returns when all are done.
  void ParallelFor(int64_t n, const std::function<void(int64_t item, int thread)>& fn);

 private:
  void WorkerLoop(int thread_index);
  void RunItems(int thread_index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int)>* job_ = nullptr;
  int64_t job_size_ = 0;
  int64_t next_item_ = 0;
  int64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
};

// Threads to use when the caller does not say: the hardware concurrency, at least 1.
int DefaultThreadCount();

}  // namespace tessera
