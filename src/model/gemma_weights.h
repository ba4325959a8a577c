// Views of a Gemma text decoder's weights. Matrices stay in the checkpoint's storage (usually a
// memory map) in their stored dtype; small vectors (norm weights) are copied to f32 once.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/linear.h"

namespace tessera::model {

struct LayerWeights {
  ops::WeightView q_proj;  // [q_heads * head_dim, hidden]
  ops::WeightView k_proj;  // [kv_heads * head_dim, hidden]   (absent on KV-shared layers)
  ops::WeightView v_proj;  // [kv_heads * head_dim, hidden]   (absent with attention_k_eq_v)
  ops::WeightView o_proj;  // [hidden, q_heads * head_dim]
  ops::WeightView gate, up;  // [intermediate, hidden]
  ops::WeightView down;      // [hidden, intermediate]
  const float* q_norm = nullptr;  // [head_dim] f32
  const float* k_norm = nullptr;  // [head_dim] f32 (null on KV-shared layers)
  const float* input_norm = nullptr, *post_attn_norm = nullptr;  // [hidden] f32
  const float* pre_ffw_norm = nullptr, *post_ffw_norm = nullptr;  // [hidden] f32
  float layer_scalar = 1.0f;      // Gemma 4 per-layer output scale
  ops::WeightView ple_gate;       // [ple_dim, hidden]  (Gemma 4 PLE)
  ops::WeightView ple_proj;       // [hidden, ple_dim]
  const float* ple_post_norm = nullptr;  // [hidden] f32
  // Gemma 4 mixture of experts (GemmaArch::experts > 0; model/moe.h, docs/moe.md). E = experts,
  // I = expert_intermediate. The checkpoint stacks the experts: gate_up_proj [E, 2I, hidden] (gate
  // rows, then up rows) and down_proj [E, hidden, I]; each expert's slices are views of their own.
  ops::WeightView router;                 // [E, hidden] router.proj
  const float* router_scale = nullptr;    // [hidden] f32 router.scale
  const float* expert_scale = nullptr;    // [E] f32 router.per_expert_scale
  std::vector<ops::WeightView> expert_gate, expert_up;  // E x [I, hidden]
  std::vector<ops::WeightView> expert_down;             // E x [hidden, I]
  const float* post_ffw_norm_1 = nullptr;  // [hidden] f32 (the dense MLP branch's output)
  const float* pre_ffw_norm_2 = nullptr;   // [hidden] f32 (the experts' input)
  const float* post_ffw_norm_2 = nullptr;  // [hidden] f32 (the experts' summed output)
};

struct GemmaWeights {
  ops::WeightView embed;    // [vocab, hidden] (pairs set only when tied and packed: looked up there)
  ops::WeightView lm_head;  // [vocab, hidden] (the embedding when tied)
  float embed_scale = 1.0f; // sqrt(hidden) rounded to the embedding dtype
  const float* final_norm = nullptr;  // [hidden] f32
  ops::WeightView ple_embed;       // [ple_vocab, layers * ple_dim]
  ops::WeightView ple_model_proj;  // [layers * ple_dim, hidden]
  const float* ple_proj_norm = nullptr;  // [ple_dim] f32
  float ple_embed_scale = 1.0f;    // sqrt(ple_dim) rounded to the PLE embedding dtype
  std::vector<LayerWeights> layers;
  std::vector<AlignedBuffer> owned;  // storage of the f32 vectors above

  // Whether the Linear matrices were repacked at load into the panels the GEMM reads
  // (WeightLoadOptions::pack_panels_for), read off the LM head: the loader's rule (stored dtype x
  // precision) is the same for every matrix, so where they share a dtype all are or none is.
  bool repacked() const { return lm_head.panels != nullptr || lm_head.pairs != nullptr; }
};

}  // namespace tessera::model
