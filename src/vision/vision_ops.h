// Small row-wise ops and the attention call shared by the vision encoders, all f32. Kept apart
// from the decoder's ops (src/ops/elementwise.h) because only the vision towers need biases,
// LayerNorm and bidirectional per-image attention.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/status.h"
#include "tessera/thread_pool.h"

namespace tessera::vision {

// y[r] = (x[r] - mean) / sqrt(var + eps) * w + b for n rows of width d (biased variance, as
// torch.nn.LayerNorm). x and y may alias. Rows are split over `pool` (may be null).
void LayerNorm(const float* x, const float* w, const float* b, float eps, int64_t n, int64_t d, float* y,
               ThreadPool* pool);
// The same, one row at a time with double sums: the reference the tests compare LayerNorm against.
void LayerNormReference(const float* x, const float* w, const float* b, float eps, int64_t n, int64_t d, float* y);

// y[r] += b for n rows of width d (b may be null: no-op).
void AddBias(float* y, const float* b, int64_t n, int64_t d, ThreadPool* pool);
// y[r] = y[r] + b + residual[r] for n rows of width d (b may be null). y may not alias residual
// unless they are the same buffer.
void AddBiasResidual(float* y, const float* b, const float* residual, int64_t n, int64_t d, ThreadPool* pool);

// y[r] = x[r] rounded to bf16 (nearest, ties to even) for n rows of width d.
void RoundToBf16(const float* x, int64_t n, int64_t d, uint16_t* y, ThreadPool* pool);

// Attention at precision bf16 over K and V rounded to bf16 (k16, v16: same layout as p's f32 views):
// what a tower run in bf16 computes, q and the softmax weights rounded too (tessera/attention.h),
// on the bf16 kernels (AMX tiles where the CPU has them). Null pointers: only the shapes, for sizing.
void UseBf16KeysValues(AttentionParams& p, const uint16_t* k16, const uint16_t* v16);

// Self-attention of `images` independent sequences of `seq` tokens each, every token attending to
// every valid token of its own sequence (no causality, no window). q, k, v and out are
// token-major [images * seq, heads * head_dim] f32 (the Linear outputs, no transposes).
struct BidirectionalAttention {
  int64_t images = 0, seq = 0, heads = 0, head_dim = 0;
  float scale = 1.0f;
  // [images] key rows [0, valid[i]) of sequence i are real; the rest are padding (invalid keys;
  // their query rows still get an output, which callers drop). Null: every row is valid.
  const int32_t* valid = nullptr;
  // [images * seq] scratch the call fills with positions 0..seq-1 per sequence (the mask's q_pos
  // and k_pos; only the key validity and the absence of causality matter here).
  int32_t* positions = nullptr;
  // [2, images * seq, heads * head_dim] scratch for K and V rounded to bf16: attention then runs
  // at precision bf16 (UseBf16KeysValues). Null: f32.
  uint16_t* kv_bf16 = nullptr;

  AttentionParams Params(const float* q, const float* k, const float* v, float* out) const;
  // Arena bytes Run needs with `num_threads` threads (the tiled kernel: no [seq, seq] buffer).
  size_t ScratchBytes(int num_threads) const;
  // Runs the dispatcher's choice; scratch must hold ScratchBytes (it is reset first).
  Status Run(const float* q, const float* k, const float* v, float* out, ThreadPool* pool, Arena& scratch) const;
};

}  // namespace tessera::vision
