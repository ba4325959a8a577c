#include "tessera/kv/external_store.h"

#include <algorithm>
#include <limits>
#include <string>

#include "tessera/kv/tensor_scatter.h"

namespace tessera::kv {

ExternalStore::ExternalStore(const KvGeometry& g, void* k_cache, void* v_cache, int64_t max_seq, int64_t* nonpad)
    : g_(g),
      k_(k_cache),
      v_(v_cache),
      max_seq_(max_seq),
      nonpad_(nonpad),
      pos_(g.batch * max_seq, kNoTokenPos),
      blk_(g.batch * max_seq, -1),
      valid_(g.batch, 0),
      last_pos_(g.batch, std::numeric_limits<int32_t>::min()) {
  // Slots already valid in the caller's cache sit at their index position.
  for (int64_t b = 0; b < g.batch; ++b) {
    TESSERA_CHECK(nonpad[b] >= 0 && nonpad[b] <= max_seq, "ExternalStore: nonpad_kv_seqlen out of range");
    for (int64_t j = 0; j < nonpad[b]; ++j) pos_[b * max_seq + j] = static_cast<int32_t>(j);
    if (nonpad[b] > 0) last_pos_[b] = static_cast<int32_t>(nonpad[b] - 1);
  }
}

Status ExternalStore::Append(const KvAppend& in) {
  TESSERA_RETURN_IF_ERROR(CheckAppend("ExternalStore", g_, in, last_pos_.data()));
  const int64_t B = g_.batch, H = g_.kv_heads, S = in.k.seq;
  if (in.k.batch != B)
    return InvalidArgument("ExternalStore::Append: new K/V batch " + std::to_string(in.k.batch) + " != cache batch " +
                           std::to_string(B) + " (TensorScatter updates every row)");
  if (in.k.dtype != g_.dtype)
    return InvalidArgument(std::string("ExternalStore::Append: update dtype ") + DTypeName(in.k.dtype) +
                           " must equal the cache dtype " + DTypeName(g_.dtype));
  if (in.k.stride_seq != g_.head_dim || in.k.stride_head != S * g_.head_dim || in.v.stride_seq != g_.v_head_dim ||
      in.v.stride_head != S * g_.v_head_dim || in.k.stride_batch != H * S * g_.head_dim ||
      in.v.stride_batch != H * S * g_.v_head_dim)
    return InvalidArgument("ExternalStore::Append: new K/V must be contiguous [B, Hkv, S_new, D]");
  const size_t es = DTypeSize(g_.dtype);
  TESSERA_RETURN_IF_ERROR(TensorScatter(k_, {B, H, max_seq_, g_.head_dim}, in.k.data, {B, H, S, g_.head_dim}, nonpad_,
                                        2, ScatterMode::kLinear, es));
  TESSERA_RETURN_IF_ERROR(TensorScatter(v_, {B, H, max_seq_, g_.v_head_dim}, in.v.data, {B, H, S, g_.v_head_dim},
                                        nonpad_, 2, ScatterMode::kLinear, es));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = in.count ? in.count[b] : S;
    for (int64_t i = 0; i < n; ++i) {
      pos_[b * max_seq_ + nonpad_[b] + i] = in.pos[b * S + i];
      blk_[b * max_seq_ + nonpad_[b] + i] = in.block ? in.block[b * S + i] : -1;
    }
    nonpad_[b] += n;
    if (n > 0) last_pos_[b] = in.pos[b * S + n - 1];
  }
  return Status::Ok();
}

void ExternalStore::Clear() {
  std::fill(pos_.begin(), pos_.end(), kNoTokenPos);
  std::fill(blk_.begin(), blk_.end(), -1);
  for (int64_t b = 0; b < g_.batch; ++b) nonpad_[b] = 0;
  std::fill(last_pos_.begin(), last_pos_.end(), std::numeric_limits<int32_t>::min());
}

Status ExternalStore::ClearRow(int64_t b) {
  if (b < 0 || b >= g_.batch) return InvalidArgument("ExternalStore::ClearRow: row " + std::to_string(b) + " out of range");
  return Rewind(b, nonpad_[b]);
}

Status ExternalStore::CanRewind(int64_t b, int64_t n) const {
  if (b < 0 || b >= g_.batch) return InvalidArgument("ExternalStore::Rewind: row " + std::to_string(b) + " out of range");
  if (n < 0 || n > nonpad_[b])
    return OutOfRange("ExternalStore::Rewind: row " + std::to_string(b) + " holds " + std::to_string(nonpad_[b]) +
                      " tokens, cannot drop " + std::to_string(n));
  return Status::Ok();
}

Status ExternalStore::Rewind(int64_t b, int64_t n) {
  TESSERA_RETURN_IF_ERROR(CanRewind(b, n));
  for (int64_t j = nonpad_[b] - n; j < nonpad_[b]; ++j) pos_[b * max_seq_ + j] = kNoTokenPos, blk_[b * max_seq_ + j] = -1;
  nonpad_[b] -= n;
  last_pos_[b] = nonpad_[b] > 0 ? pos_[b * max_seq_ + nonpad_[b] - 1] : std::numeric_limits<int32_t>::min();
  return Status::Ok();
}

KvView ExternalStore::View() const {
  for (int64_t b = 0; b < g_.batch; ++b) valid_[b] = static_cast<int32_t>(nonpad_[b]);
  KvView view;
  const int64_t B = g_.batch, H = g_.kv_heads, M = max_seq_;
  view.k = {k_, g_.dtype, B, H, M, g_.head_dim, H * M * g_.head_dim, M * g_.head_dim, g_.head_dim};
  view.v = {v_, g_.dtype, B, H, M, g_.v_head_dim, H * M * g_.v_head_dim, M * g_.v_head_dim, g_.v_head_dim};
  view.k_pos = pos_.data();
  view.k_block = blk_.data();
  view.kv_valid = valid_.data();
  return view;
}

}  // namespace tessera::kv
