#include "runtime/baseline_mode.h"

#include <algorithm>
#include <limits>
#include <new>
#include <string>

#include "tessera/kv/concat_store.h"

namespace tessera::runtime {

StatusOr<kv::KvCache*> BaselineMode::Begin(int64_t rows) {
  kv::KvCacheConfig c = config_;
  c.batch = rows;
  auto concat = [](const kv::KvGeometry& g) -> std::unique_ptr<kv::KvStore> { return std::make_unique<kv::ConcatStore>(g); };
  StatusOr<std::unique_ptr<kv::KvCache>> cache = kv::KvCache::Create(c, concat);
  if (!cache.ok()) return cache.status();
  concat_ = std::move(cache.value());
  return concat_.get();
}

Status BaselineMode::HandOver(const model::GemmaArch& arch, int64_t len, kv::KvCache& in_place) {
  const int64_t chunk = config_.max_chunk;
  for (int64_t l = 0; l < arch.num_layers(); ++l) {
    if (arch.layers[l].shared_kv) continue;
    const kv::KvView src = concat_->View(l);
    const int64_t B = src.k.batch;
    for (int64_t j0 = 0; j0 < len; j0 += chunk) {
      const int64_t n = std::min(chunk, len - j0);
      pos_.resize(B * n);
      blk_.resize(B * n);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < n; ++i) {
          pos_[b * n + i] = src.k_pos[b * len + j0 + i];
          blk_[b * n + i] = src.k_block[b * len + j0 + i];
        }
      kv::KvAppend in;
      in.k = src.k;
      in.v = src.v;
      in.k.data = src.k.At(0, 0, j0);
      in.v.data = src.v.At(0, 0, j0);
      in.k.seq = in.v.seq = n;
      in.pos = pos_.data();
      in.block = blk_.data();
      TESSERA_RETURN_IF_ERROR(in_place.Append(l, in));
    }
  }
  concat_.reset();
  return Status::Ok();
}

Status BaselineMode::Attend(AttentionParams& p, AttentionContext& ctx) {
  const int64_t B = p.q.batch, S = p.q.seq, S_kv = p.k.seq;
  try {
    bias_.resize(B * S * S_kv);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("bias mode: out of memory for the dense mask of " + std::to_string(B) + " x " +
                             std::to_string(S) + " x " + std::to_string(S_kv));
  }
  TESSERA_RETURN_IF_ERROR(AttentionBias(p.mask, B, S, S_kv, -std::numeric_limits<float>::infinity(), bias_.data()));
  MaskSpec dense;
  dense.q_pos = p.mask.q_pos;
  dense.k_pos = p.mask.k_pos;
  dense.causal = false;
  dense.dense = {DenseMask::Kind::kAdditive, bias_.data(), S * S_kv, 0, S_kv, 1};
  p.mask = dense;
  return Attention(p, ctx);
}

}  // namespace tessera::runtime
