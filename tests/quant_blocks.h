// Random block-quantized weights and the per-weight magnitudes the quantized Linear tests' error
// bounds use, shared by the row-dot tests (linear_quant_test.cc) and the int8 GEMM's
// (quant_gemm_test.cc). Each test's header comment derives its bound from these.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/linear.h"
#include "tessera/quant.h"

namespace tessera::testing {

// A random f16 scale of magnitude in [2^lo, 2^hi), either sign unless `positive`.
inline uint16_t RandomScale(std::mt19937& rng, double lo, double hi, bool positive = false) {
  const double mag = std::exp2(std::uniform_real_distribution<double>(lo, hi)(rng));
  const bool neg = !positive && (rng() & 1);
  return F32ToF16(static_cast<float>(neg ? -mag : mag));
}

// `rows` rows of `in` values as random blocks of type t: every code byte random (every bit pattern
// a file can hold), f16 scales random in a sane range.
inline std::vector<uint8_t> RandomBlocks(std::mt19937& rng, QuantType t, int64_t rows, int64_t in) {
  const int64_t bb = QuantBlockBytes(t), nblocks = rows * (in / QuantBlockElems(t));
  std::vector<uint8_t> data(nblocks * bb);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < nblocks; ++i) {
    uint8_t* blk = data.data() + i * bb;
    uint16_t d = RandomScale(rng, -12, -5);
    switch (t) {
      case QuantType::kQ4_K:
      case QuantType::kQ5_K: {  // d at 0, dmin at 2 (both >= 0 in files; the sign is exercised anyway)
        const uint16_t dmin = RandomScale(rng, -13, -6);
        std::memcpy(blk, &d, 2), std::memcpy(blk + 2, &dmin, 2);
        break;
      }
      case QuantType::kQ4_1:
      case QuantType::kQ5_1: {  // d at 0, the minimum m at 2 (either sign)
        const uint16_t m = RandomScale(rng, -10, -3);
        std::memcpy(blk, &d, 2), std::memcpy(blk + 2, &m, 2);
        break;
      }
      case QuantType::kQ6_K: std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2); break;
      default: std::memcpy(blk, &d, 2); break;  // Q4_0, Q5_0, Q8_0: d first
    }
  }
  return data;
}

// M_i for every weight of one row: |w_i| plus the offset of the integer decomposition the kernels
// use, counted twice (it is taken off through the activation sums): Q4_0 16|d|, Q5_0 32|d|, Q6_K
// 64|d sc|, Q4_K/Q5_K 2 * 63 |dmin|, Q4_1/Q5_1 2|m|, Q8_0 `q8_0_offset` |d| (0 where its codes are
// used as signed).
inline std::vector<double> Magnitudes(QuantType t, const uint8_t* row, int64_t in, double q8_0_offset = 0) {
  std::vector<float> w(in);
  DequantizeRow(t, row, w.data(), in);
  std::vector<double> m(in);
  const int64_t be = QuantBlockElems(t), bb = QuantBlockBytes(t);
  for (int64_t i = 0; i < in; ++i) {
    const uint8_t* blk = row + i / be * bb;
    uint16_t h;
    double extra = 0;
    switch (t) {
      case QuantType::kQ4_0: std::memcpy(&h, blk, 2), extra = 16 * std::fabs(F16ToF32(h)); break;
      case QuantType::kQ5_0: std::memcpy(&h, blk, 2), extra = 32 * std::fabs(F16ToF32(h)); break;
      case QuantType::kQ8_0: std::memcpy(&h, blk, 2), extra = q8_0_offset * std::fabs(F16ToF32(h)); break;
      case QuantType::kQ4_K:
      case QuantType::kQ5_K: std::memcpy(&h, blk + 2, 2), extra = 2 * 63 * std::fabs(F16ToF32(h)); break;
      case QuantType::kQ4_1:
      case QuantType::kQ5_1: std::memcpy(&h, blk + 2, 2), extra = 2 * std::fabs(F16ToF32(h)); break;
      case QuantType::kQ6_K: {
        const auto* b = reinterpret_cast<const BlockQ6_K*>(blk);
        extra = 64 * std::fabs(F16ToF32(b->d) * b->scales[i % 256 / 16]);
        break;
      }
      default: break;
    }
    m[i] = std::fabs(w[i]) + extra;
  }
  return m;
}

// One Linear problem: weights [out, in] of type t, n token rows x with row stride xs, output
// rows of stride ys (both wider than the data, so overruns show).
struct QuantProblem {
  QuantType t;
  int64_t n, in, out, xs, ys;
  std::vector<uint8_t> w;
  std::vector<float> x;
  ops::WeightView View() const {
    ops::WeightView v{w.data(), DType::kF32, out, in};
    v.quant = t;
    return v;
  }
  const uint8_t* Row(int64_t o) const { return w.data() + o * QuantRowBytes(t, in); }
};

// Normal activations with some blocks far larger than the rest and an all-zero block.
inline QuantProblem MakeQuantProblem(std::mt19937& rng, QuantType t, int64_t n, int64_t in, int64_t out) {
  QuantProblem p{t, n, in, out, in + 3, out + 2, RandomBlocks(rng, t, out, in), std::vector<float>(n * (in + 3))};
  std::normal_distribution<float> nd;
  for (float& v : p.x) v = nd(rng);
  for (int64_t i = 0; i < n * p.xs; i += 97) p.x[i] *= 50.0f;
  if (in >= 64) std::fill(p.x.begin() + 32, p.x.begin() + 64, 0.0f);
  return p;
}

}  // namespace tessera::testing
