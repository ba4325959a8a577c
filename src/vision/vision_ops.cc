#include "vision/vision_ops.h"

#include <algorithm>
#include <cmath>

namespace tessera::vision {
namespace {

// Rows per parallel item: enough work per item to amortize the hand-off.
int64_t RowsPerItem(int64_t d) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)); }

template <typename Fn>
void ForRows(int64_t n, int64_t d, ThreadPool* pool, Fn fn) {
  const int64_t per = RowsPerItem(d), items = (n + per - 1) / per;
  auto item = [&](int64_t i, int) {
    const int64_t r0 = i * per, r1 = std::min(n, r0 + per);
    for (int64_t r = r0; r < r1; ++r) fn(r);
  };
  if (pool && items > 1) {
    pool->ParallelFor(items, item);
  } else {
    for (int64_t i = 0; i < items; ++i) item(i, 0);
  }
}

void LayerNormRow(const float* x, const float* w, const float* b, float eps, int64_t d, float* y) {
  // Two passes in double: the mean first, so the variance does not cancel for rows far from zero.
  double sum = 0.0;
  for (int64_t i = 0; i < d; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(d);
  double sq = 0.0;
  for (int64_t i = 0; i < d; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(d) + eps));
  const float m = static_cast<float>(mean);
  for (int64_t i = 0; i < d; ++i) y[i] = (x[i] - m) * inv * w[i] + b[i];
}

}  // namespace

void LayerNorm(const float* x, const float* w, const float* b, float eps, int64_t n, int64_t d, float* y,
               ThreadPool* pool) {
  ForRows(n, d, pool, [&](int64_t r) { LayerNormRow(x + r * d, w, b, eps, d, y + r * d); });
}

void LayerNormReference(const float* x, const float* w, const float* b, float eps, int64_t n, int64_t d, float* y) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * d;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < d; ++i) mean += xr[i];
    mean /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i)
      y[r * d + i] = static_cast<float>((xr[i] - mean) / std::sqrt(var + eps) * w[i] + b[i]);
  }
}

void AddBias(float* y, const float* b, int64_t n, int64_t d, ThreadPool* pool) {
  if (b == nullptr) return;
  ForRows(n, d, pool, [&](int64_t r) {
    float* yr = y + r * d;
    for (int64_t i = 0; i < d; ++i) yr[i] += b[i];
  });
}

void AddBiasResidual(float* y, const float* b, const float* residual, int64_t n, int64_t d, ThreadPool* pool) {
  ForRows(n, d, pool, [&](int64_t r) {
    float* yr = y + r * d;
    const float* rr = residual + r * d;
    // torch adds the bias inside the Linear, then the residual: the same order here.
    if (b) {
      for (int64_t i = 0; i < d; ++i) yr[i] = rr[i] + (yr[i] + b[i]);
    } else {
      for (int64_t i = 0; i < d; ++i) yr[i] = rr[i] + yr[i];
    }
  });
}

void RoundToBf16(const float* x, int64_t n, int64_t d, uint16_t* y, ThreadPool* pool) {
  ForRows(n, d, pool, [&](int64_t r) { EncodeFromF32(DType::kBF16, x + r * d, y + r * d, static_cast<size_t>(d)); });
}

void UseBf16KeysValues(AttentionParams& p, const uint16_t* k16, const uint16_t* v16) {
  p.k.data = k16, p.k.dtype = DType::kBF16;
  p.v.data = v16, p.v.dtype = DType::kBF16;
  p.precision = AttentionPrecision::kBf16;
}

AttentionParams BidirectionalAttention::Params(const float* q, const float* k, const float* v, float* out) const {
  const int64_t width = heads * head_dim;
  // Token-major [images * seq, heads * head_dim] seen as [images, heads, seq, head_dim].
  auto view = [&](const float* data) {
    return HeadsView{data, DType::kF32, images, heads, seq, head_dim, seq * width, head_dim, width};
  };
  AttentionParams p;
  p.q = view(q);
  p.k = view(k);
  p.v = view(v);
  p.out = {out, images, heads, seq, head_dim, seq * width, head_dim, width};
  p.mask.q_pos = positions;
  p.mask.k_pos = positions;
  p.mask.kv_valid = valid;
  p.mask.causal = false;
  p.scale = scale;
  if (kv_bf16) UseBf16KeysValues(p, kv_bf16, kv_bf16 + images * seq * width);
  return p;
}

size_t BidirectionalAttention::ScratchBytes(int num_threads) const {
  return AttentionScratchBytes(Params(nullptr, nullptr, nullptr, nullptr), num_threads);
}

Status BidirectionalAttention::Run(const float* q, const float* k, const float* v, float* out, ThreadPool* pool,
                                   Arena& scratch) const {
  for (int64_t i = 0; i < images; ++i)
    for (int64_t s = 0; s < seq; ++s) positions[i * seq + s] = static_cast<int32_t>(s);
  scratch.Reset();
  if (kv_bf16) {
    const int64_t rows = images * seq, width = heads * head_dim;
    RoundToBf16(k, rows, width, kv_bf16, pool);
    RoundToBf16(v, rows, width, kv_bf16 + rows * width, pool);
  }
  AttentionContext ctx{pool, &scratch};
  return Attention(Params(q, k, v, out), ctx);
}

}  // namespace tessera::vision
