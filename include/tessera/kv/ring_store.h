// Ring store for sliding-window layers: memory O(window), not O(context).
//
// With HF sliding_window W a query sees the W - 1 tokens before it, so a chunk of at most
// max_chunk new tokens needs W - 1 + max_chunk slots: capacity = W - 1 + max_chunk. Token t of a
// row (t counts appended tokens) lives in slot t mod capacity; the slot's absolute position is
// stored with it, so the structured mask stays exact whatever the slot order. Attention must run
// after every append (each append may overwrite tokens the previous chunk needed).
#pragma once

#include <vector>

#include "tessera/kv/slot_buffer.h"

namespace tessera::kv {

class RingStore final : public KvStore {
 public:
  // window: HF sliding_window W (>= 1); max_chunk: most tokens per append (>= 1).
  RingStore(const KvGeometry& g, int64_t window, int64_t max_chunk);

  Status Append(const KvAppend& in) override;
  // Exact while the W - 1 tokens before the new end are still in the ring; refused otherwise.
  Status CanRewind(int64_t b, int64_t n) const override;
  Status Rewind(int64_t b, int64_t n) override;
  KvView View() const override { return buf_.View(valid_.data()); }
  void Clear() override;
  Status ClearRow(int64_t b) override;

  int64_t capacity() const override { return buf_.slots(); }
  int64_t write_pos(int64_t b) const override { return written_[b]; }
  int64_t valid_len(int64_t b) const override { return valid_[b]; }
  size_t bytes() const override { return buf_.bytes(); }

  int64_t window() const { return window_; }
  int64_t max_chunk() const { return max_chunk_; }
  static int64_t Capacity(int64_t window, int64_t max_chunk) { return window - 1 + max_chunk; }

 private:
  int64_t window_, max_chunk_;
  SlotBuffer buf_;
  std::vector<int64_t> written_;   // [B] tokens appended (minus rewinds)
  std::vector<int32_t> valid_;     // [B] min(written, capacity)
  std::vector<int32_t> last_pos_;  // [B] newest position, INT32_MIN when empty
};

}  // namespace tessera::kv
