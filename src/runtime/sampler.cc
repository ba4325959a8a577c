#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "tessera/dtype.h"

namespace tessera {

Status ValidateSampling(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    return InvalidArgument("Sampler: temperature " + std::to_string(p.temperature) + " must be finite and >= 0");
  if (p.top_k < 0) return InvalidArgument("Sampler: top_k " + std::to_string(p.top_k) + " must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return InvalidArgument("Sampler: top_p " + std::to_string(p.top_p) + " must be in (0, 1]");
  return Status::Ok();
}

}  // namespace tessera

namespace tessera::runtime {
namespace {

// Sampling from non-finite logits would pick garbage silently: name the first bad token instead.
Status CheckFinite(const float* logits, int64_t vocab) {
  const int64_t bad = FirstNonFinite(DType::kF32, logits, vocab);
  if (bad < 0) return Status::Ok();
  return InvalidArgument("Sampler: logit of token " + std::to_string(bad) + " is " +
                         (std::isnan(logits[bad]) ? "nan" : logits[bad] > 0 ? "inf" : "-inf") +
                         " (the model produced non-finite logits)");
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int64_t vocab)
    : p_(params), rng_(params.seed), vocab_(vocab) {
  if (p_.temperature > 0.0f) order_.resize(vocab), probs_.resize(vocab);  // greedy needs no scratch
}

Status Sampler::Sample(const float* logits, int32_t* token) {
  TESSERA_RETURN_IF_ERROR(CheckFinite(logits, vocab_));
  *token = Pick(logits);
  return Status::Ok();
}

int64_t Sampler::Distribution(const float* logits) {
  const int64_t V = vocab_;
  std::iota(order_.begin(), order_.end(), 0);
  const int64_t k = p_.top_k > 0 ? std::min(p_.top_k, V) : V;
  auto by_logit = [logits](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
  const float mx = logits[order_[0]];
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += probs_[i] = std::exp((logits[order_[i]] - mx) / p_.temperature);
  int64_t keep = k;
  if (p_.top_p < 1.0f) {
    double cum = 0;
    for (int64_t i = 0; i < k; ++i) {
      cum += probs_[i] / total;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  return keep;
}

int32_t Sampler::Pick(const float* logits) {
  const int64_t V = vocab_;
  if (p_.temperature == 0.0f) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  const int64_t keep = Distribution(logits);
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += probs_[i];
  double u = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  for (int64_t i = 0; i < keep; ++i) {
    u -= probs_[i];
    if (u < 0) return order_[i];
  }
  return order_[keep - 1];
}

Status Sampler::Verify(const float* logits, int32_t draft, bool* accepted, int32_t* token) {
  TESSERA_RETURN_IF_ERROR(CheckFinite(logits, vocab_));
  if (p_.temperature == 0.0f) {
    *token = Pick(logits);
    *accepted = *token == draft;
    return Status::Ok();
  }
  const int64_t keep = Distribution(logits);
  double kept = 0, p_draft = 0;
  for (int64_t i = 0; i < keep; ++i) {
    kept += probs_[i];
    if (order_[i] == draft) p_draft = probs_[i];
  }
  // Accept with probability p(draft); else the residual max(0, p - onehot(draft)) renormalized,
  // which is p with the draft removed.
  *accepted = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * kept < p_draft;
  if (*accepted) {
    *token = draft;
    return Status::Ok();
  }
  double u = std::uniform_real_distribution<double>(0.0, kept - p_draft)(rng_);
  int32_t last = -1;
  for (int64_t i = 0; i < keep; ++i) {
    if (order_[i] == draft) continue;
    last = order_[i];
    u -= probs_[i];
    if (u < 0) break;
  }
  *token = last;  // p(draft) < 1 here, so another kept token exists
  return Status::Ok();
}

}  // namespace tessera::runtime
