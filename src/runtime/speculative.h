// Greedy speculative generation with a Gemma 4 assistant drafter (docs/speculative.md): the
// drafter proposes k tokens from the main model's in-place cache, one main-model step verifies
// them, the longest prefix matching the main model's own argmax is kept plus its next token, and
// the cache is rewound over the rest. The tokens equal plain greedy decoding's, always.
#pragma once

#include <cstdint>
#include <vector>

#include "model/drafter.h"
#include "runtime/session.h"

namespace tessera::runtime {

struct SpeculativeOptions {
  int64_t draft_tokens = 4;  // k per round (the session needs verify_tokens >= k + 1)
  int64_t max_new_tokens = 64;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
};

struct SpeculativeStats {
  int64_t rounds = 0;    // verification steps
  int64_t drafted = 0;   // draft tokens proposed
  int64_t accepted = 0;  // draft tokens the main model agreed with
  double acceptance() const { return drafted ? static_cast<double>(accepted) / drafted : 0.0; }
};

// Prefills `prompt` into row 0 of `session` (a one-row unified session, emptied first) and
// generates greedily; out: the new tokens (at most max_new_tokens, ending at a stop token if one
// came).
Status SpeculativeGenerate(Session& session, const model::Drafter& drafter, const Prompt& prompt,
                           const SpeculativeOptions& options, ThreadPool* pool, std::vector<int32_t>* out,
                           SpeculativeStats* stats);

}  // namespace tessera::runtime
