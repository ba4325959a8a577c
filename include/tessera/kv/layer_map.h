// Which layers own a KV store and which read another layer's (Gemma num_kv_shared_layers): the
// last n layers compute only Q and read the K/V of the last earlier non-shared layer of the same
// layer type. No copies and no store of their own.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/status.h"

namespace tessera::kv {

enum class LayerKind { kFull, kSliding };
const char* LayerKindName(LayerKind k);

class LayerMap {
 public:
  static StatusOr<LayerMap> Build(const std::vector<LayerKind>& kinds, int64_t num_kv_shared_layers);

  int64_t num_layers() const { return static_cast<int64_t>(owner_.size()); }
  // The layer whose store `layer` reads (itself for owners).
  int64_t owner(int64_t layer) const { return owner_[layer]; }
  bool is_consumer(int64_t layer) const { return owner_[layer] != layer; }

 private:
  std::vector<int64_t> owner_;
};

}  // namespace tessera::kv
