// One model's KV cache: a store per owning layer (ring for sliding layers whose ring is smaller
// than the context, dense otherwise), shared layers resolved through the LayerMap. Everything is
// allocated in Create(); Append/Rewind/View never allocate.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/kv/kv_store.h"
#include "tessera/kv/layer_map.h"

namespace tessera::kv {

struct KvLayerSpec {
  LayerKind kind = LayerKind::kFull;
  int64_t kv_heads = 1, head_dim = 1, v_head_dim = 1;
  int64_t window = 0;  // HF sliding_window W for sliding layers
};

struct KvCacheConfig {
  std::vector<KvLayerSpec> layers;
  int64_t num_kv_shared_layers = 0;
  int64_t batch = 1;
  int64_t max_context = 4096;  // tokens per row
  int64_t max_chunk = 256;     // most tokens per append (prefill chunk)
  DType dtype = DType::kBF16;
};

// Makes the store of an owning layer, instead of the planned dense or ring store. Callers that
// measure other cache designs use it (the bias mode's concat baseline, runtime/baseline_mode.h).
using StoreFactory = std::function<std::unique_ptr<KvStore>(const KvGeometry&)>;

// kCustom: a store made by a StoreFactory; it allocates as it grows (the plan counts 0 bytes).
enum class StoreKind { kDense, kRing, kShared, kCustom };
const char* StoreKindName(StoreKind k);

struct KvLayerPlan {
  LayerKind layer_kind;
  StoreKind store;
  int64_t owner;   // layer whose store this layer reads
  int64_t slots;   // slots per row (0 for shared)
  size_t bytes;    // memory this layer owns
};

struct KvMemoryPlan {
  std::vector<KvLayerPlan> layers;
  size_t total_bytes = 0;
  std::string Format() const;  // a table, one line per layer plus the total
};

class KvCache {
 public:
  // Validates the config and computes what Create() would allocate, without allocating.
  // With a factory, every owning layer's store is the factory's (StoreKind::kCustom).
  static StatusOr<KvMemoryPlan> Plan(const KvCacheConfig& config, bool custom_stores = false);
  static StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheConfig& config, const StoreFactory& factory = {});

  // Writes new K/V of an owning layer; a shared (consumer) layer is refused.
  Status Append(int64_t layer, const KvAppend& in);
  // Empties every store (no allocation).
  void Reset();
  // Drops the last n tokens of row b in every store (all or nothing).
  Status Rewind(int64_t b, int64_t n);
  // Whether Rewind(b, n) would succeed (and why not), changing nothing.
  Status CanRewind(int64_t b, int64_t n) const;
  // Empties row b in every store; the other rows keep their tokens.
  Status ClearRow(int64_t b);
  // What layer `layer` attends over (its owner's store for shared layers).
  KvView View(int64_t layer) const { return stores_[map_.owner(layer)]->View(); }
  const KvStore& store(int64_t layer) const { return *stores_[map_.owner(layer)]; }

  const KvMemoryPlan& plan() const { return plan_; }
  const LayerMap& layer_map() const { return map_; }
  size_t bytes() const;  // measured: sum of the stores' allocations

 private:
  KvCache(KvCacheConfig config, LayerMap map, KvMemoryPlan plan)
      : config_(std::move(config)), map_(std::move(map)), plan_(std::move(plan)) {}
  void CreateStores(const StoreFactory& factory);  // one per owning layer, as planned (throws std::bad_alloc)
  KvCacheConfig config_;
  LayerMap map_;
  KvMemoryPlan plan_;
  std::vector<std::unique_ptr<KvStore>> stores_;  // [layers], null for consumers
};

}  // namespace tessera::kv
