// The "vision_config" of a Gemma 4 or Gemma 4 unified config.json, typed and validated. Defaults
// are those of transformers' Gemma4VisionConfig / Gemma4UnifiedVisionConfig for absent fields.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/status.h"

namespace tessera::vision {

// Gemma4VisionConfig (models/gemma4/configuration_gemma4.py).
struct Gemma4VisionConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 16;
  int64_t num_attention_heads = 12;
  int64_t num_key_value_heads = 12;
  int64_t head_dim = 64;
  double rms_norm_eps = 1e-6;
  double rope_theta = 100.0;  // rope_parameters.rope_theta; rope_type must be "axial"
  int64_t pooling_kernel_size = 3;
  int64_t patch_size = 16;
  int64_t position_embedding_size = 10 * 1024;
  bool use_clipped_linears = false;
  bool standardize = false;
};

// Gemma4UnifiedVisionConfig (models/gemma4_unified/configuration_gemma4_unified.py).
struct UnifiedVisionConfig {
  int64_t patch_size = 16;
  int64_t pooling_kernel_size = 3;
  int64_t mm_embed_dim = 3840;
  int64_t mm_posemb_size = 1120;
  int64_t output_proj_dims = 3840;
  double rms_norm_eps = 1e-6;
  int64_t model_patch_size() const { return patch_size * pooling_kernel_size; }
};

// Parse config.json text; `where` (the file's path) prefixes every message. A missing
// "vision_config" is InvalidArgument (the checkpoint takes no images).
StatusOr<Gemma4VisionConfig> ParseGemma4VisionConfig(const std::string& json_text, const std::string& where);
StatusOr<UnifiedVisionConfig> ParseUnifiedVisionConfig(const std::string& json_text, const std::string& where);
// Reads <dir>/config.json and parses it.
StatusOr<Gemma4VisionConfig> ReadGemma4VisionConfig(const std::string& dir);
StatusOr<UnifiedVisionConfig> ReadUnifiedVisionConfig(const std::string& dir);

}  // namespace tessera::vision
