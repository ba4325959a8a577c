// The Gemma 4 mixture-of-experts block (docs/moe.md): a router on the layer's pre-MLP residual
// picks top_k of the layer's experts per token; their GeGLU MLPs run on the residual normed by
// pre_feedforward_layernorm_2 and are summed with the router's weights, then normed by
// post_feedforward_layernorm_2. The fast path groups the step's tokens by expert (one Linear per
// chosen expert over its tokens), so decode reads only the chosen experts' weights.
#pragma once

#include <cstdint>

#include "model/gemma_arch.h"
#include "model/gemma_weights.h"
#include "tessera/linear.h"
#include "tessera/thread_pool.h"

namespace tessera::model {

struct MoeShape {
  int64_t hidden = 0, experts = 0, top_k = 0, inter = 0;  // inter: each expert's MLP width
  float eps = 1e-6f;
  float norm_offset = 0.0f;  // of the block's two norms (Gemma 4: 0)
};

// The block's shape from the architecture (experts 0: no MoE block).
MoeShape MoeShapeOf(const GemmaArch& arch);

// Views into the forward pass's scratch (Activations::moe, carved by Carve), for n tokens at most.
struct MoeScratch {
  float* normed = nullptr;    // [n, hidden]  router input, then the experts' input
  float* scores = nullptr;    // [n, experts] router logits, then probabilities
  int32_t* choice = nullptr;  // [n, top_k]   chosen experts, by descending probability
  float* weight = nullptr;    // [n, top_k]   their weights
  int32_t* order = nullptr;   // [n * top_k]  (token * top_k + slot), grouped by expert, tokens ascending
  int32_t* start = nullptr;   // [2 * (experts + 1)] where each expert's group starts in `order`; cursors
  // [rows, ...] with rows = ExpertRows(n): one expert's tokens gathered (prefill), or every chosen
  // expert's (n <= kBatchedTokens, in `order`), then their MLPs' intermediates and outputs.
  float* rows = nullptr;      // [rows, hidden]
  float* gate = nullptr;      // [rows, inter]
  float* up = nullptr;        // [rows, inter]
  float* out = nullptr;       // [rows, hidden]
  float* result = nullptr;    // [n, hidden]  for the caller: where the block's output may go
  uint32_t* x_pairs = nullptr;  // the GEMM's bf16 scratch (ops/gemm.h), or null

  // Up to this many tokens, all chosen experts run at once (decode, verification, small batches).
  static constexpr int64_t kBatchedTokens = 8;
  static int64_t ExpertRows(const MoeShape& s, int64_t n);
  // Floats (4-byte words) Carve needs for n tokens.
  static int64_t Words(const MoeShape& s, int64_t n);
  // Points the views into `base` (64-byte aligned, Words(s, n) words).
  static MoeScratch Carve(const MoeShape& s, int64_t n, float* base);
};

// The selection rule for one token: the top_k largest of probs[0, experts), ties to the lower
// expert index, in descending order; weights = their probabilities over their sum, times
// expert_scale[expert].
void SelectExperts(const float* probs, int64_t experts, int64_t top_k, const float* expert_scale, int32_t* choice,
                   float* weight);

// out [n, hidden] (row stride hidden) = the block's output for the residual h [n, hidden].
// Allocation-free; `out` must not alias h or the scratch.
// rows_as_steps: each token's result is the bits it gets alone (ops::Linear's rows_as_steps).
void MoeForward(const LayerWeights& w, const MoeShape& s, const float* h, int64_t n, ops::MatmulPrecision mp,
                bool rows_as_steps, ThreadPool* pool, const MoeScratch& scratch, float* out);

// The executable spec: token by token, double accumulation, ops::LinearReference for every matrix,
// the selection by a stable sort. `choice` / `weight` ([n, top_k], optional) receive its routing.
void MoeReference(const LayerWeights& w, const MoeShape& s, const float* h, int64_t n, ops::MatmulPrecision mp,
                  float* out, int32_t* choice = nullptr, float* weight = nullptr);

}  // namespace tessera::model
