#include "tessera/kv/layer_map.h"

#include <string>

namespace tessera::kv {

const char* LayerKindName(LayerKind k) { return k == LayerKind::kFull ? "full" : "sliding"; }

StatusOr<LayerMap> LayerMap::Build(const std::vector<LayerKind>& kinds, int64_t num_shared) {
  const int64_t L = static_cast<int64_t>(kinds.size());
  if (num_shared < 0 || num_shared >= L)
    return InvalidArgument("LayerMap: num_kv_shared_layers " + std::to_string(num_shared) + " must be in [0, " +
                           std::to_string(L) + ")");
  LayerMap map;
  map.owner_.resize(L);
  const int64_t first_shared = L - num_shared;
  for (int64_t i = 0; i < L; ++i) {
    map.owner_[i] = i;
    if (i < first_shared) continue;
    int64_t src = -1;
    for (int64_t j = first_shared - 1; j >= 0; --j)
      if (kinds[j] == kinds[i]) {
        src = j;
        break;
      }
    if (src < 0)
      return InvalidArgument("LayerMap: shared layer " + std::to_string(i) + " (" + LayerKindName(kinds[i]) +
                             ") has no earlier non-shared layer of the same type to read");
    map.owner_[i] = src;
  }
  return map;
}

}  // namespace tessera::kv
