// A small Gemma decoder with random weights built in memory (no checkpoint), for runtime and
// model self-consistency tests.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "model/gemma_model.h"
#include "runtime/session.h"

namespace tessera::testing {

struct TinyModelOptions {
  bool gemma4 = true;        // Gemma 4 numerics (w norms, v_norm, scale 1, layer scalars, k_eq_v)
  bool ple = false;          // per-layer embeddings
  int64_t shared_layers = 0; // trailing KV-shared layers
  DType weight_dtype = DType::kF32;
  uint32_t seed = 1;
  int32_t image_token = 90;  // may be >= vocab (97), as Gemma 3 configs allow
};

// 6 layers (sliding, sliding, full, sliding, sliding, full), hidden 32, 4 query heads; sliding
// layers 2 KV heads x 16 with window 5, full layers 1 KV head x 32; vocab 97; image token 90.
std::unique_ptr<model::GemmaModel> MakeTinyModel(const TinyModelOptions& opt);

}  // namespace tessera::testing

namespace tessera::testing {

// A prompt of `before` text tokens (ids 0..80), an image block of `img` placeholders (token type 1,
// id 90) and `after` text tokens; the image rows, [img, hidden] normal draws, go to `embeds`.
Prompt MakeImagePrompt(std::mt19937& rng, int64_t before, int64_t img, int64_t after, std::vector<float>& embeds,
                       int64_t hidden);

// runtime::Generate's tokens per row (the shape the tests compare).
Status GenerateTokens(runtime::Session& s, const std::vector<Prompt>& prompts, int64_t max_new,
                      const SamplingParams& sampling, const std::vector<int32_t>& stop,
                      std::vector<std::vector<int32_t>>* out);

}  // namespace tessera::testing
