// Cache configurations of real model shapes, for the memory report, benchmarks and tests. Model
// knowledge (layer counts, head shapes, window), so it lives here rather than in kv.
#pragma once

#include "tessera/kv/kv_cache.h"

namespace tessera::model {

// Gemma-4-12B: 48 layers, every 6th full (and the last), sliding 8 KV heads x 256 window 1024,
// full 1 KV head x 512 (attention_k_eq_v: K and V both stored).
kv::KvCacheConfig Gemma4_12BCache(int64_t context, int64_t max_chunk, DType dtype = DType::kBF16);
// Gemma-3-12B: 48 layers, every 6th full, all 8 KV heads x 256, window 1024.
kv::KvCacheConfig Gemma3_12BCache(int64_t context, int64_t max_chunk, DType dtype = DType::kBF16);

}  // namespace tessera::model
