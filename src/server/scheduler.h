// The engine thread: the only thread that touches the RequestBatch (and so runs the model). HTTP
// handler threads Submit jobs into a bounded queue; the loop admits queued jobs into free slots,
// runs one Step (every running request's prefill chunk or next token in one forward pass), and
// hands each finished request's result back to its job. Idle, it sleeps on the queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "server/job.h"
#include "server/metrics.h"
#include "tessera/requests.h"

namespace tessera::server {

class Scheduler {
 public:
  // `batch` and `metrics` must outlive the scheduler.
  Scheduler(RequestBatch& batch, int64_t max_queue, Metrics& metrics);
  ~Scheduler();  // Stop()s

  void Start();
  // Joins the engine thread, then ends every queued and running job with an error. Idempotent.
  void Stop();

  // False when the queue is full (max_queue waiting beyond the free slots) or the scheduler
  // stopped: the caller answers 503.
  bool Submit(std::shared_ptr<Job> job);

 private:
  void Loop();
  // Moves queued jobs into free slots (lock held on entry and exit; released around Add).
  void Admit(std::unique_lock<std::mutex>& lock);
  // After a step: hands finished requests their results.
  void Collect();
  void Drain();

  RequestBatch& batch_;
  const int64_t batch_slots_;
  const int64_t max_queue_;
  std::atomic<int64_t> busy_{0};  // running requests, as the engine thread last counted them
  Metrics& metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::vector<std::pair<RequestId, std::shared_ptr<Job>>> running_;  // engine thread only
  std::thread thread_;
};

}  // namespace tessera::server
