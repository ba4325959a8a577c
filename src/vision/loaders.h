// The per-family constructors behind VisionEncoder::Load (one file pair per family).
#pragma once

#include <memory>

#include "vision/vision_encoder.h"

namespace tessera::vision {

// Gemma 3: SigLIP vision tower + multimodal projector (siglip_encoder.cc).
StatusOr<std::unique_ptr<VisionEncoder>> LoadSiglipEncoder(const model::LoadedModel& model,
                                                           const VisionOptions& options);
// Gemma 4: vision tower + embed_vision (gemma4_vision_encoder.cc).
StatusOr<std::unique_ptr<VisionEncoder>> LoadGemma4VisionEncoder(const model::LoadedModel& model,
                                                                 const VisionOptions& options);
// Gemma 4 unified: the encoder-free patch embedder (unified_vision_embedder.cc).
StatusOr<std::unique_ptr<VisionEncoder>> LoadUnifiedVisionEmbedder(const model::LoadedModel& model,
                                                                   const VisionOptions& options);

}  // namespace tessera::vision
