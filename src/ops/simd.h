// Vector primitives behind the attention and matmul kernels, chosen once at run time for the CPU
// (AVX-512, AVX2+FMA+F16C, or portable C++). bf16/f16 operands are widened in registers, so K/V
// and weights are read once in their stored dtype. Each implementation is tested against double
// references (tests/simd_test.cc); results differ between implementations only in f32 rounding.
#pragma once

#include <cstdint>

#include "tessera/dtype.h"

namespace tessera::ops {

struct SimdKernels {
  const char* name;
  // sum_i a[i] * b[i]; b stored as f32 / bf16 / f16 bits.
  float (*dot_f32)(const float* a, const float* b, int64_t n);
  float (*dot_bf16)(const float* a, const uint16_t* b, int64_t n);
  float (*dot_f16)(const float* a, const uint16_t* b, int64_t n);
  // y[i] += a * x[i]; x stored as f32 / bf16 / f16 bits.
  void (*axpy_f32)(float* y, float a, const float* x, int64_t n);
  void (*axpy_bf16)(float* y, float a, const uint16_t* x, int64_t n);
  void (*axpy_f16)(float* y, float a, const uint16_t* x, int64_t n);
  // y[i] *= a.
  void (*scale)(float* y, float a, int64_t n);
  // Four rows of b against one a (each a element loaded once; decode GEMV):
  // out[r] = sum_i a[i] * b[r * b_stride + i], r < 4.
  void (*dot_rows4_f32)(const float* a, const float* b, int64_t b_stride, int64_t n, float* out);
  void (*dot_rows4_bf16)(const float* a, const uint16_t* b, int64_t b_stride, int64_t n, float* out);
  void (*dot_rows4_f16)(const float* a, const uint16_t* b, int64_t b_stride, int64_t n, float* out);
  // Two f32 rows against one b row (each b element loaded and widened once; decode attention
  // scores for KV groups of two query heads): out[0] = sum_i a0[i] b[i], out[1] = sum_i a1[i] b[i].
  void (*dot2_f32)(const float* a0, const float* a1, const float* b, int64_t n, float* out);
  void (*dot2_bf16)(const float* a0, const float* a1, const uint16_t* b, int64_t n, float* out);
  void (*dot2_f16)(const float* a0, const float* a1, const uint16_t* b, int64_t n, float* out);
  // y[i] += w[0] x[0][i] + w[1] x[1][i] + w[2] x[2][i] + w[3] x[3][i] (y loaded and stored once).
  void (*axpy4_f32)(float* y, const float* w, const void* const* x, int64_t n);
  void (*axpy4_bf16)(float* y, const float* w, const void* const* x, int64_t n);
  void (*axpy4_f16)(float* y, const float* w, const void* const* x, int64_t n);
  // GEMM micro-tile (ops/gemm.cc): for r < mr, j < nr
  //   c[r * c_stride + j] (+)= sum_{k < kc} a[r][k] * bp[k * 16 + j]
  // a: mr (<= 6) row pointers (rows >= mr are neither read nor computed); bp: a 64-byte aligned packed
  // [kc][16] f32 weight panel; accumulate: add to c instead of overwriting it. Each c element is
  // one FMA chain in k order, so a result never depends on mr, nr or the batch it came in.
  // prefetch: prefetch_lines 64-byte lines from there, spread over the k steps (the GEMM's next
  // weight block; 0 lines: none). A hint: the AVX2 tile issues it, the others ignore it.
  void (*gemm_tile)(const float* const* a, const float* bp, int64_t kc, float* c, int64_t c_stride, int mr, int nr,
                    bool accumulate, const void* prefetch, int64_t prefetch_lines);
  // The same tile reading B in place: B[k][j] = widen(b[k * ldb + j]) (b stored as `dtype`), only
  // j < nr <= 16 read. Rows >= mr are neither computed nor read. Each output
  // is the same FMA chain as gemm_tile's. Used for P.V, where V rows are already [key][dim].
  void (*gemm_tile_b)(DType dtype, const float* const* a, const void* b, int64_t ldb, int64_t kc, float* c,
                      int64_t c_stride, int mr, int nr, bool accumulate);
  // Packs rows into 16-column panels without transposing: for p < ceil(cols / 16), t < rows,
  // j < 16: dst[(p * rows + t) * 16 + j] = widen(src[t * src_stride + p * 16 + j]), 0 past cols.
  // (V tiles for P.V on gemm_tile.) dst 64-byte aligned.
  void (*pack_rows16)(DType dtype, const void* src, int64_t src_stride, int64_t rows, int64_t cols, float* dst);
  // max(s[0, n)) with NaNs skipped (as std::max(m, s[i]) skips them; -inf for n = 0), and
  // *bad |= 1 when some s[i] is NaN or +-inf: the softmax's max pass with its finiteness check.
  float (*row_max)(const float* s, int64_t n, uint32_t* bad);
  // Softmax numerator in place: s[i] = exp(s[i] - m) (-inf gives 0); returns the sum. Relative
  // error of each exp within a few f32 ulps of std::exp.
  float (*exp_sub_sum)(float* s, int64_t n, float m);
  // out[i] = gelu_tanh(g[i]) * (u ? u[i] : 1), 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))),
  // tanh from exp. out may alias g.
  void (*gelu_tanh_mul)(const float* g, const float* u, int64_t n, float* out);
  // Packs one GEMM weight panel: dst[k * 16 + j] = widen(src[j * src_stride + k]) for j < rows,
  // 0 for rows <= j < 16, k < kc. src is stored as `dtype` (f32, bf16 or f16); dst 64-byte aligned.
  void (*pack_panel16)(DType dtype, const void* src, int64_t src_stride, int rows, int64_t kc, float* dst);
  // x[i] = cap tanh(x[i] / cap) in place (the final logit soft cap), within a few f32 ulps of
  // std::tanh for every argument (NaN stays NaN); each element's result does not depend on n.
  void (*soft_cap)(float* x, int64_t n, float cap);
  // out[i] = F32ToBf16(x[i]) / Bf16ToF32(x[i]): precision bf16's x for the f32 tiles. Integer steps,
  // so every table gives the same bits; the plain loops compiled for each ISA (bf16_round.inc).
  void (*round_bf16)(const float* x, int64_t n, uint16_t* out);
  void (*widen_bf16)(const uint16_t* x, int64_t n, float* out);

