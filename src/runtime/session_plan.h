// What a Session of given options will allocate, computed without allocating, and the check
// that it fits the memory this process can still use. Session::Create runs both before it
// allocates anything; a loader can run them to refuse impossible options at load time.
#pragma once

#include <cstddef>
#include <string>

#include "model/gemma_model.h"
#include "runtime/session.h"

namespace tessera::runtime {

struct SessionMemoryPlan {
  size_t kv_bytes = 0;          // the in-place KV cache (its memory plan)
  size_t baseline_bytes = 0;    // bias / split modes: concat caches at max_context + the dense bias
  size_t activation_bytes = 0;  // one forward pass of max_batch x max_chunk tokens
  size_t scratch_bytes = 0;     // attention scratch for the largest step
  size_t staging_bytes = 0;     // per-step token, position and embedding staging
  size_t total() const { return kv_bytes + baseline_bytes + activation_bytes + scratch_bytes + staging_bytes; }
  std::string Describe() const;  // "12.0 GiB (KV cache 11.5 GiB, activations ...)"
};

// Validates `options` against the model (batch, context, chunk, precisions) and sizes every
// allocation Session::Create makes for a pool of `threads` threads.
StatusOr<SessionMemoryPlan> PlanSession(const model::GemmaModel& model, const SessionOptions& options, int threads);

// ResourceExhausted, saying what was asked, what it needs and what the machine has, when the plan
// is larger than AvailableMemory().
Status CheckSessionFits(const SessionMemoryPlan& plan, const SessionOptions& options);

}  // namespace tessera::runtime
