// Dense store: [B, Hkv, capacity, D], token t of row b in slot t. Rows advance independently.
#pragma once

#include <memory>
#include <vector>

#include "tessera/kv/slot_buffer.h"

namespace tessera::kv {

class DenseStore final : public KvStore {
 public:
  DenseStore(const KvGeometry& g, int64_t capacity);

  Status Append(const KvAppend& in) override;
  Status CanRewind(int64_t b, int64_t n) const override;
  Status Rewind(int64_t b, int64_t n) override;
  KvView View() const override { return buf_.View(valid_.data()); }
  void Clear() override;
  Status ClearRow(int64_t b) override;

  int64_t capacity() const override { return buf_.slots(); }
  int64_t write_pos(int64_t b) const override { return valid_[b]; }
  int64_t valid_len(int64_t b) const override { return valid_[b]; }
  size_t bytes() const override { return buf_.bytes(); }

 private:
  SlotBuffer buf_;
  std::vector<int32_t> valid_;     // [B] tokens held (== write position)
  std::vector<int32_t> last_pos_;  // [B] newest position, INT32_MIN when empty
};

}  // namespace tessera::kv
