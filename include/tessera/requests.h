// Many requests over one KV cache, each in its own rows (slots): the runtime a server builds on.
// A request joins while others decode (its prefill chunks run in the same forward passes as their
// decode tokens), leaves when it finishes, and a later request whose prompt starts with a free
// slot's cached tokens reuses them where the cache still holds them. Each request's tokens equal
// what it would produce alone (docs/runtime.md "Requests and slots").
#pragma once

#include <cstdint>
#include <memory>

#include "tessera/engine.h"

namespace tessera {

using RequestId = int64_t;

struct RequestResult {
  RowOutput output;
  Status status;               // not OK: the request failed (its tokens so far are in output)
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;   // prompt tokens found in the slot's cache and not recomputed
  int64_t slot = -1;
};

// The tokens one Step() fed: prompt tokens of prefill chunks, and one per decoding request.
struct StepTokens {
  int64_t prefill = 0, decode = 0;
};

class RequestBatch {
 public:
  // options.max_batch is the number of slots; the mode must be unified. The model (and the pool,
  // when given) must outlive the batch.
  static StatusOr<std::unique_ptr<RequestBatch>> Create(const Model& model, const SessionOptions& options,
                                                        ThreadPool* pool = nullptr);
  ~RequestBatch();

  // Starts a request in a free slot: the one whose cached tokens share the longest prefix with the
  // prompt, else the lowest. The prompt and its image rows are copied. Bad prompts and options are
  // refused here, never in a later step; ResourceExhausted when every slot is busy. on_token is
  // called with the request id as its row.
  StatusOr<RequestId> Add(const Prompt& prompt, const GenerateOptions& options);
  // One forward pass: every prefilling request takes its next chunk (image blocks never split),
  // every decoding request one token; callbacks run; finished requests free their slots.
  Status Step();
  // Ends the request at the next step (FinishReason::kCancelled) and frees its slot. Like every
  // call here, not thread-safe: from another thread, set the request's GenerateOptions::cancel.
  void Cancel(RequestId id);

  bool finished(RequestId id) const;
  // A finished request's result, handed over once; an error for unknown or running requests.
  StatusOr<RequestResult> Take(RequestId id);
  int64_t running() const;  // requests not yet finished
  int64_t slots() const;
  StepTokens last_step() const;  // what the last Step() ran (for a server's rates)

 private:
  explicit RequestBatch(std::unique_ptr<runtime::RequestRunner> impl);
  std::unique_ptr<runtime::RequestRunner> impl_;
};

}  // namespace tessera
