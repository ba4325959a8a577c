// What /metrics reports, in the Prometheus text format: requests by route and status, token
// totals, the queue and the slots, recent prefill and decode rates, the KV cache's bytes.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace tessera::server {

// Tokens per second over the last kSeconds, from per-second buckets (a ring: fixed memory).
class RateWindow {
 public:
  static constexpr int kSeconds = 10;
  void Add(std::chrono::steady_clock::time_point now, int64_t tokens);
  double PerSecond(std::chrono::steady_clock::time_point now) const;

 private:
  struct Bucket {
    int64_t second = -1;
    int64_t tokens = 0;
  };
  static int64_t Second(std::chrono::steady_clock::time_point t);
  std::array<Bucket, kSeconds> buckets_{};
};

class Metrics {
 public:
  Metrics(int64_t slots, int64_t kv_cache_bytes) : slots_total_(slots), kv_cache_bytes_(kv_cache_bytes) {}

  // route: the request path when it is one of the server's routes, else "other".
  void CountRequest(const std::string& route, int status);
  // One finished request's tokens.
  void CountTokens(int64_t prompt, int64_t reused, int64_t generated);
  // One engine step's work (the engine thread).
  void CountStep(int64_t prefill_tokens, int64_t decode_tokens);
  void SetQueue(int64_t depth) { queue_depth_.store(depth); }
  void SetBusySlots(int64_t busy) { slots_busy_.store(busy); }

  std::string Render() const;

 private:
  const int64_t slots_total_, kv_cache_bytes_;
  std::atomic<int64_t> prompt_tokens_{0}, reused_tokens_{0}, generated_tokens_{0};
  std::atomic<int64_t> queue_depth_{0}, slots_busy_{0};
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  RateWindow prefill_, decode_;
};

}  // namespace tessera::server
