#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>

#include "ops/simd.h"

namespace tessera::ops {

void RmsNorm(const float* x, int64_t x_stride, const float* w, float offset, float eps, int64_t n, int64_t d, float* y,
             int64_t y_stride) {
  const SimdKernels& simd = Simd();
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    // f32 accumulation, as torch's pow(2).mean() in float32, in SIMD lanes (torch sums in lanes
    // too; one chain per element would put four cycles of latency on every value).
    const float ss = simd.dot_f32(xr, xr, d);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    if (w) {
      for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * (offset + w[i]);
    } else {
      for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv;
    }
  }
}

void Rope(float* x, int64_t n, int64_t heads, int64_t d, int64_t x_stride, int64_t head_stride, const int32_t* pos,
          const float* inv_freq, float attention_scaling) {
  constexpr int64_t kStep = 64;  // angles per pass: their cos and sin stay in registers and L1
  const int64_t half = d / 2;
  float c[kStep], s[kStep];
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i0 = 0; i0 < half; i0 += kStep) {
      const int64_t m = std::min(kStep, half - i0);
      for (int64_t i = 0; i < m; ++i) {
        // torch computes freqs = pos * inv_freq in f32, then cos/sin in f32.
        const float angle = static_cast<float>(pos[t]) * inv_freq[i0 + i];
        c[i] = std::cos(angle) * attention_scaling, s[i] = std::sin(angle) * attention_scaling;
      }
      for (int64_t h = 0; h < heads; ++h) {  // each head's pairs in vector lanes
        float* v = x + t * x_stride + h * head_stride + i0;
        for (int64_t i = 0; i < m; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * c[i] - b * s[i];
          v[i + half] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

namespace {
constexpr int64_t kElementwiseChunk = 16384;  // elements per work item (GeGlu, SoftCap)
}  // namespace

void GeGlu(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool) {
  const GeluTanhMulFn gelu_tanh_mul = GeluTanhMulWide();
  auto run = [&](int64_t item, int) {
    const int64_t i0 = item * kElementwiseChunk, m = std::min(kElementwiseChunk, n - i0);
    gelu_tanh_mul(gate + i0, up ? up + i0 : nullptr, m, out + i0);
  };
  const int64_t items = (n + kElementwiseChunk - 1) / kElementwiseChunk;
  if (pool && items > 1) {
    pool->ParallelFor(items, run);
  } else {
    for (int64_t i = 0; i < items; ++i) run(i, 0);
  }
}

void GeluTanh(float* x, int64_t n, ThreadPool* pool) { GeGlu(x, nullptr, n, x, pool); }

void SoftCap(float* x, int64_t n, float cap, ThreadPool* pool) {
  const SimdKernels& simd = Simd();
  // Chunks split the work only: an element's result does not depend on where its call starts or ends.
  auto run = [&](int64_t item, int) {
    const int64_t i0 = item * kElementwiseChunk;
    simd.soft_cap(x + i0, std::min(kElementwiseChunk, n - i0), cap);
  };
  const int64_t items = (n + kElementwiseChunk - 1) / kElementwiseChunk;
  if (pool && items > 1) {
    pool->ParallelFor(items, run);
  } else {
    for (int64_t i = 0; i < items; ++i) run(i, 0);
  }
}

}  // namespace tessera::ops
