// The constants of the SIMD exp(x) shared by the AVX2 table (simd_avx2.cc) and the AVX-512-BF16
// softmax step (bf16_dot_avx512.cc), so both compute the same function: x = n ln2 + r with
// n = round(x log2 e) and |r| <= ln2/2 (ln2 split in two so n * kLn2Hi is exact), e^r by its
// degree-7 Taylor polynomial (truncation error < 6e-9 relative), times 2^n built in the exponent
// bits. Inputs below kMin (and -inf) give 0; inputs are clamped at kMax; NaN gives NaN.
#pragma once

namespace tessera::ops::exp_poly {

inline constexpr float kMin = -87.3f, kMax = 88.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
// Taylor coefficients 1/k!, highest degree first: Horner's order.
inline constexpr float kCoeffs[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

}  // namespace tessera::ops::exp_poly
