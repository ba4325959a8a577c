// The baseline the benchmarks compare against: "past + new -> newly allocated present" on every
// append, as runtimes do once they fall off their in-place cache path. Kept only to measure it;
// it allocates and copies the whole cache per step by design.
#pragma once

#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/kv/kv_store.h"

namespace tessera::kv {

class ConcatStore final : public KvStore {
 public:
  explicit ConcatStore(const KvGeometry& g);

  // All rows must append the same number of tokens (ONNX past/present has one length).
  Status Append(const KvAppend& in) override;
  Status CanRewind(int64_t b, int64_t n) const override;
  Status Rewind(int64_t b, int64_t n) override;
  KvView View() const override;
  void Clear() override;
  Status ClearRow(int64_t b) override;

  int64_t capacity() const override { return len_; }
  int64_t write_pos(int64_t) const override { return len_; }
  int64_t valid_len(int64_t) const override { return len_; }
  size_t bytes() const override { return k_.size() + v_.size() + pos_.size() + blk_.size(); }

 private:
  KvGeometry g_;
  int64_t len_ = 0;
  AlignedBuffer k_, v_;      // [B, Hkv, len, D|Dv] reallocated on every append
  AlignedBuffer pos_, blk_;  // [B, len] int32
  std::vector<int32_t> valid_, last_pos_;
};

}  // namespace tessera::kv
