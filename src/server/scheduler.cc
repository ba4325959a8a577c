#include "server/scheduler.h"

#include <algorithm>
#include <cstdio>

namespace tessera::server {

Scheduler::Scheduler(RequestBatch& batch, int64_t max_queue, Metrics& metrics)
    : batch_(batch), batch_slots_(batch.slots()), max_queue_(max_queue), metrics_(metrics) {
  running_.reserve(static_cast<size_t>(batch.slots()));
}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Start() { thread_ = std::thread([this] { Loop(); }); }

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Drain();  // the engine thread is gone (or never ran): the batch is this thread's now
}

bool Scheduler::Submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Requests that will find a slot free do not count against the queue's places.
    const int64_t free_slots = std::max<int64_t>(0, batch_slots_ - busy_.load());
    if (stop_ || static_cast<int64_t>(queue_.size()) >= max_queue_ + free_slots) return false;
    queue_.push_back(std::move(job));
    metrics_.SetQueue(static_cast<int64_t>(queue_.size()));
  }
  cv_.notify_one();
  return true;
}

void Scheduler::Admit(std::unique_lock<std::mutex>& lock) {
  while (!queue_.empty() && batch_.running() < batch_.slots()) {
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    metrics_.SetQueue(static_cast<int64_t>(queue_.size()));
    lock.unlock();  // Add copies the prompt: handlers may queue meanwhile
    StatusOr<RequestId> id = job->cancelled() ? StatusOr<RequestId>(Cancelled("the client went away while queued"))
                                              : batch_.Add(job->prompt().View(), job->EngineOptions());
    job->Admitted(id.ok() ? Status::Ok() : id.status());
    if (id.ok()) running_.emplace_back(id.value(), std::move(job));
    lock.lock();
  }
}

void Scheduler::Collect() {
  for (size_t i = 0; i < running_.size();) {
    auto& [id, job] = running_[i];
    if (!batch_.finished(id)) {
      ++i;
      continue;
    }
    StatusOr<RequestResult> r = batch_.Take(id);
    if (r.ok()) {
      const RequestResult& res = r.value();
      metrics_.CountTokens(res.prompt_tokens, res.reused_tokens, static_cast<int64_t>(res.output.tokens.size()));
      job->Finished(std::move(r).value());
    } else {  // cannot happen for a finished id; the job must end either way
      RequestResult failed;
      failed.status = r.status();
      job->Finished(std::move(failed));
    }
    running_[i] = std::move(running_.back());
    running_.pop_back();
  }
  busy_.store(batch_.running());
  metrics_.SetBusySlots(batch_.running());
}

void Scheduler::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty() || batch_.running() > 0; });
    if (stop_) break;
    Admit(lock);
    busy_.store(batch_.running());
    metrics_.SetBusySlots(batch_.running());
    lock.unlock();
    // A failed step ends its requests with the error (RequestBatch); the next step goes on.
    const Status st = batch_.Step();
    if (!st.ok()) std::fprintf(stderr, "tessera serve: a step failed: %s\n", st.message().c_str());
    const StepTokens done = batch_.last_step();
    metrics_.CountStep(done.prefill, done.decode);
    Collect();
    lock.lock();
  }
}

void Scheduler::Drain() {
  std::deque<std::shared_ptr<Job>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(queue_);
  }
  const Status down = Cancelled("the server is shutting down");
  for (auto& job : queued) job->Admitted(down);
  for (auto& [id, job] : running_) batch_.Cancel(id);
  if (!running_.empty()) (void)batch_.Step();  // cancelled requests finish at the step boundary
  for (auto& [id, job] : running_) {
    RequestResult r;
    if (batch_.finished(id)) {
      StatusOr<RequestResult> taken = batch_.Take(id);
      if (taken.ok()) r = std::move(taken).value();
    }
    r.status = down;
    job->Finished(std::move(r));
  }
  running_.clear();
}

}  // namespace tessera::server
