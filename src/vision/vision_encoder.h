// A checkpoint's vision path, pixels to soft tokens in the text model's width: the SigLIP tower and
// projector of Gemma 3, the Gemma 4 vision tower and its embedder, or Gemma 4 unified's
// encoder-free patch embedder (docs/images.md). Built on the engine's Linear and structured-mask
// attention; the image's patches attend to each other, padding patches are invalid keys.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/loaded_model.h"
#include "tessera/image.h"
#include "tessera/precision.h"
#include "tessera/status.h"
#include "tessera/thread_pool.h"
#include "vision/encode_scratch.h"

namespace tessera::vision {

struct VisionOptions {
  ops::MatmulPrecision matmul_precision = ops::MatmulPrecision::kF32;
};

class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  // The vision weights of an opened checkpoint (gemma3: vision_tower.* and multi_modal_projector.*;
  // gemma4: vision_tower.* and embed_vision.*; gemma4_unified: embed_vision.*). InvalidArgument
  // naming what is missing when the checkpoint has no vision weights.
  static StatusOr<std::unique_ptr<VisionEncoder>> Load(const model::LoadedModel& model,
                                                       const VisionOptions& options = {});
  virtual image::Family family() const = 0;
  virtual int64_t output_width() const = 0;  // the text model's hidden size
  // Soft tokens of every input in order: out [sum of inputs' soft_tokens, output_width] f32. The
  // activations come from `scratch`, which grows to fit the call (std::bad_alloc when it cannot).
  virtual Status Encode(const std::vector<const image::PixelInput*>& inputs, float* out, ThreadPool& pool,
                        EncodeScratch& scratch) const = 0;
};

}  // namespace tessera::vision
