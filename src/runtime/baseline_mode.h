// The bias and split modes' machinery in one place (docs/runtime.md "Modes"): what runtimes do
// once they fall off their fast paths, kept to measure it against the unified mode. It owns the
// concat cache ("past + new -> newly allocated present" on every append), the dense bias each
// layer's mask is materialized into, and the split mode's hand-over to the in-place cache. The
// model and the KV layer know nothing of it: it enters the forward pass as an AttentionHook and
// the cache through a StoreFactory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/kv/kv_cache.h"
#include "model/gemma_arch.h"
#include "model/gemma_model.h"
#include "tessera/engine.h"

namespace tessera::runtime {

class BaselineMode final : public model::AttentionHook {
 public:
  // `cache` is the config of the in-place cache; the concat cache takes its layers and dtype.
  BaselineMode(Mode mode, kv::KvCacheConfig cache) : mode_(mode), config_(std::move(cache)) {}

  // A fresh concat cache for a prefill of `rows` rows: the cache the next steps write.
  StatusOr<kv::KvCache*> Begin(int64_t rows);
  // The cache decode steps use: the concat cache (bias), or null once handed over (split).
  kv::KvCache* live() const { return concat_.get(); }
  // Split mode, after the prefill: copies every row's `tokens` tokens into `in_place` (chunks of
  // at most max_chunk, which rings accept) and drops the concat cache.
  Status HandOver(const model::GemmaArch& arch, int64_t tokens, kv::KvCache& in_place);

  // Attention over the layer's mask materialized as a dense additive bias [B, 1, S, S_kv]: the
  // kernel sees no structure. The buffer is resized per step (O(S x S_kv), by design).
  Status Attend(AttentionParams& p, AttentionContext& ctx) override;

  Mode mode() const { return mode_; }

 private:
  Mode mode_;
  kv::KvCacheConfig config_;
  std::unique_ptr<kv::KvCache> concat_;
  std::vector<float> bias_;
  std::vector<int32_t> pos_, blk_;  // hand-over staging
};

}  // namespace tessera::runtime