  // Dispatch on the stored dtype of b / x.
  float Dot(DType dtype, const float* a, const void* b, int64_t n) const {
    if (dtype == DType::kF32) return dot_f32(a, static_cast<const float*>(b), n);
    return dtype == DType::kBF16 ? dot_bf16(a, static_cast<const uint16_t*>(b), n) : dot_f16(a, static_cast<const uint16_t*>(b), n);
  }
  void Axpy(DType dtype, float* y, float a, const void* x, int64_t n) const {
    if (dtype == DType::kF32) return axpy_f32(y, a, static_cast<const float*>(x), n);
    if (dtype == DType::kBF16) return axpy_bf16(y, a, static_cast<const uint16_t*>(x), n);
    axpy_f16(y, a, static_cast<const uint16_t*>(x), n);
  }
  void DotRows4(DType dtype, const float* a, const void* b, int64_t b_stride, int64_t n, float* out) const {
    if (dtype == DType::kF32) return dot_rows4_f32(a, static_cast<const float*>(b), b_stride, n, out);
    if (dtype == DType::kBF16) return dot_rows4_bf16(a, static_cast<const uint16_t*>(b), b_stride, n, out);
    dot_rows4_f16(a, static_cast<const uint16_t*>(b), b_stride, n, out);
  }
  void Dot2(DType dtype, const float* a0, const float* a1, const void* b, int64_t n, float* out) const {
    if (dtype == DType::kF32) return dot2_f32(a0, a1, static_cast<const float*>(b), n, out);
    if (dtype == DType::kBF16) return dot2_bf16(a0, a1, static_cast<const uint16_t*>(b), n, out);
    dot2_f16(a0, a1, static_cast<const uint16_t*>(b), n, out);
  }
  void Axpy4(DType dtype, float* y, const float* w, const void* const* x, int64_t n) const {
    if (dtype == DType::kF32) return axpy4_f32(y, w, x, n);
    if (dtype == DType::kBF16) return axpy4_bf16(y, w, x, n);
    axpy4_f16(y, w, x, n);
  }
};

// What a wide tile fetches while it computes: `lines` 64-byte lines from `next` and from each of
// the following panels - 1 panels `stride` floats on, spread over its k steps (into L1, or into L2
// when the call's lines pass half an L1, as gemm_tile's). The default fetches nothing.
struct TilePrefetch {
  const float* next = nullptr;
  int64_t stride = 0;
  int panels = 0;
  int64_t lines = 0;
};

// A wider f32 GEMM micro-tile for compute-bound tiles (attention's prefill, Linear on f32
// panels): for r < mr (<= 8), j < nr (<= 32)
//   c[r * c_stride + j] (+)= sum_{k < kc} a[r][k] * bp[(j / 16) * panel_stride + k * 16 + j % 16]
// i.e. two 64-byte aligned [kc][16] panels side by side (the second is read only when nr > 16).
// Each c element is the same FMA chain as gemm_tile's, so results equal gemm_tile's bit for bit.
using GemmTileWideFn = void (*)(const float* const* a, const float* bp, int64_t panel_stride, int64_t kc, float* c,
                                int64_t c_stride, int mr, int nr, bool accumulate, const TilePrefetch& prefetch);
inline constexpr int kWideTileRows = 8;

// The AVX-512 wide tile (16 zmm accumulators: the 6 x 16 tiles' 12 ymm ones leave half the rate of
// a CPU with two 512-bit FMA units unused) when the CPU has AVX-512 and TESSERA_SIMD does not ask
// for generic or avx2; else null, and callers use gemm_tile. Chosen apart from Simd(), like Bf16Dot()
// (bench/results/kernel_choices.md, "The wide f32 tile in prefill" and "... in Linear").
GemmTileWideFn GemmTileWide();
GemmTileWideFn GemmTileWideAvx512();

// dot_rows4 for several tokens' a rows against the same four b rows (f32 or bf16): for t < tokens,
// r < 4, out[t * 4 + r] = sum_i a[t * a_stride + i] * b[r * b_stride + i], each t's four sums the
// bits the table's dot_rows4 gives for that row alone, b widened once per pass of up to nine. Set (the
// AVX-512 form) when the CPU has AVX-512, TESSERA_SIMD does not ask for generic or avx2 and Simd()
// runs the AVX2 dot_rows4 whose bits it reproduces; else null, and callers loop over dot_rows4.
// For the row dot of verification steps (several tokens, each with decode's bits), which on the
// 8-lane kernel token by token became compute-bound from two tokens on (bench/results/speculative.md).
using DotRows4TokensFn = void (*)(DType dtype, const float* a, int64_t a_stride, int tokens, const void* b,
                                  int64_t b_stride, int64_t n, float* out);
DotRows4TokensFn DotRows4Tokens();
DotRows4TokensFn DotRows4TokensAvx512();

// The softmax numerator (exp_sub_sum) for prefill attention: the AVX-512 table's on AVX-512 CPUs
// unless TESSERA_SIMD asks for generic or avx2 (a CPU with two 512-bit FMA units runs it at twice
// the AVX2 rate: bench/results/kernel_choices.md, "AVX2 before AVX-512"), else Simd()'s.
using ExpSubSumFn = float (*)(float* s, int64_t n, float m);
ExpSubSumFn ExpSubSumWide();
// The GELU of GeGlu, chosen the same way; the AVX-512 table's gives the AVX2 table's bits.
using GeluTanhMulFn = void (*)(const float* g, const float* u, int64_t n, float* out);
GeluTanhMulFn GeluTanhMulWide();

// The implementation to use: AVX2 when the CPU has it (measured faster than AVX-512 here, see
// simd_dispatch.cc), else AVX-512, else generic. TESSERA_SIMD=generic|avx2|avx512 overrides it
// for testing and benchmarking; an unsupported request falls back to the default.
const SimdKernels& Simd();

// Every implementation this CPU can run, best first (for tests).
int AvailableSimd(const SimdKernels** out, int max);

// The implementations. The AVX ones are compiled with their ISA flags and must be called only on a
// CPU that has them (Simd() and AvailableSimd() check); the AVX-512 table reuses AVX2 entries.
const SimdKernels& SimdGeneric();
const SimdKernels* SimdAvx2();
const SimdKernels* SimdAvx512();

}  // namespace tessera::ops
