// Row-wise ops of the Gemma layer, all f32: RMSNorm, rotate-half RoPE, GeGLU (tanh GELU),
// soft-capping. Each computes in f32 exactly as transformers' float32 path does.
#pragma once

#include <cstdint>

#include "tessera/thread_pool.h"

namespace tessera::ops {

// y[r] = x[r] * (mean(x[r]^2) + eps)^-1/2 * (offset + w), for n rows of width d.
// w may be null (weightless norm: factor 1). offset is 1 for Gemma 3 ((1 + w)), 0 for Gemma 4.
// x and y may alias. Row strides in elements.
void RmsNorm(const float* x, int64_t x_stride, const float* w, float offset, float eps, int64_t n, int64_t d, float* y,
             int64_t y_stride);

// Rotate-half RoPE in place on `heads` vectors of width d per token (d even), token t at
// position pos[t]: for i < d/2, (x_i, x_{i+d/2}) rotated by angle pos * inv_freq[i].
// x: [n, heads, d] with token stride x_stride and head stride head_stride (elements).
void Rope(float* x, int64_t n, int64_t heads, int64_t d, int64_t x_stride, int64_t head_stride, const int32_t* pos,
          const float* inv_freq /* [d/2] */, float attention_scaling);

// x[i] = gelu_tanh(x[i]) for n elements (vectorized, tanh from exp; split across `pool`).
void GeluTanh(float* x, int64_t n, ThreadPool* pool = nullptr);

// out[i] = gelu_tanh(gate[i]) * up[i] for n elements (may alias gate).
void GeGlu(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool = nullptr);

// x = c * tanh(x / c) for n elements (the final logit soft cap), split over the pool's threads.
void SoftCap(float* x, int64_t n, float cap, ThreadPool* pool = nullptr);

}  // namespace tessera::ops
