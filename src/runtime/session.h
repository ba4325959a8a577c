// A generation session: one model, one KV cache and one set of activations, all allocated in
// Create(). Prefill (chunked, image blocks never split) and decode run the same forward pass on
// the same in-place cache.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/kv/kv_cache.h"
#include "model/activations.h"
#include "model/gemma_model.h"
#include "runtime/baseline_mode.h"
#include "runtime/sampler.h"
#include "tessera/engine.h"

namespace tessera::runtime {

using tessera::Mode;
using tessera::ModeName;
using tessera::ParseMode;
using tessera::Prompt;
using tessera::SessionOptions;

// One row's share of a step (Session::Step): `count` tokens appended at the row's next position.
struct RowChunk {
  const int32_t* tokens = nullptr;  // [count]
  const int32_t* block = nullptr;   // [count] image block ids (-1 = none), or null
  const float* embeds = nullptr;    // [placeholders in the chunk, hidden] rows for image placeholder ids
  int64_t count = 0;                // 0: the row sits this step out
  bool logits = true;               // false: the caller does not read this row's logits this step
};

// Block ids of one prompt: each maximal run of block-forming token types gets its own id (-1: none).
void BlockIds(const Prompt& p, const std::vector<int32_t>& block_types, std::vector<int32_t>& ids);
// `end` itself, or, where tokens [.., end) would cut an image block (blocks[end - 1] ==
// blocks[end] >= 0), the start of that block: a step must never split one.
int64_t BlockStart(const std::vector<int32_t>& blocks, int64_t end);

// Matmul precision bf16 rounds each Linear's input to bf16 so that bf16 x bf16 products are exact:
// every Linear weight the forward pass uses must be bf16 (and have at most
// ops::kMaxRoundedRowDotFloats inputs). Session::Create checks this; loaders may check earlier.
Status CheckMatmulPrecision(const model::GemmaModel& model, ops::MatmulPrecision precision);

// The KV cache a session of `options` allocates for `arch` (stores per layer, sharing, rings).
kv::KvCacheConfig KvCacheConfigFor(const model::GemmaArch& arch, const SessionOptions& options);

struct SessionMemoryPlan;  // runtime/session_plan.h

class Session {
 public:
  // Plans every allocation first (runtime/session_plan.h) and refuses, with the numbers, options
  // that do not fit the memory this process can use; then allocates all of it.
  static StatusOr<std::unique_ptr<Session>> Create(const model::GemmaModel& model, const SessionOptions& options,
                                                   ThreadPool* pool);

  // Prefills every row (row count <= max_batch) from an empty cache. last_logits: [B, vocab] of
  // each row's last prompt token. all_logits (optional): [B, S_max, vocab] for every prompt token.
  // tap (optional): named activations of row 0; needs the prompts to fit one chunk.
  Status Prefill(const std::vector<Prompt>& prompts, float* last_logits, float* all_logits = nullptr,
                 const model::ActivationTap* tap = nullptr);
  // One token per row (rows with active[b] == 0 append nothing); logits: [B, vocab].
  Status Decode(const int32_t* tokens, const uint8_t* active, float* logits);

  // The request runtime's step (tessera/requests.h): rows [0, rows) each append their
  // chunk at their own next position, on top of what their rows already hold; rows not in the
  // step and rows with count 0 are untouched. Unified mode only. last_logits: [rows, vocab], each
  // row's last token of the step (rows with count 0 or without chunks[b].logits: unspecified).
  // Runs as forward passes over row subsets: the one-token rows together, each run of adjacent
  // longer chunks apart, so no row is padded to another's chunk length.
  Status Step(const RowChunk* chunks, int64_t rows, float* last_logits);
  // Empties row b (a request left its slot), or drops its last n tokens (prefix reuse: refused,
  // changing nothing, where a ring no longer holds what the shorter row needs).
  Status ClearRow(int64_t b);
  // Speculative verification (docs/speculative.md): appends `n` tokens (<= verify_tokens) to row 0
  // of a one-row session in one step; logits: [n, vocab] at every one of them; hidden (optional):
  // [n, hidden] the final-normed hidden states (the LM head's input) there.
  Status Verify(const int32_t* tokens, int64_t n, float* logits, float* hidden);
  // The final-normed hidden state (LM head input) of row b's last token of the last Prefill or
  // Decode step: [hidden]. What a drafter reads after the prompt.
  const float* last_hidden(int64_t b) const { return act_.x.as<float>() + b * model_.arch().hidden; }
  Status RewindRow(int64_t b, int64_t n);

