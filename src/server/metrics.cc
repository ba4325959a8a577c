#include "server/metrics.h"

#include <cstdio>

namespace tessera::server {

int64_t RateWindow::Second(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

void RateWindow::Add(std::chrono::steady_clock::time_point now, int64_t tokens) {
  const int64_t s = Second(now);
  Bucket& b = buckets_[static_cast<size_t>(s % kSeconds)];
  if (b.second != s) b = {s, 0};
  b.tokens += tokens;
}

double RateWindow::PerSecond(std::chrono::steady_clock::time_point now) const {
  // The current second is still filling: the window is the kSeconds before it.
  const int64_t s = Second(now);
  int64_t sum = 0;
  for (const Bucket& b : buckets_)
    if (b.second >= s - kSeconds && b.second < s) sum += b.tokens;
  return static_cast<double>(sum) / kSeconds;
}

void Metrics::CountRequest(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, status}];
}

void Metrics::CountTokens(int64_t prompt, int64_t reused, int64_t generated) {
  prompt_tokens_ += prompt;
  reused_tokens_ += reused;
  generated_tokens_ += generated;
}

void Metrics::CountStep(int64_t prefill_tokens, int64_t decode_tokens) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  prefill_.Add(now, prefill_tokens);
  decode_.Add(now, decode_tokens);
}

std::string Metrics::Render() const {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto value = [&](const std::string& name, double v) {
    char num[64];
    std::snprintf(num, sizeof(num), "%.17g", v);
    out += name + " " + num + "\n";
  };
  metric("tessera_requests_total", "counter", "HTTP requests by route and status code.");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, n] : requests_)
      value("tessera_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}",
            static_cast<double>(n));
  }
  metric("tessera_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  value("tessera_prompt_tokens_total", static_cast<double>(prompt_tokens_.load()));
  metric("tessera_prompt_tokens_reused_total", "counter", "Prompt tokens found in a slot's cache, not recomputed.");
  value("tessera_prompt_tokens_reused_total", static_cast<double>(reused_tokens_.load()));
  metric("tessera_generated_tokens_total", "counter", "Tokens generated for finished requests.");
  value("tessera_generated_tokens_total", static_cast<double>(generated_tokens_.load()));
  metric("tessera_queue_depth", "gauge", "Requests waiting for a free slot.");
  value("tessera_queue_depth", static_cast<double>(queue_depth_.load()));
  metric("tessera_slots_busy", "gauge", "Slots running a request.");
  value("tessera_slots_busy", static_cast<double>(slots_busy_.load()));
  metric("tessera_slots_total", "gauge", "Slots (rows of the KV cache).");
  value("tessera_slots_total", static_cast<double>(slots_total_));
  const auto now = std::chrono::steady_clock::now();
  double prefill = 0, decode = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    prefill = prefill_.PerSecond(now);
    decode = decode_.PerSecond(now);
  }
  metric("tessera_prefill_tokens_per_second", "gauge", "Prompt tokens computed per second, last 10 s.");
  value("tessera_prefill_tokens_per_second", prefill);
  metric("tessera_decode_tokens_per_second", "gauge", "Tokens generated per second, last 10 s.");
  value("tessera_decode_tokens_per_second", decode);
  metric("tessera_kv_cache_bytes", "gauge", "Bytes of the KV cache (all slots).");
  value("tessera_kv_cache_bytes", static_cast<double>(kv_cache_bytes_));
  return out;
}

}  // namespace tessera::server
