// Placeholder until the SigLIP encoder lands.
#include "vision/loaders.h"

namespace tessera::vision {
StatusOr<std::unique_ptr<VisionEncoder>> LoadSiglipEncoder(const model::LoadedModel&, const VisionOptions&) {
  return Unimplemented("the Gemma 3 vision tower");
}
}  // namespace tessera::vision
