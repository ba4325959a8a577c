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

}  // namespace

const SimdKernels* SimdAvx2() {
  static const SimdKernels k{"avx2",
                             Dot<float, LoadF32, IdF32>,
                             Dot<uint16_t, LoadBf16, Bf16>,
                             Dot<uint16_t, LoadF16, F16>,
                             Axpy<float, LoadF32, IdF32>,
                             Axpy<uint16_t, LoadBf16, Bf16>,
                             Axpy<uint16_t, LoadF16, F16>,
                             Scale};
  return &k;
}

}  // namespace tessera::ops
