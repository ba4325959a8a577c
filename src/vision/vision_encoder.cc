#include "vision/vision_encoder.h"

#include "vision/loaders.h"

namespace tessera::vision {

StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::Load(const model::LoadedModel& model,
                                                             const VisionOptions& options) {
  switch (model.config().model_type) {
    case model::ModelType::kGemma3:
      return LoadSiglipEncoder(model, options);
    case model::ModelType::kGemma4:
      return LoadGemma4VisionEncoder(model, options);
    case model::ModelType::kGemma4Unified:
      return LoadUnifiedVisionEmbedder(model, options);
    default:
      return InvalidArgument(model.dir() + ": model_type " + model::ModelTypeName(model.config().model_type) +
                             " is text-only: it takes no images");
  }
}

}  // namespace tessera::vision
