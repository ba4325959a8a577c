// AVX2 + FMA + F16C implementation (compiled with those flags; only called when the CPU has
// them). Four 8-lane accumulators hide FMA latency. This file must not instantiate header inline
// functions or templates shared with other files: the linker could keep this ISA's copy for all.
#include <immintrin.h>

#include "ops/simd.h"

namespace tessera::ops {
namespace {

inline __m256 LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 LoadF16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 LoadF32(const float* p) { return _mm256_loadu_ps(p); }

inline float HSum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
float Dot(const float* a, const T* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), Load(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), Load(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), Load(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), Load(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), Load(b + i), s0);
  float s = HSum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += a[i] * Scalar(b[i]);
  return s;
}

template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void Axpy(float* y, float a, const T* x, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, Load(x + i), _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, Load(x + i + 8), _mm256_loadu_ps(y + i + 8)));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, Load(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * Scalar(x[i]);
}

inline float IdF32(float x) { return x; }
inline float Bf16(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
inline float F16(uint16_t x) { return _cvtsh_ss(x); }

void Scale(float* y, float a, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

// Four query rows against one key row: 4 accumulators x 2 chains, one key load per 4 FMAs.
template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void Dot4(const float* a, int64_t st, const T* b, int64_t n, float* out) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 k0 = Load(b + i), k1 = Load(b + i + 8);
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), k0, s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + st + i), k0, s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + 2 * st + i), k0, s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + 3 * st + i), k0, s3);
    t0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), k1, t0);
    t1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + st + i + 8), k1, t1);
    t2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + 2 * st + i + 8), k1, t2);
    t3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + 3 * st + i + 8), k1, t3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 k0 = Load(b + i);
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), k0, s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + st + i), k0, s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + 2 * st + i), k0, s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + 3 * st + i), k0, s3);
  }
  out[0] = HSum(_mm256_add_ps(s0, t0));
  out[1] = HSum(_mm256_add_ps(s1, t1));
  out[2] = HSum(_mm256_add_ps(s2, t2));
  out[3] = HSum(_mm256_add_ps(s3, t3));
  for (; i < n; ++i) {
    const float k = Scalar(b[i]);
    for (int r = 0; r < 4; ++r) out[r] += a[r * st + i] * k;
  }
}

template <typename T, __m256 (*Load)(const T*), float (*Scalar)(T)>
void Axpy4(float* y, const float* w, const void* const* xv, int64_t n) {
  const T* x0 = static_cast<const T*>(xv[0]);
  const T* x1 = static_cast<const T*>(xv[1]);
  const T* x2 = static_cast<const T*>(xv[2]);
  const T* x3 = static_cast<const T*>(xv[3]);
  const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]), w2 = _mm256_set1_ps(w[2]),
               w3 = _mm256_set1_ps(w[3]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 acc = _mm256_loadu_ps(y + i);
    acc = _mm256_fmadd_ps(w0, Load(x0 + i), acc);
    acc = _mm256_fmadd_ps(w1, Load(x1 + i), acc);
    acc = _mm256_fmadd_ps(w2, Load(x2 + i), acc);
    acc = _mm256_fmadd_ps(w3, Load(x3 + i), acc);
    _mm256_storeu_ps(y + i, acc);
  }
  for (; i < n; ++i) y[i] += w[0] * Scalar(x0[i]) + w[1] * Scalar(x1[i]) + w[2] * Scalar(x2[i]) + w[3] * Scalar(x3[i]);
}

}  // namespace

const SimdKernels* SimdAvx2() {
  static const SimdKernels k{"avx2",
                             Dot<float, LoadF32, IdF32>,
                             Dot<uint16_t, LoadBf16, Bf16>,
                             Dot<uint16_t, LoadF16, F16>,
                             Axpy<float, LoadF32, IdF32>,
                             Axpy<uint16_t, LoadBf16, Bf16>,
                             Axpy<uint16_t, LoadF16, F16>,
                             Scale,
                             Dot4<float, LoadF32, IdF32>,
                             Dot4<uint16_t, LoadBf16, Bf16>,
                             Dot4<uint16_t, LoadF16, F16>,
                             Axpy4<float, LoadF32, IdF32>,
                             Axpy4<uint16_t, LoadBf16, Bf16>,
                             Axpy4<uint16_t, LoadF16, F16>};
  return &k;
}

}  // namespace tessera::ops
