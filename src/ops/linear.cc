#include "ops/linear.h"

#include <algorithm>
#include <vector>

#include "tessera/check.h"

namespace tessera::ops {
namespace {

constexpr int64_t kRowsPerItem = 16;  // output rows per work item
constexpr int64_t kChunk = 512;       // input elements decoded at a time (stack staging)

inline float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int u = 0; u < 8; ++u) acc[u] += a[d + u] * b[d + u];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; d < n; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace

void Linear(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool* pool) {
  const int64_t items = (w.out + kRowsPerItem - 1) / kRowsPerItem;
  const size_t es = DTypeSize(w.dtype);
  auto run = [&](int64_t item, int) {
    const int64_t o0 = item * kRowsPerItem, o1 = std::min(w.out, o0 + kRowsPerItem);
    alignas(64) float row[kChunk];
    for (int64_t o = o0; o < o1; ++o) {
      const char* wrow = static_cast<const char*>(w.data) + o * w.in * es;
      if (w.dtype == DType::kF32) {
        const float* wf = reinterpret_cast<const float*>(wrow);
        for (int64_t t = 0; t < n; ++t) y[t * y_stride + o] = Dot(wf, x + t * x_stride, w.in);
        continue;
      }
      for (int64_t t = 0; t < n; ++t) y[t * y_stride + o] = 0.0f;
      for (int64_t c = 0; c < w.in; c += kChunk) {
        const int64_t m = std::min(kChunk, w.in - c);
        DecodeToF32(w.dtype, wrow + c * es, row, m);
        for (int64_t t = 0; t < n; ++t) y[t * y_stride + o] += Dot(row, x + t * x_stride + c, m);
      }
    }
  };
  if (pool) {
    pool->ParallelFor(items, run);
  } else {
    for (int64_t i = 0; i < items; ++i) run(i, 0);
  }
}

void LinearReference(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride) {
  std::vector<float> row(w.in);
  const size_t es = DTypeSize(w.dtype);
  for (int64_t o = 0; o < w.out; ++o) {
    DecodeToF32(w.dtype, static_cast<const char*>(w.data) + o * w.in * es, row.data(), w.in);
    for (int64_t t = 0; t < n; ++t) {
      double s = 0;
      for (int64_t i = 0; i < w.in; ++i) s += static_cast<double>(row[i]) * x[t * x_stride + i];
      y[t * y_stride + o] = static_cast<float>(s);
    }
  }
}

}  // namespace tessera::ops
