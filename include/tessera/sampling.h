// How the next token is chosen from a logits row: greedy, or temperature / top-k / top-p sampling
// with a seed (runs are reproducible).
#pragma once

#include <cstdint>

#include "tessera/status.h"

namespace tessera {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off; keep the smallest set whose probability reaches top_p
  uint64_t seed = 0;
};

// Errors name the bad field (negative or non-finite temperature, top_p outside (0, 1], ...).
Status ValidateSampling(const SamplingParams& p);

}  // namespace tessera