  // Whether steps whose caller reads only last-token logits skip what nothing reads
  // (model::ForwardBatch::skip_unread; docs/runtime.md "Prefill skips"). On unless the environment
  // says TESSERA_PREFILL_SKIP=0 when the session is created; the tests compare both paths.
  void set_skip_unread(bool on) { skip_unread_ = on; }
  bool skip_unread() const { return skip_unread_; }
  // The work of every step so far (model::ForwardCounts).
  const model::ForwardCounts& counts() const { return counts_; }

  // Called after each prefill chunk with (tokens done, tokens total) summed over rows.
  void set_progress(std::function<void(int64_t, int64_t)> fn) { progress_ = std::move(fn); }
  // Checked between prefill chunks: when set, Prefill stops with a Cancelled status.
  void set_cancel(const std::atomic<bool>* flag) { cancel_ = flag; }

  int64_t batch() const { return batch_; }
  const model::GemmaModel& model() const { return model_; }
  ThreadPool* pool() const { return pool_; }
  int64_t position(int64_t b) const { return next_pos_[b]; }
  int64_t max_batch() const { return opt_.max_batch; }
  const kv::KvCache& cache() const { return *cache_; }
  size_t activation_bytes() const { return act_.bytes(); }
  size_t planned_bytes() const { return planned_bytes_; }  // everything Create() planned
  const SessionOptions& options() const { return opt_; }

 private:
  Session(const model::GemmaModel& model, const SessionOptions& opt, ThreadPool* pool)
      : model_(model), opt_(opt), pool_(pool) {}
  // Every buffer of the session, sized by its plan (throws std::bad_alloc; Create catches it).
  Status Allocate(const SessionMemoryPlan& plan);
  Status ValidatePrompts(const std::vector<Prompt>& prompts) const;
  // Prefill's next chunk per row (count_), ending before (not inside) an image block; the
  // baselines' concat cache needs one common boundary for every row.
  Status NextChunk(const std::vector<Prompt>& prompts, const std::vector<std::vector<int32_t>>& blocks,
                   const std::vector<int64_t>& done);
  // Fills the step staging from rows [0, rows) of `chunks`, which stand for the cache's rows
  // [first_row, first_row + rows): S = the longest chunk (at least min_seq); counts in count_.
  // Returns S.
  int64_t Stage(const RowChunk* chunks, int64_t rows, int64_t min_seq, int64_t first_row = 0);
  // Step's forward pass over cache rows [first_row, first_row + rows); their logits rows go to
  // last_logits + (first_row + b) * vocab.
  Status StepRows(const RowChunk* chunks, int64_t rows, int64_t first_row, float* last_logits);
  // Runs the staged step [B, S] on the live cache and advances each row's position. logits_read:
  // whether the caller reads any row's last-token logits (all_logits and taps read everything).
  Status RunStep(int64_t B, int64_t S, bool all_logits, bool logits_read, const model::ActivationTap* tap,
                 bool rows_as_steps = false);

  const model::GemmaModel& model_;
  SessionOptions opt_;
  ThreadPool* pool_;
  std::unique_ptr<kv::KvCache> cache_;      // the in-place cache
  std::unique_ptr<BaselineMode> baseline_;  // bias / split modes only
  kv::KvCache* live_ = nullptr;             // the cache the next step uses
  std::function<void(int64_t, int64_t)> progress_;
  const std::atomic<bool>* cancel_ = nullptr;
  model::Activations act_;
  Arena attn_scratch_;
  size_t planned_bytes_ = 0;
  int64_t batch_ = 0;
  std::vector<int64_t> next_pos_;  // [max_batch] next position per row
  // Step staging, sized [max_batch * max_chunk] (embeds: x hidden) in Create().
  std::vector<int32_t> tokens_, pos_, block_, count_;
  std::vector<uint8_t> use_embed_;
  std::vector<float> embeds_;
  bool staged_blocks_ = false;     // some staged token is in an image block
  int64_t staged_first_ = 0;       // the staged rows are the cache's from this one
  bool skip_unread_ = true;
  model::ForwardCounts counts_;
  std::vector<RowChunk> chunks_;   // [max_batch] Prefill's and Decode's rows
};

}  // namespace tessera::runtime
