// The engine's one generation loop: prefill, then sample / stream / stop / decode per row. The
// public Session::Generate, the CLI's run and demo, the Python module and the benchmarks all go
// through it; the request runtime (runtime/request_batch.h) drives the same per-row TokenStream
// from its own steps.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"
#include "tessera/engine.h"

namespace tessera::runtime {

// One row's generation: picks each next token from the row's logits, streams it, and decides
// whether the row goes on. Its sampler is the row's own, so a row's tokens do not depend on the
// other rows it shares a batch with.
class TokenStream {
 public:
  TokenStream(int64_t row, const GenerateOptions& options, int64_t vocab)
      : row_(row), options_(options), sampler_(options.sampling, vocab) {}

  // Samples from `logits` [vocab], records and streams the token. `room`: whether the row's cache
  // can take one more token. Afterwards done() says whether the row has finished.
  Status Next(const float* logits, bool room);
  // Ends the row now (the cancel flag, or a prefill that was cancelled).
  void Cancel() { Finish(FinishReason::kCancelled); }

  bool done() const { return done_; }
  int32_t last() const { return out_.tokens.back(); }
  RowOutput& output() { return out_; }

 private:
  void Finish(FinishReason r) { done_ = true, out_.finish = r; }

  int64_t row_;
  const GenerateOptions& options_;
  Sampler sampler_;
  RowOutput out_;
  bool done_ = false;
};

// Prefills `prompts` in `session`, then generates per options (max_new_tokens, sampling, stop
// tokens, streaming, cancel). Rows finish independently; a cancelled run returns OK with the
// tokens produced so far and FinishReason::kCancelled. On an error *out still holds the tokens
// made (and streamed) before it.
Status Generate(Session& session, const std::vector<Prompt>& prompts, const GenerateOptions& options,
                GenerateOutput* out);

// Checks options a generation cannot run with (max_new_tokens < 0, bad sampling).
Status ValidateGenerateOptions(const GenerateOptions& options);

}  // namespace tessera::runtime
