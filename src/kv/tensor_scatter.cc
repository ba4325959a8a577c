#include "tessera/kv/tensor_scatter.h"

#include <cstring>
#include <string>

namespace tessera::kv {

Status TensorScatter(void* cache, const std::vector<int64_t>& cs, const void* update, const std::vector<int64_t>& us,
                     const int64_t* write_indices, int64_t axis, ScatterMode mode, size_t element_bytes) {
  const int64_t rank = static_cast<int64_t>(cs.size());
  if (rank < 2 || static_cast<int64_t>(us.size()) != rank)
    return InvalidArgument("TensorScatter: cache rank " + std::to_string(rank) + " and update rank " +
                           std::to_string(us.size()) + " must match and be >= 2");
  if (axis < -rank || axis >= rank)
    return InvalidArgument("TensorScatter: axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  if (axis == 0) return InvalidArgument("TensorScatter: axis must not be the batch axis");
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis ? us[d] > cs[d] : us[d] != cs[d])
      return InvalidArgument("TensorScatter: update dim " + std::to_string(d) + " = " + std::to_string(us[d]) +
                             " incompatible with cache dim " + std::to_string(cs[d]));
    if (cs[d] < 0 || us[d] < 0) return InvalidArgument("TensorScatter: negative dimension");
  }
  const int64_t B = cs[0], max_seq = cs[axis], seq = us[axis];
  for (int64_t b = 0; b < B; ++b) {
    const int64_t w = write_indices ? write_indices[b] : 0;
    if (w < 0 || (mode == ScatterMode::kLinear && w + seq > max_seq))
      return OutOfRange("TensorScatter: write_indices[" + std::to_string(b) + "] = " + std::to_string(w) + " with " +
                        std::to_string(seq) + " new entries does not fit the cache axis of " + std::to_string(max_seq) +
                        (mode == ScatterMode::kLinear ? " (linear mode)" : ""));
    if (mode == ScatterMode::kCircular && max_seq == 0 && seq > 0)
      return InvalidArgument("TensorScatter: circular write into an empty axis");
  }
  // Row = the contiguous block after `axis`; prefix = dims 1..axis-1 (per batch row).
  int64_t inner = 1, prefix = 1;
  for (int64_t d = axis + 1; d < rank; ++d) inner *= cs[d];
  for (int64_t d = 1; d < axis; ++d) prefix *= cs[d];
  const size_t row_bytes = static_cast<size_t>(inner) * element_bytes;
  auto* dst = static_cast<char*>(cache);
  const auto* src = static_cast<const char*>(update);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t w = write_indices ? write_indices[b] : 0;
    for (int64_t p = 0; p < prefix; ++p) {
      const int64_t outer = b * prefix + p;
      for (int64_t i = 0; i < seq; ++i) {
        int64_t slot = w + i;
        if (mode == ScatterMode::kCircular) slot %= max_seq;
        std::memcpy(dst + (outer * max_seq + slot) * row_bytes, src + (outer * seq + i) * row_bytes, row_bytes);
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera::kv
