// The Gemma 3 / Gemma 4 text decoder forward pass over a KV cache. One call processes one step
// for a batch of rows: a prefill chunk or a decode token per row, written into the cache in
// place; image blocks and soft-token embeddings come with the step. Allocation-free: every
// buffer comes from Activations and the attention arena planned by the session.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/kv/kv_cache.h"
#include "model/activations.h"
#include "model/gemma_arch.h"
#include "model/gemma_weights.h"
#include "tessera/attention.h"
#include "tessera/status.h"
#include "tessera/thread_pool.h"

namespace tessera::model {

// How a layer's attention is evaluated once its inputs and structured mask are set. The engine
// calls the structured kernels directly; the bias/split baselines (runtime/baseline_mode.h) pass
// one that materializes the mask as a dense bias first, to measure what that costs.
class AttentionHook {
 public:
  virtual ~AttentionHook() = default;
  virtual Status Attend(AttentionParams& params, AttentionContext& ctx) = 0;
};

// What forward passes ran, added up over passes: where the skips (ForwardBatch::skip_unread) act.
struct ForwardCounts {
  int64_t layer_tokens = 0;  // (decoder layer, token slot) pairs, padding slots included
  int64_t head_rows = 0;     // rows through the final norm and the LM head
};

struct ForwardBatch {
  int64_t batch = 1, seq = 0;           // tokens laid out [batch, seq]
  const int32_t* tokens = nullptr;      // [B, S] token ids (padding slots: any valid id)
  const int32_t* count = nullptr;       // [B] real tokens per row (a prefix of S)
  const int32_t* pos = nullptr;         // [B, S] absolute positions, continuing each row's cache
  const int32_t* block = nullptr;       // [B, S] image block id per token, -1 = none; null = none
  const float* embeds = nullptr;        // [B, S, hidden] soft-token embeddings (used where use_embed)
  const uint8_t* use_embed = nullptr;   // [B, S] 1: the token's embedding comes from `embeds`
  bool all_logits = false;              // every token [B, S, vocab], else each row's last real token [B, vocab]
  // The caller reads nothing but each row's last real token's logits (not all_logits, no tap).
  // Then the layers from arch.kv_writers_end() on, which write no K/V, run on those B tokens
  // alone (their other tokens' outputs reach nothing), and with logits_read false (no row's
  // logits are read: a prefill chunk that ends no prompt) they and the LM head do not run at all.
  // Same math for the tokens read, not the same kernels: docs/runtime.md "Prefill skips".
  bool skip_unread = false;
  bool logits_read = true;
  // Each token's logits carry the bits a one-token step at its position would give
  // (AttentionParams::rows_as_steps, ops::Linear's rows_as_steps): speculative verification and
  // decode batches. A step of several tokens per row must hold text tokens only (a one-row step
  // cannot see the later members of an image block).
  bool rows_as_steps = false;
  ForwardCounts* counts = nullptr;     // optional: this pass's work is added here
  AttentionHook* attention = nullptr;  // null: the structured kernels (the engine's way)
  AttentionPrecision attention_precision = AttentionPrecision::kF32;  // bf16 needs a bf16 cache
  ops::MatmulPrecision matmul_precision = ops::MatmulPrecision::kF32;  // bf16 needs bf16 Linear weights
  // Row b is the cache's row first_row + b: a step over some rows (prompt chunks beside decoding
  // slots) computes only those.
  int64_t first_row = 0;
};

// Which named activation of batch row 0 the forward pass copies out, for conformance debugging.
struct ActivationTap {
  float* hidden_after_layer = nullptr;  // [layers, S, hidden] residual stream after each layer (row 0)
};

class GemmaModel {
 public:
  GemmaModel(GemmaArch arch, GemmaWeights weights) : arch_(std::move(arch)), weights_(std::move(weights)) {}

  const GemmaArch& arch() const { return arch_; }
  const GemmaWeights& weights() const { return weights_; }

  // Checks token ids, counts and the block/embedding inputs of a step (bad input -> Status).
  Status ValidateBatch(const ForwardBatch& in) const;
  // Whether token id t can be embedded (`embedded`: it takes a soft-token row instead), and the
  // error for one that cannot: "<who>token id <t><at> is outside ...". Apart, so the per-token
  // check of every step builds no string.
  bool TokenOk(int32_t t, bool embedded) const;
  Status TokenError(int32_t t, const std::string& who, const std::string& at) const;
  // The scaled input embedding of token id t (TokenOk(t, false)) into row [hidden]: what the
  // forward pass feeds layer 0 for a text token (a drafter's input, docs/speculative.md).
  void EmbedToken(int32_t t, float* row) const;

  // Runs one step. `logits`: [B, S, vocab] or [B, vocab] f32 per in.all_logits (not written where
  // in.skip_unread and !in.logits_read).
  Status Forward(const ForwardBatch& in, kv::KvCache& cache, Activations& act, ThreadPool* pool, Arena& attn_scratch,
                 float* logits, const ActivationTap* tap = nullptr) const;

 private:
  Status CheckBlocksNotSplit(const ForwardBatch& in, const kv::KvCache& cache) const;
  void Embed(const ForwardBatch& in, Activations& act) const;
  // One decoder layer over the n = batch x seq tokens of `in`, residual stream in act.h.
  Status Layer(int64_t layer, const ForwardBatch& in, kv::KvCache& cache, Activations& act, ThreadPool* pool,
               Arena& attn_scratch) const;
  // Moves each row's last real token (residual stream and PLE inputs) to the front of act.h and
  // act.ple and returns the step the trailing KV-shared layers run: [B, 1] at those positions.
  ForwardBatch GatherLastTokens(const ForwardBatch& in, Activations& act) const;
  // Final norm, LM head and soft cap on the rows of `in` whose logits are wanted; returns the rows.
  int64_t Head(const ForwardBatch& in, Activations& act, ThreadPool* pool, float* logits) const;
  void PerLayerInputs(const ForwardBatch& in, Activations& act, ThreadPool* pool) const;
  Status Attention(int64_t layer, const ForwardBatch& in, kv::KvCache& cache, Activations& act, ThreadPool* pool,
                   Arena& attn_scratch) const;
  void Mlp(int64_t layer, int64_t n, const ForwardBatch& in, Activations& act, ThreadPool* pool) const;
  void PerLayerResidual(int64_t layer, int64_t n, const ForwardBatch& in, Activations& act, ThreadPool* pool) const;

  GemmaArch arch_;
  GemmaWeights weights_;
};

}  // namespace tessera::model
