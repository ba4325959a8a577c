// Next-token choice from a logits row: greedy, or temperature / top-k / top-p sampling with a
// seeded generator (one per session, passed explicitly: runs are reproducible).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tessera/sampling.h"
#include "tessera/status.h"

namespace tessera::runtime {

using tessera::SamplingParams;
using tessera::ValidateSampling;

class Sampler {
 public:
  // `vocab` bounds the scratch it allocates once here (only when it samples: greedy needs none).
  Sampler(const SamplingParams& params, int64_t vocab);
  // Picks a token from logits [vocab] f32 (not modified) into *token. Logits holding a NaN or an
  // infinity are an error naming the first such id: the model has failed, and no token is a fair
  // answer (docs/reliability.md).
  Status Sample(const float* logits, int32_t* token);
  // Speculative verification of a deterministic (greedy) draft `draft` against this row's logits
  // (docs/speculative.md): accepts it with probability p(draft) under the same processed
  // distribution p that Sample draws from, else draws *token from p without `draft`; so *token
  // (draft when *accepted) is distributed exactly as Sample's. Greedy params: accepted iff draft
  // is the argmax, *token the argmax.
  Status Verify(const float* logits, int32_t draft, bool* accepted, int32_t* token);

 private:
  int32_t Pick(const float* logits);
  // The processed distribution: order_[0, keep) with unnormalized weights probs_[0, keep).
  int64_t Distribution(const float* logits);

  SamplingParams p_;
  std::mt19937_64 rng_;
  int64_t vocab_;
  std::vector<int32_t> order_;  // [vocab] candidate ids
  std::vector<float> probs_;    // [vocab]
};

}  // namespace tessera::runtime
