// A generation session: one model, one KV cache and one set of activations, all allocated in
// Create(). Prefill (chunked, image blocks never split) and decode run the same forward pass on
// the same in-place cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/kv/kv_cache.h"
#include "model/activations.h"
#include "model/gemma_model.h"
#include "runtime/sampler.h"

namespace tessera::runtime {

// docs/runtime.md "Modes". All modes produce the same tokens; they differ in cost.
enum class Mode {
  kUnified,  // structured masks, one in-place cache for prefill and decode (the engine's way)
  kBias,     // the exporter fallback: dense float bias + "past + new -> present" cache, every step
  kSplit,    // prefill as kBias, hand the KV over to the in-place cache once, decode as kUnified
};
const char* ModeName(Mode m);
bool ParseMode(const std::string& name, Mode* out);

struct SessionOptions {
  int64_t max_batch = 1;
  int64_t max_context = 4096;  // tokens per row (prompt + generated)
  int64_t max_chunk = 256;     // prefill chunk; also sizes the sliding-window rings
  DType kv_dtype = DType::kF32;
  // bf16: attention rounds q and the softmax weights to bf16 (AttentionPrecision; needs kv_dtype
  // bf16): twice the arithmetic rate on CPUs with AVX-512-BF16, a bf16 model's rounding.
  AttentionPrecision attention_precision = AttentionPrecision::kF32;
  // bf16: every Linear rounds its input to bf16 (ops::MatmulPrecision; needs bf16 weights, as
  // real Gemma checkpoints store them): prefill's GEMM at twice the FMA rate on AVX-512-BF16.
  ops::MatmulPrecision matmul_precision = ops::MatmulPrecision::kF32;
  Mode mode = Mode::kUnified;  // kBias / kSplit need prompts of equal length (one concat length)
  bool all_logits = false;     // Prefill may return logits for every prompt token (sizes a
                               // [max_batch * max_chunk, vocab] buffer; off for generation)
};

// One row's prompt. Token types (HF token_type_ids / mm_token_type_ids) mark image tokens; each
// maximal run of block-forming types is one image block. Tokens whose id is one of the model's
// image placeholder ids take the next row of image_embeds instead of their embedding.
struct Prompt {
  std::vector<int32_t> tokens;
  std::vector<int32_t> token_types;  // empty, or one per token
  const float* image_embeds = nullptr;  // [image_rows, hidden] f32
  int64_t image_rows = 0;
};

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
  // Prefill, then sample up to max_new tokens per row until a stop token. out[b]: generated ids.
  Status Generate(const std::vector<Prompt>& prompts, int64_t max_new, const SamplingParams& sampling,
                  const std::vector<int32_t>& stop_tokens, std::vector<std::vector<int32_t>>* out);

  // Called after each prefill chunk with (tokens done, tokens total) summed over rows.
  void set_progress(std::function<void(int64_t, int64_t)> fn) { progress_ = std::move(fn); }

  int64_t batch() const { return batch_; }
  int64_t position(int64_t b) const { return next_pos_[b]; }
  const kv::KvCache& cache() const { return *cache_; }
  size_t activation_bytes() const { return act_.bytes(); }
  const SessionOptions& options() const { return opt_; }

 private:
  Session(const model::GemmaModel& model, const SessionOptions& opt, ThreadPool* pool)
      : model_(model), opt_(opt), pool_(pool) {}
  // Every buffer of the session, sized by its plan (throws std::bad_alloc; Create catches it).
  Status Allocate(const SessionMemoryPlan& plan);
  Status ValidatePrompts(const std::vector<Prompt>& prompts) const;
  // Split mode: copies the prefilled concat caches into the in-place cache (once per prompt).
  Status HandOver();

  const model::GemmaModel& model_;
  SessionOptions opt_;
  ThreadPool* pool_;
  std::unique_ptr<kv::KvCache> cache_;         // in-place cache (unified; split after the hand-over)
  std::unique_ptr<kv::KvCache> concat_cache_;  // bias baseline (bias; split during prefill)
  kv::KvCache* live_ = nullptr;                // the cache the next step uses
  std::vector<float> dense_bias_;              // bias baseline's per-layer [B, 1, S, S_kv] mask
  std::function<void(int64_t, int64_t)> progress_;
  model::Activations act_;
  Arena attn_scratch_;
  int64_t batch_ = 0;
  std::vector<int64_t> next_pos_;  // [max_batch] next position per row
  // Step staging, sized [max_batch * max_chunk] (embeds: x hidden) in Create().
  std::vector<int32_t> tokens_, pos_, block_, count_;
  std::vector<uint8_t> use_embed_;
  std::vector<float> embeds_;
};

}  // namespace tessera::runtime
