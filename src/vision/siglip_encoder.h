// Gemma 3's vision path: the SigLIP vision tower (patch embedding, pre-LayerNorm encoder layers
// with bidirectional attention, post LayerNorm) and Gemma3MultiModalProjector (average pooling of
// the patch grid, RMSNorm with (1 + w), projection to the text width). The output of Encode is
// what transformers' Gemma3Model.get_image_features(pixel_values).pooler_output gives.
#pragma once

#include <memory>
#include <vector>

#include "io/safetensors_checkpoint.h"
#include "vision/siglip_config.h"
#include "vision/siglip_weights.h"
#include "vision/vision_encoder.h"

namespace tessera::vision {

class SiglipEncoder final : public VisionEncoder {
 public:
  // Binds the checkpoint's vision weights (views into it: the checkpoint must outlive the encoder).
  static StatusOr<std::unique_ptr<SiglipEncoder>> Create(const io::SafetensorsCheckpoint& ckpt,
                                                         const SiglipConfig& config, int64_t text_hidden,
                                                         const VisionOptions& options);

  image::Family family() const override { return image::Family::kGemma3; }
  int64_t output_width() const override { return text_hidden_; }
  // Each input: pixels [num_channels, image_size, image_size], soft_tokens = mm_tokens_per_image.
  // Writes mm_tokens_per_image rows of output_width() per input. Images are encoded in groups
  // (all patches of a group in one Linear call per weight); their buffers come from `scratch`,
  // carved once per call.
  Status Encode(const std::vector<const image::PixelInput*>& inputs, float* out, ThreadPool& pool,
                EncodeScratch& scratch) const override;

  const SiglipConfig& config() const { return config_; }
  const SiglipWeights& weights() const { return weights_; }
  // Images encoded together for `count` inputs: enough patches per group to fill the GEMM.
  int64_t ImagesPerGroup(int64_t count) const;

 private:
  struct Scratch;
  SiglipEncoder(const SiglipConfig& config, int64_t text_hidden, const VisionOptions& options, SiglipWeights weights)
      : config_(config), text_hidden_(text_hidden), options_(options), weights_(std::move(weights)) {}

  Status CheckInput(const image::PixelInput* in, size_t index) const;
  void Patchify(const image::PixelInput* const* inputs, int64_t count, float* patches) const;
  // The tower over `count` images; returns the buffer holding the post-LayerNorm states [count * P, D].
  StatusOr<float*> Tower(const image::PixelInput* const* inputs, int64_t count, Scratch& s, ThreadPool& pool) const;
  Status Layer(const SiglipLayerWeights& L, int64_t count, Scratch& s, ThreadPool& pool) const;
  void Project(const float* states, int64_t count, Scratch& s, float* out, ThreadPool& pool) const;

  SiglipConfig config_;
  int64_t text_hidden_;
  VisionOptions options_;
  SiglipWeights weights_;
};

}  // namespace tessera::vision
