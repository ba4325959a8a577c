// The Gemma 3 vision settings of a checkpoint's config.json: its "vision_config" (a SigLIP vision
// tower; absent fields take transformers' SiglipVisionConfig defaults) and the top-level
// mm_tokens_per_image of Gemma3Config (default 256), checked for what the encoder relies on.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/status.h"

namespace tessera::vision {

struct SiglipConfig {
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t num_channels = 3;
  int64_t image_size = 224;
  int64_t patch_size = 16;
  float layer_norm_eps = 1e-6f;
  int64_t mm_tokens_per_image = 256;  // top level of config.json

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t patches_per_side() const { return image_size / patch_size; }
  int64_t num_patches() const { return patches_per_side() * patches_per_side(); }
  int64_t tokens_per_side() const;  // sqrt(mm_tokens_per_image)
  int64_t pool_kernel() const { return patches_per_side() / tokens_per_side(); }
  int64_t patch_features() const { return num_channels * patch_size * patch_size; }
};

// Parses config.json text (`file` names it in messages). Errors name the field and the value.
StatusOr<SiglipConfig> ParseSiglipConfig(std::string_view json_text, const std::string& file);
// Reads <dir>/config.json.
StatusOr<SiglipConfig> LoadSiglipConfig(const std::string& dir);

}  // namespace tessera::vision
