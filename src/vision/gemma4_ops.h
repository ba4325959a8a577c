// Row-wise pieces of the Gemma 4 vision tower and the unified embedder that the engine's ops lack,
// or that the tower runs over many more rows than decode does (split across the pool).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/attention.h"
#include "tessera/thread_pool.h"

namespace tessera::vision {

// Gemma4RMSNorm on n rows of width d: x * (mean(x^2) + eps)^-1/2 * w (w null: no scale). May alias.
void RmsNormRows(const float* x, int64_t x_stride, const float* w, float eps, int64_t n, int64_t d, float* y,
                 int64_t y_stride, ThreadPool& pool);

// torch.nn.LayerNorm on n contiguous rows of width d: (x - mean) / sqrt(var + eps) * w + b, with the
// biased variance. Statistics are accumulated in double. May alias.
void LayerNormRows(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y,
                   ThreadPool& pool);

// The head_dim / 4 inverse frequencies of the axial rope: 1 / theta^(2i / (head_dim / 2)), in f32
// as transformers computes them.
std::vector<float> AxialInvFreq(int64_t head_dim, double theta);

// Axial 2-D rope in place on x [n, heads, head_dim] (token-major, contiguous): the first half of
// each head is rotate-half roped by the patch's x position, the second half by its y position.
void AxialRope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* xpos, const int32_t* ypos,
               const float* inv_freq, ThreadPool& pool);

// x[i] = min(max(x[i], lo), hi) (torch.clamp).
void Clamp(float* x, int64_t n, float lo, float hi);

// Bidirectional attention over one image's n patches, all of them valid keys: q/out [n, hq, d] and
// k/v [n, hkv, d] token-major. `iota` holds 0..n-1 (the patches' sequence positions; with no
// window and no causality they only identify keys) and `kv_valid` points at n.
AttentionParams ImageAttentionParams(const float* q, const float* k, const float* v, float* out, int64_t n,
                                     int64_t hq, int64_t hkv, int64_t d, const int32_t* iota,
                                     const int32_t* kv_valid);

}  // namespace tessera::vision
