// External store: K/V buffers owned by the caller ([B, Hkv, max_seq, D|Dv], the store's dtype,
// contiguous), updated with ONNX TensorScatter (linear mode, write_indices = the current
// nonpad_kv_seqlen) and read with nonpad_kv_seqlen semantics: slots [0, nonpad[b]) are valid.
// This is the ONNX opset-24 external-cache ABI; positions and block ids are kept by the store.
#pragma once

#include <vector>

#include "tessera/kv/kv_store.h"

namespace tessera::kv {

class ExternalStore final : public KvStore {
 public:
  // k_cache/v_cache: caller-owned, outlive the store. nonpad_kv_seqlen: caller-owned [B], the
  // valid length of each row, advanced by Append (the ONNX graph's nonpad input).
  ExternalStore(const KvGeometry& g, void* k_cache, void* v_cache, int64_t max_seq, int64_t* nonpad_kv_seqlen);

  // New K/V must be contiguous [B, Hkv, S_new, D] in the cache dtype (TensorScatter copies bytes).
  Status Append(const KvAppend& in) override;
  Status CanRewind(int64_t b, int64_t n) const override;
  Status Rewind(int64_t b, int64_t n) override;
  KvView View() const override;
  void Clear() override;
  Status ClearRow(int64_t b) override;

  int64_t capacity() const override { return max_seq_; }
  int64_t write_pos(int64_t b) const override { return nonpad_[b]; }
  int64_t valid_len(int64_t b) const override { return nonpad_[b]; }
  size_t bytes() const override { return (pos_.size() + blk_.size()) * sizeof(int32_t); }  // K/V are the caller's

 private:
  KvGeometry g_;
  void* k_;
  void* v_;
  int64_t max_seq_;
  int64_t* nonpad_;
  std::vector<int32_t> pos_, blk_;     // [B, max_seq]
  mutable std::vector<int32_t> valid_;  // [B] int32 copy of nonpad for the view
  std::vector<int32_t> last_pos_;
};

}  // namespace tessera::kv
