// The vision state of a Model: its image processor and its encoders, made on first use (most
// sessions never see an image, and a text-only checkpoint has none).
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include "tessera/engine.h"
#include "vision/vision_encoder.h"

namespace tessera {

struct Model::Vision {
  std::mutex mu;  // guards the lazy members; encoding itself runs outside it
  std::optional<StatusOr<image::ImageProcessor>> processor;
  // One encoder per matmul precision (kF32, kBf16), or why it could not be made.
  std::unique_ptr<vision::VisionEncoder> encoders[2];
  std::optional<Status> encoder_error[2];
  // Each encoder's activations, kept between calls (vision/encode_scratch.h); a call takes its
  // encoder's with try_lock and uses a fresh one when another call holds it.
  vision::EncodeScratch scratch[2];
  std::mutex scratch_mu[2];
};

}  // namespace tessera
