#include "tessera/kv/kv_cache.h"

#include <cmath>
#include <cstdio>
#include <new>

#include "tessera/attention.h"  // kMaxHeadDim
#include "tessera/kv/dense_store.h"
#include "tessera/kv/ring_store.h"
#include "tessera/kv/slot_buffer.h"

namespace tessera::kv {

const char* StoreKindName(StoreKind k) {
  switch (k) {
    case StoreKind::kDense: return "dense";
    case StoreKind::kRing: return "ring";
    case StoreKind::kShared: return "shared";
    case StoreKind::kCustom: return "custom";
  }
  return "?";
}

namespace {

KvGeometry Geometry(const KvCacheConfig& c, const KvLayerSpec& s) {
  return {c.batch, s.kv_heads, s.head_dim, s.v_head_dim, c.dtype};
}

Status ValidateConfig(const KvCacheConfig& c) {
  if (c.layers.empty()) return InvalidArgument("KvCache: no layers");
  if (c.batch < 1) return InvalidArgument("KvCache: batch " + std::to_string(c.batch) + " < 1");
  if (c.max_context < 1 || c.max_context > (int64_t{1} << 30))
    return InvalidArgument("KvCache: max_context " + std::to_string(c.max_context) + " is outside [1, 2^30]");
  if (c.max_chunk < 1 || c.max_chunk > c.max_context)
    return InvalidArgument("KvCache: max_chunk " + std::to_string(c.max_chunk) + " is outside [1, max_context]");
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const KvLayerSpec& s = c.layers[i];
    const std::string where = "KvCache: layer " + std::to_string(i) + ": ";
    if (s.kv_heads < 1 || s.kv_heads > 1024) return InvalidArgument(where + "kv_heads " + std::to_string(s.kv_heads));
    if (s.head_dim < 1 || s.head_dim > kMaxHeadDim || s.v_head_dim < 1 || s.v_head_dim > kMaxHeadDim)
      return InvalidArgument(where + "head dims " + std::to_string(s.head_dim) + "/" + std::to_string(s.v_head_dim) +
                             " outside [1, " + std::to_string(kMaxHeadDim) + "]");
    if (s.kind == LayerKind::kSliding && s.window < 1)
      return InvalidArgument(where + "sliding window " + std::to_string(s.window) + " < 1");
    // Sizes are int64 products: refuse before one could overflow (no machine holds 2^60 bytes).
    const double bytes = static_cast<double>(c.batch) * static_cast<double>(s.kv_heads) *
                         static_cast<double>(c.max_context) * static_cast<double>(s.head_dim + s.v_head_dim) *
                         static_cast<double>(DTypeSize(c.dtype));
    if (bytes > 0x1p60)
      return InvalidArgument(where + "batch " + std::to_string(c.batch) + " x max_context " +
                             std::to_string(c.max_context) + " would need about 2^" +
                             std::to_string(static_cast<int>(std::log2(bytes))) + " bytes");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<KvMemoryPlan> KvCache::Plan(const KvCacheConfig& c, bool custom_stores) {
  TESSERA_RETURN_IF_ERROR(ValidateConfig(c));
  std::vector<LayerKind> kinds;
  for (const KvLayerSpec& s : c.layers) kinds.push_back(s.kind);
  StatusOr<LayerMap> map = LayerMap::Build(kinds, c.num_kv_shared_layers);
  if (!map.ok()) return map.status();
  KvMemoryPlan plan;
  for (int64_t i = 0; i < static_cast<int64_t>(c.layers.size()); ++i) {
    const KvLayerSpec& s = c.layers[i];
    KvLayerPlan lp{s.kind, StoreKind::kDense, map.value().owner(i), 0, 0};
    if (map.value().is_consumer(i)) {
      const KvLayerSpec& o = c.layers[lp.owner];
      if (o.kv_heads != s.kv_heads || o.head_dim != s.head_dim || o.v_head_dim != s.v_head_dim)
        return InvalidArgument("KvCache: shared layer " + std::to_string(i) + " (kv_heads " + std::to_string(s.kv_heads) +
                               ", head_dim " + std::to_string(s.head_dim) + ") does not match its source layer " +
                               std::to_string(lp.owner) + " (kv_heads " + std::to_string(o.kv_heads) + ", head_dim " +
                               std::to_string(o.head_dim) + ")");
      lp.store = StoreKind::kShared;
    } else {
      const bool ring = s.kind == LayerKind::kSliding && RingStore::Capacity(s.window, c.max_chunk) < c.max_context;
      lp.store = ring ? StoreKind::kRing : StoreKind::kDense;
      lp.slots = ring ? RingStore::Capacity(s.window, c.max_chunk) : c.max_context;
      lp.bytes = SlotBuffer::Bytes(Geometry(c, s), lp.slots);
      if (custom_stores) lp.store = StoreKind::kCustom, lp.slots = 0, lp.bytes = 0;  // grows on use
    }
    plan.total_bytes += lp.bytes;
    plan.layers.push_back(lp);
  }
  return plan;
}

StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheConfig& c, const StoreFactory& factory) {
  StatusOr<KvMemoryPlan> plan = Plan(c, static_cast<bool>(factory));
  if (!plan.ok()) return plan.status();
  std::vector<LayerKind> kinds;
  for (const KvLayerSpec& s : c.layers) kinds.push_back(s.kind);
  LayerMap map = LayerMap::Build(kinds, c.num_kv_shared_layers).value();
  std::unique_ptr<KvCache> cache(new KvCache(c, std::move(map), std::move(plan.value())));
  try {
    cache->CreateStores(factory);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("KvCache: out of memory allocating " + std::to_string(cache->plan_.total_bytes) +
                             " bytes for " + std::to_string(c.layers.size()) + " layers");
  }
  return cache;
}

void KvCache::CreateStores(const StoreFactory& factory) {
  const KvCacheConfig& c = config_;
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const KvLayerPlan& lp = plan_.layers[i];
    const KvGeometry g = Geometry(c, c.layers[i]);
    if (lp.store == StoreKind::kDense) {
      stores_.push_back(std::make_unique<DenseStore>(g, lp.slots));
    } else if (lp.store == StoreKind::kRing) {
      stores_.push_back(std::make_unique<RingStore>(g, c.layers[i].window, c.max_chunk));
    } else if (lp.store == StoreKind::kCustom) {
      stores_.push_back(factory(g));
    } else {
      stores_.push_back(nullptr);
    }
  }
}

Status KvCache::Append(int64_t layer, const KvAppend& in) {
  if (layer < 0 || layer >= map_.num_layers())
    return InvalidArgument("KvCache::Append: layer " + std::to_string(layer) + " out of range");
  if (map_.is_consumer(layer))
    return InvalidArgument("KvCache::Append: layer " + std::to_string(layer) + " reads layer " +
                           std::to_string(map_.owner(layer)) + "'s KV (shared) and cannot be written");
  return stores_[layer]->Append(in);
}

void KvCache::Reset() {
  for (auto& s : stores_)
    if (s) s->Clear();
}

Status KvCache::Rewind(int64_t b, int64_t n) {
  TESSERA_RETURN_IF_ERROR(CanRewind(b, n));  // every store first, so a refusal leaves the cache untouched
  for (auto& s : stores_)
    if (s) TESSERA_RETURN_IF_ERROR(s->Rewind(b, n));
  return Status::Ok();
}

Status KvCache::CanRewind(int64_t b, int64_t n) const {
  if (b < 0 || b >= config_.batch) return InvalidArgument("KvCache::Rewind: row " + std::to_string(b) + " out of range");
  for (const auto& s : stores_)
    if (s) TESSERA_RETURN_IF_ERROR(s->CanRewind(b, n));
  return Status::Ok();
}

Status KvCache::ClearRow(int64_t b) {
  if (b < 0 || b >= config_.batch) return InvalidArgument("KvCache::ClearRow: row " + std::to_string(b) + " out of range");
  for (auto& s : stores_)
    if (s) TESSERA_RETURN_IF_ERROR(s->ClearRow(b));
  return Status::Ok();
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const auto& s : stores_)
    if (s) total += s->bytes();
  return total;
}

std::string KvMemoryPlan::Format() const {
  std::string out = "layer  kind     store   reads  slots     MiB\n";
  char line[128];
  for (size_t i = 0; i < layers.size(); ++i) {
    const KvLayerPlan& l = layers[i];
    std::snprintf(line, sizeof line, "%5zu  %-7s  %-6s  %5lld  %6lld  %8.2f\n", i, LayerKindName(l.layer_kind),
                  StoreKindName(l.store), static_cast<long long>(l.owner), static_cast<long long>(l.slots),
                  l.bytes / 1048576.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "total  %.2f MiB (%.3f GiB)\n", total_bytes / 1048576.0, total_bytes / 1073741824.0);
  return out + line;
}

}  // namespace tessera::kv
