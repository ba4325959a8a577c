// Gemma 4 unified's encoder-free vision path (Gemma4UnifiedVisionEmbedder): each merged patch goes
// LayerNorm -> Linear with bias -> LayerNorm -> + factorized x/y position rows -> LayerNorm ->
// RMSNorm without scale -> Linear to the text width. Patches do not see each other.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vision/gemma4_vision_config.h"
#include "vision/vision_encoder.h"

namespace tessera::vision {

class UnifiedVisionEmbedder final : public VisionEncoder {
 public:
  static StatusOr<std::unique_ptr<UnifiedVisionEmbedder>> Create(const model::LoadedModel& model,
                                                                 const UnifiedVisionConfig& config,
                                                                 const VisionOptions& options);
  image::Family family() const override { return image::Family::kGemma4Unified; }
  int64_t output_width() const override { return text_hidden_; }
  Status Encode(const std::vector<const image::PixelInput*>& inputs, float* out, ThreadPool& pool,
                EncodeScratch& scratch) const override;

 private:
  UnifiedVisionEmbedder() = default;
  Status LoadWeights(const io::SafetensorsCheckpoint& ckpt);
  Status CheckInput(const image::PixelInput& in, size_t index) const;
  // Rows [0, n) of one image: everything up to the final projection, into x [n, mm_embed_dim].
  void Embed(const image::PixelInput& in, float* x, float* tmp, uint32_t* x_pairs, ThreadPool& pool) const;

  UnifiedVisionConfig config_;
  VisionOptions options_;
  int64_t text_hidden_ = 0;
  ops::WeightView patch_dense_, embedding_projection_;
  std::vector<float> ln1_w_, ln1_b_, dense_b_, ln2_w_, ln2_b_, pos_norm_w_, pos_norm_b_;
  const void* pos_table_ = nullptr;  // [mm_posemb_size, 2, mm_embed_dim] as stored
  DType pos_dtype_ = DType::kF32;
  std::vector<AlignedBuffer> owned_;
};

}  // namespace tessera::vision
