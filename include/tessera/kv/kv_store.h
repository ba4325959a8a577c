// The per-layer KV store interface. Every store is allocated once; Append writes in place.
// A store's view is what the attention kernels read: K/V over all slots, each slot's absolute
// position and block id, and per-row valid length (slots [0, valid) hold data).
#pragma once

#include <cstdint>
#include <limits>

#include "tessera/status.h"
#include "tessera/tensor_view.h"

namespace tessera::kv {

// Position given to a slot that holds no token (after a rewind): hidden by any causal mask or
// bounded right window, and never in a block.
inline constexpr int32_t kNoTokenPos = std::numeric_limits<int32_t>::max();

// Rows [0, B) of the store are appended to (B <= the store's batch; later rows are untouched).
struct KvAppend {
  HeadsView k;                     // [B, Hkv, S_new, D]  any dtype; converted to the store's dtype
  HeadsView v;                     // [B, Hkv, S_new, Dv] same dtype as k
  const int32_t* pos = nullptr;    // [B, S_new] absolute positions, strictly increasing per row
  const int32_t* count = nullptr;  // [B] tokens of row b to append (prefix of S_new); null = S_new
  const int32_t* block = nullptr;  // [B, S_new] image block ids (-1 = none); null = no blocks
  // Row b of k/v/pos/count/block goes to the cache's row first_row + b: a step over some of the
  // cache's rows (a joining request's prefill chunk beside decoding slots) needs no padding rows.
  int64_t first_row = 0;
};

struct KvView {
  HeadsView k;                        // [B, Hkv, slots, D]  store dtype
  HeadsView v;                        // [B, Hkv, slots, Dv] store dtype
  const int32_t* k_pos = nullptr;     // [B, slots] absolute position of each slot
  const int32_t* k_block = nullptr;   // [B, slots] block id of each slot (-1 = none)
  const int32_t* kv_valid = nullptr;  // [B] slots [0, kv_valid[b]) hold data
};

struct KvGeometry {
  int64_t batch = 1, kv_heads = 1, head_dim = 1, v_head_dim = 1;
  DType dtype = DType::kF32;
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual Status Append(const KvAppend& in) = 0;
  // Whether the last n tokens of row b can be dropped exactly (and why not).
  virtual Status CanRewind(int64_t b, int64_t n) const = 0;
  // Drops the last n tokens of row b; refused (store unchanged) when CanRewind refuses.
  virtual Status Rewind(int64_t b, int64_t n) = 0;
  virtual KvView View() const = 0;
  // Empties every row (no allocation; the next Append starts a new sequence).
  virtual void Clear() = 0;
  // Empties row b only (a request leaving its slot); other rows are untouched.
  virtual Status ClearRow(int64_t b) = 0;

  virtual int64_t capacity() const = 0;          // slots per row
  virtual int64_t write_pos(int64_t b) const = 0;  // tokens ever appended to row b (minus rewinds)
  virtual int64_t valid_len(int64_t b) const = 0;  // slots of row b holding data
  virtual size_t bytes() const = 0;              // memory owned (K, V, positions, blocks)
};

// Checks an append against a store's geometry: shapes, counts, positions increasing past `last`.
// `last_pos[b]` is the row's newest position (INT32_MIN when empty).
Status CheckAppend(const char* store, const KvGeometry& g, const KvAppend& in, const int32_t* last_pos);

}  // namespace tessera::kv
