// The threads cpp-httplib serves connections on. httplib holds a thread per open connection for
// as long as it stays open (waiting for the next request on a keep-alive connection, or for the
// rest of a slow one), so a fixed pool the size of the request places is taken by a few idle
// clients and /health stops answering. This pool starts a thread whenever a connection finds none
// idle, up to `max_threads`; beyond that connections wait for one.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::server {

class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max_threads) : max_threads_(max_threads) {}
  ~ConnectionPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override;
  // Runs what was queued, then joins every thread (httplib calls it once its accept loop ends).
  void shutdown() override;

  size_t threads() const;

 private:
  void Work();

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

}  // namespace tessera::server
