#include "tessera/kv/concat_store.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <string>

namespace tessera::kv {

ConcatStore::ConcatStore(const KvGeometry& g)
    : g_(g), valid_(g.batch, 0), last_pos_(g.batch, std::numeric_limits<int32_t>::min()) {}

Status ConcatStore::Append(const KvAppend& in) {
  TESSERA_RETURN_IF_ERROR(CheckAppend("ConcatStore", g_, in, last_pos_.data()));
  const int64_t B = g_.batch, H = g_.kv_heads, S = in.k.seq, len = len_ + S;
  if (in.k.batch != B)
    return InvalidArgument("ConcatStore::Append: batch " + std::to_string(in.k.batch) + " != store batch " +
                           std::to_string(B));
  for (int64_t b = 0; b < B; ++b)
    if (in.count && in.count[b] != S)
      return InvalidArgument("ConcatStore::Append: every row must append the same number of tokens");
  const size_t es = DTypeSize(g_.dtype);
  AlignedBuffer k, v, pos, blk;
  try {
    k = AlignedBuffer(B * H * len * g_.head_dim * es), v = AlignedBuffer(B * H * len * g_.v_head_dim * es);
    pos = AlignedBuffer(B * len * sizeof(int32_t)), blk = AlignedBuffer(B * len * sizeof(int32_t));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("ConcatStore::Append: out of memory growing the cache to " + std::to_string(len) +
                             " tokens");
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bh = b * H + h;
      if (len_ > 0) {
        std::memcpy(k.as<char>() + bh * len * g_.head_dim * es, k_.as<char>() + bh * len_ * g_.head_dim * es,
                    len_ * g_.head_dim * es);
        std::memcpy(v.as<char>() + bh * len * g_.v_head_dim * es, v_.as<char>() + bh * len_ * g_.v_head_dim * es,
                    len_ * g_.v_head_dim * es);
      }
      for (int64_t i = 0; i < S; ++i) {
        ConvertDType(in.k.dtype, in.k.At(b, h, i), g_.dtype, k.as<char>() + (bh * len + len_ + i) * g_.head_dim * es,
                     g_.head_dim);
        ConvertDType(in.v.dtype, in.v.At(b, h, i), g_.dtype, v.as<char>() + (bh * len + len_ + i) * g_.v_head_dim * es,
                     g_.v_head_dim);
      }
    }
    if (len_ > 0) {
      std::memcpy(pos.as<int32_t>() + b * len, pos_.as<int32_t>() + b * len_, len_ * sizeof(int32_t));
      std::memcpy(blk.as<int32_t>() + b * len, blk_.as<int32_t>() + b * len_, len_ * sizeof(int32_t));
    }
    for (int64_t i = 0; i < S; ++i) {
      pos.as<int32_t>()[b * len + len_ + i] = in.pos[b * S + i];
      blk.as<int32_t>()[b * len + len_ + i] = in.block ? in.block[b * S + i] : -1;
    }
    if (S > 0) last_pos_[b] = in.pos[b * S + S - 1];
    valid_[b] = static_cast<int32_t>(len);
  }
  k_ = std::move(k), v_ = std::move(v), pos_ = std::move(pos), blk_ = std::move(blk);
  len_ = len;
  return Status::Ok();
}

void ConcatStore::Clear() {
  len_ = 0;
  k_ = AlignedBuffer(), v_ = AlignedBuffer(), pos_ = AlignedBuffer(), blk_ = AlignedBuffer();
  std::fill(valid_.begin(), valid_.end(), 0);
  std::fill(last_pos_.begin(), last_pos_.end(), std::numeric_limits<int32_t>::min());
}

Status ConcatStore::ClearRow(int64_t b) {
  return Unimplemented("ConcatStore::ClearRow: the concat baseline has one length for every row");
}

Status ConcatStore::CanRewind(int64_t b, int64_t n) const {
  return Unimplemented("ConcatStore::Rewind: the concat baseline does not support rewind");
}

Status ConcatStore::Rewind(int64_t b, int64_t n) { return CanRewind(b, n); }

KvView ConcatStore::View() const {
  KvView view;
  const int64_t B = g_.batch, H = g_.kv_heads;
  view.k = {k_.data(), g_.dtype, B, H, len_, g_.head_dim, H * len_ * g_.head_dim, len_ * g_.head_dim, g_.head_dim};
  view.v = {v_.data(), g_.dtype, B, H, len_, g_.v_head_dim, H * len_ * g_.v_head_dim, len_ * g_.v_head_dim, g_.v_head_dim};
  view.k_pos = pos_.as<const int32_t>();
  view.k_block = blk_.as<const int32_t>();
  view.kv_valid = valid_.data();
  return view;
}

}  // namespace tessera::kv
