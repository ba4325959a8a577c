// DrafterConfig: the typed, validated config.json of a Gemma 4 assistant drafter (model_type
// "gemma4_assistant", transformers Gemma4AssistantForCausalLM; docs/speculative.md). The root
// holds the assistant's own fields; "text_config" is a gemma4_text config parsed by
// ParseModelConfig, except that every layer is KV-shared (it reads the main model's K/V).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "model/config.h"
#include "tessera/status.h"

namespace tessera::model {

struct DrafterConfig {
  // text_config, parsed as a gemma4_text config with num_kv_shared_layers 0 (so every layer has
  // its own geometry); the drafter marks all of its layers KV-shared itself.
  ModelConfig text;
  int64_t backbone_hidden_size = 0;  // backbone_hidden_size (default 1536): the main model's hidden size
  // use_ordered_embeddings (default false): the centroid-masked LM head (docs/speculative.md): the
  // vocabulary is cut into num_centroids clusters of vocab / num_centroids tokens (the checkpoint's
  // token_ordering lists them), and a step scores only the tokens of its centroid_intermediate_top_k
  // best clusters.
  bool ordered_embeddings = false;
  int64_t num_centroids = 2048;   // num_centroids; must divide the vocabulary
  int64_t centroid_top_k = 32;    // centroid_intermediate_top_k, in [1, num_centroids]
};

// Parses config.json text of a gemma4_assistant checkpoint. Never throws.
StatusOr<DrafterConfig> ParseDrafterConfig(std::string_view json_text);
// Reads `path` (a config.json, or a directory containing one) and parses it.
StatusOr<DrafterConfig> LoadDrafterConfig(const std::string& path);

}  // namespace tessera::model
