// The quantized dot kernels on AVX-512 VNNI (vpdpbusd: four unsigned x signed byte products added
// into each 32-bit lane in one instruction). Compiled with AVX-512 F/BW/VL/VNNI (+ AVX2, FMA, F16C);
// called only on CPUs with them.
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "ops/quant_act.h"
#include "ops/quant_dot.h"

namespace tessera::ops {
namespace {

inline __m256i Dot4(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline __m256i Dot4Scaled(__m256i u, __m256i s, int a, int b) {
  return _mm256_mullo_epi32(Dot4(u, s), _mm256_set_m128i(_mm_set1_epi32(b), _mm_set1_epi32(a)));
}

#include "ops/quant_dot_x86.inc"
#include "ops/quant_convert_x86.inc"

}  // namespace

const QuantDotKernels& QuantDotAvx512Kernels() {
  static const QuantDotKernels k{"avx512-vnni", DotRows, QuantizeAct, Dequantize};
  return k;
}

}  // namespace tessera::ops
