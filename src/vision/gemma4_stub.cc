// Placeholder until the Gemma 4 vision encoders land.
#include "vision/loaders.h"

namespace tessera::vision {
StatusOr<std::unique_ptr<VisionEncoder>> LoadGemma4VisionEncoder(const model::LoadedModel&, const VisionOptions&) {
  return Unimplemented("the Gemma 4 vision tower");
}
StatusOr<std::unique_ptr<VisionEncoder>> LoadUnifiedVisionEmbedder(const model::LoadedModel&, const VisionOptions&) {
  return Unimplemented("the Gemma 4 unified vision embedder");
}
}  // namespace tessera::vision
