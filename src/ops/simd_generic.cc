// Portable implementation: independent partial sums so compilers vectorize without
// reassociation flags.
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/simd.h"
#include "tessera/dtype.h"

namespace tessera::ops {
namespace {

template <typename Load>
float DotT(const float* a, int64_t n, Load load) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) acc[u] += a[i + u] * load(i + u);
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * load(i);
  return s;
}

float DotF32(const float* a, const float* b, int64_t n) { return DotT(a, n, [b](int64_t i) { return b[i]; }); }
float DotBf16(const float* a, const uint16_t* b, int64_t n) {
  return DotT(a, n, [b](int64_t i) { return Bf16ToF32(b[i]); });
}
float DotF16(const float* a, const uint16_t* b, int64_t n) {
  return DotT(a, n, [b](int64_t i) { return F16ToF32(b[i]); });
}
void AxpyF32(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void AxpyBf16(float* y, float a, const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * Bf16ToF32(x[i]);
}
void AxpyF16(float* y, float a, const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * F16ToF32(x[i]);
}
void Scale(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

template <typename T, float (*Dt)(const float*, const T*, int64_t)>
void DotRows4(const float* a, const T* b, int64_t stride, int64_t n, float* out) {
  for (int r = 0; r < 4; ++r) out[r] = Dt(a, b + r * stride, n);
}

template <typename T, float (*Dt)(const float*, const T*, int64_t)>
void Dot2(const float* a0, const float* a1, const T* b, int64_t n, float* out) {
  out[0] = Dt(a0, b, n);
  out[1] = Dt(a1, b, n);
}

template <typename T, void (*Ax)(float*, float, const T*, int64_t)>
void Axpy4(float* y, const float* w, const void* const* x, int64_t n) {
  for (int j = 0; j < 4; ++j) Ax(y, w[j], static_cast<const T*>(x[j]), n);
}

void GemmTile(const float* const* a, const float* bp, int64_t kc, float* c, int64_t cs, int mr, int nr, bool acc,
              const void*, int64_t) {
  for (int r = 0; r < mr; ++r) {
    float t[16] = {};
    for (int64_t k = 0; k < kc; ++k)
      for (int j = 0; j < 16; ++j) t[j] = std::fma(a[r][k], bp[k * 16 + j], t[j]);
    for (int j = 0; j < nr; ++j) c[r * cs + j] = acc ? c[r * cs + j] + t[j] : t[j];
  }
}

void GemmTileB(DType dt, const float* const* a, const void* b, int64_t ldb, int64_t kc, float* c, int64_t cs, int mr,
               int nr, bool acc) {
  const size_t es = DTypeSize(dt);
  for (int r = 0; r < mr; ++r) {
    float t[16] = {};
    for (int64_t k = 0; k < kc; ++k) {
      float row[16];
      DecodeToF32(dt, static_cast<const char*>(b) + k * ldb * es, row, nr);
      for (int j = 0; j < nr; ++j) t[j] = std::fma(a[r][k], row[j], t[j]);
    }
    for (int j = 0; j < nr; ++j) c[r * cs + j] = acc ? c[r * cs + j] + t[j] : t[j];
  }
}

void PackRows16(DType dt, const void* src, int64_t st, int64_t rows, int64_t cols, float* dst) {
  const size_t es = DTypeSize(dt);
  for (int64_t p = 0; p * 16 < cols; ++p) {
    const int64_t w = cols - p * 16 < 16 ? cols - p * 16 : 16;
    for (int64_t t = 0; t < rows; ++t) {
      float* d = dst + (p * rows + t) * 16;
      DecodeToF32(dt, static_cast<const char*>(src) + (t * st + p * 16) * es, d, w);
      for (int64_t j = w; j < 16; ++j) d[j] = 0.0f;
    }
  }
}

float RowMax(const float* s, int64_t n, uint32_t* bad) {
  float m = -std::numeric_limits<float>::infinity();
  uint32_t flags = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, s + i, 4);
    flags |= (u & 0x7f800000u) == 0x7f800000u;  // NaN or +-inf: all exponent bits set
    m = m < s[i] ? s[i] : m;
  }
  *bad |= flags;
  return m;
}

float ExpSubSum(float* s, int64_t n, float m) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - m));
  return sum;
}

void GeluTanhMul(const float* g, const float* u, int64_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    const float gelu = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    out[i] = u ? gelu * u[i] : gelu;
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void PackPanel16(DType dt, const void* src, int64_t st, int rows, int64_t kc, float* dst) {
  const size_t es = DTypeSize(dt);
  float row[256];
  for (int j = 0; j < 16; ++j) {
    for (int64_t k0 = 0; k0 < kc; k0 += 256) {
      const int64_t m = kc - k0 < 256 ? kc - k0 : 256;
      if (j < rows) DecodeToF32(dt, static_cast<const char*>(src) + (j * st + k0) * es, row, m);
      for (int64_t k = 0; k < m; ++k) dst[(k0 + k) * 16 + j] = j < rows ? row[k] : 0.0f;
    }
  }
}

#include "ops/bf16_round.inc"

}  // namespace

const SimdKernels& SimdGeneric() {
  static const SimdKernels k{"generic",
                             DotF32,
                             DotBf16,
                             DotF16,
                             AxpyF32,
                             AxpyBf16,
                             AxpyF16,
                             Scale,
                             DotRows4<float, DotF32>,
                             DotRows4<uint16_t, DotBf16>,
                             DotRows4<uint16_t, DotF16>,
                             Dot2<float, DotF32>,
                             Dot2<uint16_t, DotBf16>,
                             Dot2<uint16_t, DotF16>,
                             Axpy4<float, AxpyF32>,
                             Axpy4<uint16_t, AxpyBf16>,
                             Axpy4<uint16_t, AxpyF16>,
                             GemmTile,
                             GemmTileB,
                             PackRows16,
                             RowMax,
                             ExpSubSum,
                             GeluTanhMul,
                             PackPanel16,
                             SoftCap,
                             RoundBf16Row,
                             WidenBf16Row};
  return k;
}

}  // namespace tessera::ops
