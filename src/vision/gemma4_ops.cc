#include "vision/gemma4_ops.h"

#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"

namespace tessera::vision {
namespace {

constexpr int64_t kRowsPerItem = 32;  // rows one pool item normalizes

template <typename Fn>
void ForRowChunks(int64_t n, ThreadPool& pool, const Fn& fn) {
  const int64_t items = (n + kRowsPerItem - 1) / kRowsPerItem;
  auto run = [&](int64_t item, int) {
    const int64_t r0 = item * kRowsPerItem;
    fn(r0, std::min(kRowsPerItem, n - r0));
  };
  if (items > 1) {
    pool.ParallelFor(items, run);
  } else if (items == 1) {
    run(0, 0);
  }
}

}  // namespace

void RmsNormRows(const float* x, int64_t x_stride, const float* w, float eps, int64_t n, int64_t d, float* y,
                 int64_t y_stride, ThreadPool& pool) {
  ForRowChunks(n, pool, [&](int64_t r0, int64_t rows) {
    ops::RmsNorm(x + r0 * x_stride, x_stride, w, 0.0f, eps, rows, d, y + r0 * y_stride, y_stride);
  });
}

void LayerNormRows(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps, float* y,
                   ThreadPool& pool) {
  ForRowChunks(n, pool, [&](int64_t r0, int64_t rows) {
    for (int64_t r = r0; r < r0 + rows; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      double sum = 0.0;
      for (int64_t i = 0; i < d; ++i) sum += xr[i];
      const double mean = sum / static_cast<double>(d);
      double var = 0.0;
      for (int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const float m = static_cast<float>(mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(d) + eps));
      for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - m) * inv * w[i] + b[i];
    }
  });
}

std::vector<float> AxialInvFreq(int64_t head_dim, double theta) {
  const int64_t spatial = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(spatial / 2));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < spatial / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(spatial);
    inv[i] = 1.0f / std::pow(base, e);
  }
  return inv;
}

void AxialRope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* xpos, const int32_t* ypos,
               const float* inv_freq, ThreadPool& pool) {
  const int64_t half = head_dim / 2, stride = heads * head_dim;
  ForRowChunks(n, pool, [&](int64_t r0, int64_t rows) {
    float* xr = x + r0 * stride;
    ops::Rope(xr, rows, heads, half, stride, head_dim, xpos + r0, inv_freq, 1.0f);
    ops::Rope(xr + half, rows, heads, half, stride, head_dim, ypos + r0, inv_freq, 1.0f);
  });
}

void Clamp(float* x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], lo), hi);
}

AttentionParams ImageAttentionParams(const float* q, const float* k, const float* v, float* out, int64_t n,
                                     int64_t hq, int64_t hkv, int64_t d, const int32_t* iota,
                                     const int32_t* kv_valid) {
  AttentionParams p;
  p.q = {q, DType::kF32, 1, hq, n, d, n * hq * d, d, hq * d};
  p.k = {k, DType::kF32, 1, hkv, n, d, n * hkv * d, d, hkv * d};
  p.v = {v, DType::kF32, 1, hkv, n, d, n * hkv * d, d, hkv * d};
  p.out = {out, 1, hq, n, d, n * hq * d, d, hq * d};
  p.mask.q_pos = iota;
  p.mask.k_pos = iota;
  p.mask.kv_valid = kv_valid;
  p.mask.causal = false;
  p.scale = 1.0f;  // q_norm / k_norm already scale the scores (Gemma4VisionAttention.scaling)
  return p;
}

}  // namespace tessera::vision
