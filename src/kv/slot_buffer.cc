#include "tessera/kv/slot_buffer.h"

#include <algorithm>

namespace tessera::kv {

SlotBuffer::SlotBuffer(const KvGeometry& g, int64_t slots)
    : g_(g),
      slots_(slots),
      k_(g.batch * g.kv_heads * slots * g.head_dim * DTypeSize(g.dtype), AlignedBuffer::Pages::kHuge),
      v_(g.batch * g.kv_heads * slots * g.v_head_dim * DTypeSize(g.dtype), AlignedBuffer::Pages::kHuge),
      pos_(g.batch * slots * sizeof(int32_t)),
      blk_(g.batch * slots * sizeof(int32_t)) {
  std::fill_n(pos_.as<int32_t>(), g.batch * slots, kNoTokenPos);
  std::fill_n(blk_.as<int32_t>(), g.batch * slots, -1);
}

size_t SlotBuffer::Bytes(const KvGeometry& g, int64_t slots) {
  const size_t es = DTypeSize(g.dtype);
  return Arena::Bytes<char>(g.batch * g.kv_heads * slots * g.head_dim * es) +
         Arena::Bytes<char>(g.batch * g.kv_heads * slots * g.v_head_dim * es) + 2 * Arena::Bytes<int32_t>(g.batch * slots);
}

void SlotBuffer::Write(const KvAppend& in, int64_t b, int64_t i, int64_t slot) {
  const size_t es = DTypeSize(g_.dtype);
  const int64_t r = in.first_row + b;
  for (int64_t h = 0; h < g_.kv_heads; ++h) {
    char* kd = static_cast<char*>(k_.data()) + ((r * g_.kv_heads + h) * slots_ + slot) * g_.head_dim * es;
    char* vd = static_cast<char*>(v_.data()) + ((r * g_.kv_heads + h) * slots_ + slot) * g_.v_head_dim * es;
    ConvertDType(in.k.dtype, in.k.At(b, h, i), g_.dtype, kd, g_.head_dim);
    ConvertDType(in.v.dtype, in.v.At(b, h, i), g_.dtype, vd, g_.v_head_dim);
  }
  const int64_t S = in.k.seq;
  pos_.as<int32_t>()[r * slots_ + slot] = in.pos[b * S + i];
  blk_.as<int32_t>()[r * slots_ + slot] = in.block ? in.block[b * S + i] : -1;
}

void SlotBuffer::Clear(int64_t b, int64_t slot) {
  pos_.as<int32_t>()[b * slots_ + slot] = kNoTokenPos;
  blk_.as<int32_t>()[b * slots_ + slot] = -1;
}

void SlotBuffer::ClearAll() {
  std::fill_n(pos_.as<int32_t>(), g_.batch * slots_, kNoTokenPos);
  std::fill_n(blk_.as<int32_t>(), g_.batch * slots_, -1);
}

KvView SlotBuffer::View(const int32_t* kv_valid) const {
  KvView view;
  const int64_t B = g_.batch, H = g_.kv_heads;
  view.k = {k_.data(), g_.dtype, B, H, slots_, g_.head_dim, H * slots_ * g_.head_dim, slots_ * g_.head_dim, g_.head_dim};
  view.v = {v_.data(), g_.dtype, B, H, slots_, g_.v_head_dim, H * slots_ * g_.v_head_dim, slots_ * g_.v_head_dim,
            g_.v_head_dim};
  view.k_pos = static_cast<const int32_t*>(pos_.data());
  view.k_block = static_cast<const int32_t*>(blk_.data());
  view.kv_valid = kv_valid;
  return view;
}

}  // namespace tessera::kv
