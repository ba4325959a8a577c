// One Gemma4VisionEncoderLayer over the valid patches of a batch of images: RMSNorm sandwich around
// bidirectional attention (q/k/v norms, axial rope, GQA) and the gated tanh-GELU MLP, with
// Gemma4ClippableLinear's clamps where the checkpoint uses them.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/linear.h"
#include "tessera/precision.h"
#include "tessera/status.h"
#include "tessera/thread_pool.h"
#include "vision/gemma4_vision_config.h"

namespace tessera::vision {

// Gemma4ClippableLinear: a bias-free Linear whose input and output are clamped when `clip`.
struct ClippedLinear {
  ops::WeightView w;
  bool clip = false;
  float in_min = -std::numeric_limits<float>::infinity(), in_max = std::numeric_limits<float>::infinity();
  float out_min = -std::numeric_limits<float>::infinity(), out_max = std::numeric_limits<float>::infinity();
};

struct Gemma4VisionLayerWeights {
  ClippedLinear q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;
  std::vector<float> input_ln, post_attention_ln, pre_feedforward_ln, post_feedforward_ln;  // [hidden]
  std::vector<float> q_norm, k_norm;                                                       // [head_dim]
};

// One image's rows in the token-major activations.
struct ImageRows {
  int64_t row0 = 0, rows = 0;
};

// Activations for `tokens` rows, carved from one buffer per Encode call (no per-op allocation).
struct Gemma4LayerScratch {
  float *x = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *gate = nullptr, *up = nullptr;
  float* clip = nullptr;         // [tokens, widest Linear input]: a clamped copy of a Linear's input
  uint32_t* x_pairs = nullptr;   // precision bf16's GEMM scratch (tessera/gemm.h), or null
  // [2, tokens, hkv, head_dim]: K and V rounded to bf16 for attention at precision bf16 (at matmul
  // precision bf16, as the tower computes in transformers at bf16), or null: f32.
  uint16_t* kv_bf16 = nullptr;
  const int32_t* xpos = nullptr;  // [tokens] patch x / y
  const int32_t* ypos = nullptr;
  const int32_t* iota = nullptr;  // 0..(longest image rows - 1)
  Arena* attn_arena = nullptr;
};

// Floats of each Gemma4LayerScratch buffer for `tokens` rows (x also serves the patch embedder:
// its pixels and two position-table rows).
struct Gemma4LayerSizes {
  int64_t x, q, kv, gate, clip;
  static Gemma4LayerSizes For(const Gemma4VisionConfig& c, int64_t tokens);
};

// h [tokens, hidden] is updated in place (the residual stream).
Status RunGemma4VisionLayer(const Gemma4VisionConfig& c, const Gemma4VisionLayerWeights& w,
                            const std::vector<float>& inv_freq, const std::vector<ImageRows>& images, int64_t tokens,
                            ops::MatmulPrecision precision, const Gemma4LayerScratch& s, float* h, ThreadPool& pool);

// A Linear that applies ClippedLinear's clamps (x is left untouched; `clip` holds the clamped copy).
void ClippedLinearForward(const ClippedLinear& l, const float* x, int64_t n, float* y, float* clip,
                          ops::MatmulPrecision precision, uint32_t* x_pairs, ThreadPool& pool);

}  // namespace tessera::vision
