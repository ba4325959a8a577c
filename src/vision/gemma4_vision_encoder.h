// Gemma 4's vision path: Gemma4VisionModel (patch embedder, encoder layers, position pooler,
// optional standardization) followed by embed_vision (Gemma4MultimodalEmbedder), as
// transformers' Gemma4Model.get_image_features computes pooler_output.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vision/gemma4_vision_config.h"
#include "vision/gemma4_vision_layer.h"
#include "vision/vision_encoder.h"

namespace tessera::vision {

class Gemma4VisionEncoder final : public VisionEncoder {
 public:
  static StatusOr<std::unique_ptr<Gemma4VisionEncoder>> Create(const model::LoadedModel& model,
                                                               const Gemma4VisionConfig& config,
                                                               const VisionOptions& options);
  image::Family family() const override { return image::Family::kGemma4; }
  int64_t output_width() const override { return text_hidden_; }
  Status Encode(const std::vector<const image::PixelInput*>& inputs, float* out, ThreadPool& pool,
                EncodeScratch& scratch) const override;
  const Gemma4VisionConfig& config() const { return config_; }

 private:
  Gemma4VisionEncoder() = default;
  Status LoadWeights(const io::SafetensorsCheckpoint& ckpt, const std::string& tower, const std::string& embed);
  Status LoadLayer(class Gemma4WeightReader& r, const std::string& prefix, Gemma4VisionLayerWeights* l);
  // Checks one input against the config; sets its pooled soft tokens' count.
  Status CheckInput(const image::PixelInput& in, size_t index) const;
  // h [rows, hidden] = input_proj(2 * (pixels - 0.5)) + x/y position rows, for one image's valid rows.
  void EmbedPatches(const image::PixelInput& in, float* h, float* tmp, uint32_t* x_pairs, ThreadPool& pool) const;
  // Averages each k x k group of patches into its soft token (scaled by sqrt(hidden)), in kernel
  // order, then standardizes; returns the soft tokens written to `pooled`.
  int64_t Pool(const image::PixelInput& in, const float* h, float* pooled) const;
  // (x - std_bias) * std_scale on rows of x when the config standardizes.
  void Standardize(float* x, int64_t rows) const;

  Gemma4VisionConfig config_;
  VisionOptions options_;
  int64_t text_hidden_ = 0;
  ops::WeightView input_proj_, embedding_projection_;
  const void* position_table_ = nullptr;  // [2, position_embedding_size, hidden] as stored
  DType position_dtype_ = DType::kF32;
  std::vector<Gemma4VisionLayerWeights> layers_;
  std::vector<float> std_bias_, std_scale_;
  std::vector<float> inv_freq_;
  std::vector<AlignedBuffer> owned_;
};

}  // namespace tessera::vision
