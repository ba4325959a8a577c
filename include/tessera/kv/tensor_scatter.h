// ONNX TensorScatter (opset 24) applied in place: the update rule of caller-owned ("external")
// KV caches. cache[prefix..., idx(i), ...] = update[prefix..., i, ...] along `axis`, with
// idx(i) = write_indices[batch] + i (linear; must stay inside the cache) or that value modulo the
// cache's axis length (circular). Element type agnostic (element_bytes).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/status.h"

namespace tessera::kv {

enum class ScatterMode { kLinear, kCircular };

Status TensorScatter(void* cache, const std::vector<int64_t>& cache_shape,  // [B, ..., max_seq, ...]
                     const void* update, const std::vector<int64_t>& update_shape,  // [B, ..., seq, ...]
                     const int64_t* write_indices,  // [B] or null (zeros)
                     int64_t axis, ScatterMode mode, size_t element_bytes);

}  // namespace tessera::kv
