// A Gemma 4 assistant drafter (docs/speculative.md) bound to the main model it drafts for. Its
// layers compute no K/V: each reads, in place, the main model's cache of the main model's last
// non-shared layer of its own type, with one query row at the last seen token's position. One
// Step proposes one token; the caller chains steps by feeding each step's projected state back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors_checkpoint.h"
#include "model/drafter_config.h"
#include "model/gemma_model.h"
#include "model/weight_loader.h"
#include "tessera/aligned_buffer.h"
#include "tessera/kv/kv_cache.h"
#include "tessera/thread_pool.h"

namespace tessera::model {

// Every buffer of a draft step, allocated once (Drafter::NewScratch).
struct DrafterScratch {
  AlignedBuffer in;         // [2 * Hm]  concat(main embedding, main-width state)
  AlignedBuffer h, x;       // [Ha]      residual stream, normed input / sublayer output
  AlignedBuffer q, attn;    // [q_heads * max_head_dim]
  AlignedBuffer gate, up;   // [max_intermediate]
  // use_ordered_embeddings only: centroid logits [num_centroids], the chosen clusters [top_k]
  // (int32), their tokens' scores [top_k, vocab / num_centroids].
  AlignedBuffer centroid_logits, top, selected;
  Arena attn_scratch;       // sized for the main cache's views
};

class Drafter {
 public:
  // Opens the assistant checkpoint directory `dir` for `main` (which must outlive the drafter):
  // its config (gemma4_assistant), the text stack's weights and the two projections; refuses a
  // drafter whose widths or attention geometry do not match the main model, naming the field.
  // options.rewrite_matrix (quantize on load), when set, also rewrites the projections and centroids
  // after they are read as f32; the other options are not used.
  static StatusOr<std::unique_ptr<Drafter>> Load(const std::string& dir, const GemmaModel& main,
                                                 const WeightLoadOptions& options = {});

  // Scratch for steps against `cache` (the main model's cache; its capacity sizes the attention arena).
  StatusOr<std::unique_ptr<DrafterScratch>> NewScratch(const kv::KvCache& cache, ThreadPool* pool) const;

  // One draft step for batch row `row` of the main model's cache. `token`: the last seen token
  // (step 1) or the previous draft; `pos`: the last seen token's position s (the cache must hold
  // exactly positions < s for the row); `state`: [Hm] the main model's final-normed hidden state
  // at s - 1 (step 1) or the previous step's `next_state`. Writes logits [vocab] and
  // next_state [Hm] (may alias `state`).
  Status Step(const kv::KvCache& cache, int64_t row, int32_t token, int32_t pos, const float* state, float* logits,
              float* next_state, DrafterScratch& s, ThreadPool* pool) const;

  const GemmaArch& arch() const { return arch_; }
  const DrafterConfig& config() const { return config_; }
  // The main-model layer whose K/V drafter layer l reads.
  int64_t source_layer(int64_t l) const { return source_[l]; }
  // The LM head the steps read: under use_ordered_embeddings its clustered copy.
  const ops::WeightView& head() const { return config_.ordered_embeddings ? clustered_ : weights_.lm_head; }

 private:
  Drafter(const GemmaModel& main, DrafterConfig config) : main_(main), config_(std::move(config)) {}
  Status BindProjections(const WeightLoadOptions& options);
  Status BindOrderedHead();
  Status ClusterHead(const WeightLoadOptions& options);
  void OrderedHead(const float* x, float* logits, DrafterScratch& s, ThreadPool* pool) const;
  Status Attention(int64_t l, const kv::KvCache& cache, int64_t row, int32_t pos, DrafterScratch& s,
                   ThreadPool* pool) const;
  void Mlp(int64_t l, DrafterScratch& s, ThreadPool* pool) const;

  const GemmaModel& main_;
  DrafterConfig config_;
  std::optional<io::SafetensorsCheckpoint> ckpt_;
  GemmaArch arch_;
  GemmaWeights weights_;
  ops::WeightView pre_proj_;   // [Ha, 2 * Hm] f32, or as rewritten at load
  ops::WeightView post_proj_;  // [Hm, Ha] f32, or as rewritten at load
  ops::WeightView centroids_;  // [num_centroids, Ha] f32, or as rewritten (use_ordered_embeddings)
  std::vector<int32_t> clusters_;  // [num_centroids, vocab / num_centroids] token ids: token_ordering
  ops::WeightView clustered_;      // [vocab, Ha] the LM head's rows in clusters_' order (use_ordered_embeddings)
  std::vector<AlignedBuffer> owned_;  // the projections' f32 (or rewritten) copies
  std::vector<int64_t> source_;       // [drafter layers] main-model layer read
};

}  // namespace tessera::model
