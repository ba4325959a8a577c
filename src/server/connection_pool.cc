#include "server/connection_pool.h"

namespace tessera::server {

void ConnectionPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    // Every queued job beyond the idle threads would wait: start one for it while the cap allows.
    if (!stop_ && jobs_.size() > idle_ && threads_.size() < max_threads_) threads_.emplace_back([this] { Work(); });
  }
  cv_.notify_one();
}

void ConnectionPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // stopping, nothing left
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    fn();
    lock.lock();
  }
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

size_t ConnectionPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

}  // namespace tessera::server
