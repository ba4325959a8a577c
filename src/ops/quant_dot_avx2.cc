// The quantized dot kernels on AVX2 (vpmaddubsw: unsigned x signed bytes into 16-bit pair sums,
// vpmaddwd into 32 bits). Compiled with AVX2 + FMA + F16C; called only on CPUs with them.
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "ops/quant_act.h"
#include "ops/quant_dot.h"

namespace tessera::ops {
namespace {

inline __m256i Dot4(__m256i u, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)); }
// The scale folds into the 16-to-32-bit step: pair sums times the scale, added in pairs.
inline __m256i Dot4Scaled(__m256i u, __m256i s, int a, int b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                           _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(b)), _mm_set1_epi16(static_cast<int16_t>(a))));
}

#include "ops/quant_dot_x86.inc"
#include "ops/quant_convert_x86.inc"

}  // namespace

const QuantDotKernels& QuantDotAvx2Kernels() {
  static const QuantDotKernels k{"avx2", DotRows, nullptr, QuantizeAct, Dequantize};
  return k;
}

}  // namespace tessera::ops
