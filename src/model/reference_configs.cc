#include "model/reference_configs.h"

namespace tessera::model {

using kv::KvCacheConfig;
using kv::KvLayerSpec;
using kv::LayerKind;

KvCacheConfig Gemma4_12BCache(int64_t context, int64_t max_chunk, DType dtype) {
  KvCacheConfig c;
  for (int i = 0; i < 48; ++i) {
    const bool full = (i + 1) % 6 == 0 || i == 47;
    c.layers.push_back(full ? KvLayerSpec{LayerKind::kFull, 1, 512, 512, 0}
                            : KvLayerSpec{LayerKind::kSliding, 8, 256, 256, 1024});
  }
  c.max_context = context;
  c.max_chunk = max_chunk;
  c.dtype = dtype;
  return c;
}

KvCacheConfig Gemma3_12BCache(int64_t context, int64_t max_chunk, DType dtype) {
  KvCacheConfig c;
  for (int i = 0; i < 48; ++i)
    c.layers.push_back((i + 1) % 6 == 0 ? KvLayerSpec{LayerKind::kFull, 8, 256, 256, 0}
                                        : KvLayerSpec{LayerKind::kSliding, 8, 256, 256, 1024});
  c.max_context = context;
  c.max_chunk = max_chunk;
  c.dtype = dtype;
  return c;
}

}  // namespace tessera::model
