// Storage shared by the dense and ring stores: K/V [B, Hkv, slots, D|Dv] in the store dtype plus
// per-slot position and block id, allocated once.
#pragma once

#include <cstdint>

#include "tessera/aligned_buffer.h"
#include "tessera/kv/kv_store.h"

namespace tessera::kv {

class SlotBuffer {
 public:
  SlotBuffer(const KvGeometry& g, int64_t slots);

  // Copies token i of row b of `in` (converted to the store dtype) into `slot` of cache row
  // in.first_row + b.
  void Write(const KvAppend& in, int64_t b, int64_t i, int64_t slot);
  // Marks a slot as holding no token.
  void Clear(int64_t b, int64_t slot);
  // Marks every slot as holding no token.
  void ClearAll();
  KvView View(const int32_t* kv_valid) const;

  int32_t pos(int64_t b, int64_t slot) const { return pos_.as<int32_t>()[b * slots_ + slot]; }
  int64_t slots() const { return slots_; }
  size_t bytes() const { return k_.size() + v_.size() + pos_.size() + blk_.size(); }
  // What a SlotBuffer(g, slots) allocates, for planning.
  static size_t Bytes(const KvGeometry& g, int64_t slots);
  const KvGeometry& geometry() const { return g_; }

 private:
  KvGeometry g_;
  int64_t slots_;
  AlignedBuffer k_;    // [B, Hkv, slots, D]  g_.dtype
  AlignedBuffer v_;    // [B, Hkv, slots, Dv] g_.dtype
  AlignedBuffer pos_;  // [B, slots] int32
  AlignedBuffer blk_;  // [B, slots] int32
};

}  // namespace tessera::kv
