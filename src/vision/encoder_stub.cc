// Placeholder until the vision encoders land.
#include "vision/vision_encoder.h"

namespace tessera::vision {
StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Load(const model::LoadedModel&, const VisionOptions&) {
  return Unimplemented("vision encoders");
}
}  // namespace tessera::vision
