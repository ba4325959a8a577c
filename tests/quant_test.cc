// The block formats of tessera/quant.h: sizes and names, round trips within each format's error
// bound, the exact blocks ggml's rules give for edge inputs, and non-finite scale detection.
// (Bit-exactness against gguf and llama.cpp themselves: python/tests/test_quant_formats.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/quant.h"

namespace tessera {
namespace {

constexpr QuantType kAll[] = {QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ8_0, QuantType::kQ4_K,
                              QuantType::kQ5_K, QuantType::kQ6_K, QuantType::kQ4_1, QuantType::kQ5_1};

std::vector<uint8_t> Quantize(QuantType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(static_cast<size_t>(QuantRowBytes(t, static_cast<int64_t>(x.size()))));
  QuantizeRow(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<float> Dequantize(QuantType t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  DequantizeRow(t, q.data(), y.data(), n);
  return y;
}

std::vector<float> Normal(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

TEST(QuantTest, BlockSizes) {
  const int64_t elems[] = {32, 32, 32, 256, 256, 256, 32, 32};
  const int64_t bytes[] = {18, 22, 34, 144, 176, 210, 20, 24};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(QuantBlockElems(kAll[i]), elems[i]) << QuantTypeName(kAll[i]);
    EXPECT_EQ(QuantBlockBytes(kAll[i]), bytes[i]) << QuantTypeName(kAll[i]);
    EXPECT_EQ(QuantRowBytes(kAll[i], 0), 0);
    EXPECT_EQ(QuantRowBytes(kAll[i], 7 * elems[i]), 7 * bytes[i]);
    EXPECT_EQ(QuantRowBytes(kAll[i], elems[i] + 1), -1);
    EXPECT_EQ(QuantRowBytes(kAll[i], -elems[i]), -1);
  }
  EXPECT_EQ(QuantBlockElems(QuantType::kNone), 0);
  EXPECT_EQ(QuantBlockBytes(QuantType::kNone), 0);
  EXPECT_EQ(QuantRowBytes(QuantType::kNone, 32), -1);
  EXPECT_EQ(QuantRowBytes(QuantType::kQ4_K, 32), -1);  // a 32-multiple is not a 256-multiple
}

TEST(QuantTest, NamesParseCaseInsensitively) {
  const char* names[] = {"q4_0", "q5_0", "q8_0", "q4_k", "q5_k", "q6_k", "q4_1", "q5_1"};
  for (int i = 0; i < 8; ++i) {
    EXPECT_STREQ(QuantTypeName(kAll[i]), names[i]);
    QuantType t = QuantType::kNone;
    ASSERT_TRUE(ParseQuantType(names[i], &t)) << names[i];
    EXPECT_EQ(t, kAll[i]);
  }
  QuantType t = QuantType::kNone;
  ASSERT_TRUE(ParseQuantType("Q4_K", &t));
  EXPECT_EQ(t, QuantType::kQ4_K);
  ASSERT_TRUE(ParseQuantType("Q8_0", &t));
  EXPECT_EQ(t, QuantType::kQ8_0);
  EXPECT_STREQ(QuantTypeName(QuantType::kNone), "none");
  for (const char* bad : {"none", "", "q4", "q4_0 ", "q8_1", "q4_k_m", "f16", "q6_kk"}) {
    t = QuantType::kQ8_0;
    EXPECT_FALSE(ParseQuantType(bad, &t)) << "'" << bad << "'";
    EXPECT_EQ(t, QuantType::kQ8_0) << "a failed parse leaves the output alone";
  }
}

// The stored f16 scale of block b of a 32-value format (d is the first field of each block).
float BlockScale32(QuantType t, const std::vector<uint8_t>& q, int64_t b) {
  uint16_t d;
  std::memcpy(&d, q.data() + b * QuantBlockBytes(t), 2);
  return F16ToF32(d);
}

// Q4_0/Q5_0/Q8_0: x = (q + r) * d with |r| <= 1/2 before the clamp, at most 1 for the one level the
// clamp can cut (the negation of the block's extreme in Q4_0/Q5_0); d is then rounded to f16
// (relative error <= 2^-11, times at most |q| = 2^(bits-1)).
TEST(QuantTest, RoundTripWithinHalfAStepForTheLegacyFormats) {
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ8_0}) {
    const std::vector<float> x = Normal(32 * 200, 7, 3.0f);
    const std::vector<uint8_t> q = Quantize(t, x);
    const std::vector<float> y = Dequantize(t, q, static_cast<int64_t>(x.size()));
    const float levels = t == QuantType::kQ4_0 ? 8.f : t == QuantType::kQ5_0 ? 16.f : 127.f;
    for (size_t i = 0; i < x.size(); ++i) {
      const float d = std::fabs(BlockScale32(t, q, static_cast<int64_t>(i / 32)));
      const float clamp_slack = t == QuantType::kQ8_0 ? 0.5f : 1.0f;
      ASSERT_LE(std::fabs(x[i] - y[i]), d * (clamp_slack + levels * 0x1p-11f) * 1.0001f)
          << QuantTypeName(t) << " value " << i;
      // Away from the clamped level the error is half a step.
      if (t == QuantType::kQ8_0 || std::fabs(x[i]) < (levels - 1) * d) {
        ASSERT_LE(std::fabs(x[i] - y[i]), d * (0.5f + levels * 0x1p-11f) * 1.0001f) << QuantTypeName(t) << " " << i;
      }
    }
  }
}

// Q4_1 / Q5_1: x = min + (q + r) d with |r| <= 1/2 (the block's range in 15 or 31 steps, no clamp
// reached), then d and m = min rounded to f16: each adds a relative 2^-11, d's times q <= 15 or 31
// (the stored d and m stand in for the exact ones: 1.001 covers their 2^-11 and the f32 roundings).
// The block's minimum and maximum land on the end levels.
TEST(QuantTest, RoundTripWithinHalfAStepForTheMinimumFormats) {
  for (QuantType t : {QuantType::kQ4_1, QuantType::kQ5_1}) {
    const float top = t == QuantType::kQ4_1 ? 15.f : 31.f;
    std::vector<float> x = Normal(32 * 200, 7, 3.0f);
    for (size_t b = 0; b < 200; b += 7) x[b * 32 + 3] += 40.0f;  // blocks far from zero: m dominates
    const std::vector<uint8_t> q = Quantize(t, x);
    const std::vector<float> y = Dequantize(t, q, static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t h[2];
      std::memcpy(h, q.data() + i / 32 * QuantBlockBytes(t), 4);
      const float d = std::fabs(F16ToF32(h[0])), m = std::fabs(F16ToF32(h[1]));
      ASSERT_LE(std::fabs(x[i] - y[i]), (d * (0.5f + top * 0x1p-11f) + m * 0x1p-11f) * 1.001f)
          << QuantTypeName(t) << " value " << i;
    }
    for (size_t b = 0; b < 200; ++b) {
      const auto lo = std::min_element(x.begin() + b * 32, x.begin() + b * 32 + 32) - x.begin();
      const auto hi = std::max_element(x.begin() + b * 32, x.begin() + b * 32 + 32) - x.begin();
      const uint8_t* blk = q.data() + b * QuantBlockBytes(t);
      const uint8_t* qs = blk + (t == QuantType::kQ4_1 ? 4 : 8);
      uint32_t qh = 0;
      if (t == QuantType::kQ5_1) std::memcpy(&qh, blk + 4, 4);
      auto code = [&](int64_t j) {
        return ((j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | ((qh >> j) & 1) << 4);
      };
      ASSERT_EQ(code(lo % 32), 0u) << QuantTypeName(t) << " block " << b;
      ASSERT_EQ(code(hi % 32), static_cast<uint32_t>(top)) << QuantTypeName(t) << " block " << b;
    }
  }
}

// K-quants: the root-mean-square error of normal data relative to its sigma, from the step each
// format affords a 16- or 32-value sub-block spanning about 4 sigma (a uniform step s gives an
// RMS of s / sqrt(12)): 4/15, 4/31 and 4.4/63 sigma.
TEST(QuantTest, RoundTripRmsForTheKQuants) {
  struct Case {
    QuantType t;
    double step;
  } cases[] = {{QuantType::kQ4_K, 4.0 / 15}, {QuantType::kQ5_K, 4.0 / 31}, {QuantType::kQ6_K, 4.4 / 63}};
  for (const Case& c : cases) {
    const float sigma = 0.02f;
    const std::vector<float> x = Normal(256 * 64, 11, sigma);
    const std::vector<float> y = Dequantize(c.t, Quantize(c.t, x), static_cast<int64_t>(x.size()));
    double se = 0, worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::fabs(static_cast<double>(x[i]) - y[i]);
      se += e * e;
      worst = std::max(worst, e);
    }
    const double rms = std::sqrt(se / static_cast<double>(x.size())) / sigma;
    EXPECT_LT(rms, c.step / std::sqrt(12.0)) << QuantTypeName(c.t);
    EXPECT_GT(rms, c.step / std::sqrt(12.0) / 4) << QuantTypeName(c.t) << " suspiciously exact";
    EXPECT_LT(worst / sigma, c.step * 1.5) << QuantTypeName(c.t);
  }
}

TEST(QuantTest, AllZeroBlocksAsGgmlWritesThem) {
  const std::vector<float> zeros(256, 0.0f);
  for (QuantType t : kAll) {
    const std::vector<uint8_t> q = Quantize(t, zeros);
    const std::vector<float> y = Dequantize(t, q, 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << QuantTypeName(t);
    EXPECT_EQ(FirstNonFiniteBlock(t, q.data(), 256), -1);
  }
  // Q4_0 / Q5_0 take d = max / -8 (-16) with max = +0: d is -0 and every level is the midpoint.
  std::vector<uint8_t> q4 = Quantize(QuantType::kQ4_0, std::vector<float>(32, 0.0f));
  EXPECT_EQ(q4[0], 0x00);
  EXPECT_EQ(q4[1], 0x80);
  for (int j = 2; j < 18; ++j) EXPECT_EQ(q4[j], 0x88) << j;
  std::vector<uint8_t> q5 = Quantize(QuantType::kQ5_0, std::vector<float>(32, 0.0f));
  EXPECT_EQ(q5[1], 0x80);
  for (int j = 2; j < 6; ++j) EXPECT_EQ(q5[j], 0xff) << "fifth bits of level 16";
  for (int j = 6; j < 22; ++j) EXPECT_EQ(q5[j], 0x00) << j;
  for (QuantType t : {QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K, QuantType::kQ4_1,
                      QuantType::kQ5_1}) {
    const std::vector<uint8_t> q = Quantize(t, zeros);
    for (size_t j = 0; j < q.size(); ++j) ASSERT_EQ(q[j], 0) << QuantTypeName(t) << " byte " << j;
  }
}

// The value of largest magnitude decides the sign of d; on a tie the first one wins. It maps to
// level 0 exactly; its negation would need level 16 (32) and is clamped to 15 (31).
TEST(QuantTest, Q4_0AndQ5_0ExtremeAndTieRules) {
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ5_0}) {
    const float half = t == QuantType::kQ4_0 ? 8.f : 16.f;
    for (float first : {2.0f, -2.0f}) {
      std::vector<float> x(32, 0.0f);
      x[3] = first;
      x[20] = -first;
      const std::vector<float> y = Dequantize(t, Quantize(t, x), 32);
      EXPECT_EQ(y[3], first) << QuantTypeName(t);
      EXPECT_EQ(y[20], -first * (half - 1) / half) << QuantTypeName(t);
      EXPECT_EQ(y[0], 0.0f);
    }
  }
  // The largest scale f16 holds: max = -8 * 65504 gives d = 65504 and survives exactly.
  std::vector<float> x(32, 1000.0f);
  x[31] = -8.0f * 65504.0f;
  const std::vector<uint8_t> q = Quantize(QuantType::kQ4_0, x);
  EXPECT_EQ(BlockScale32(QuantType::kQ4_0, q, 0), 65504.0f);
  EXPECT_EQ(Dequantize(QuantType::kQ4_0, q, 32)[31], -8.0f * 65504.0f);
  EXPECT_EQ(FirstNonFiniteBlock(QuantType::kQ4_0, q.data(), 32), -1);
}

// Q8_0 rounds half away from zero (C's roundf), not to even.
TEST(QuantTest, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = -127.0f;
  const std::vector<uint8_t> q = Quantize(QuantType::kQ8_0, x);
  const auto* qs = reinterpret_cast<const int8_t*>(q.data() + 2);
  EXPECT_EQ(BlockScale32(QuantType::kQ8_0, q, 0), 1.0f);
  EXPECT_EQ(qs[0], 127);
  EXPECT_EQ(qs[1], 3);
  EXPECT_EQ(qs[2], -3);
  EXPECT_EQ(qs[3], 1);
  EXPECT_EQ(qs[4], -127);
}

// Q4_0 values that are already d * (q - 8) with d an f16 (QAT "q4_0-unquantized" weights)
// quantize back to the same d and levels.
TEST(QuantTest, Q4_0OnItsOwnGridIsExact) {
  std::mt19937 rng(3);
  std::vector<float> x(32 * 64);
  for (size_t b = 0; b < 64; ++b) {
    const float d = F16ToF32(F32ToF16(std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000, -int(rng() % 12))));
    for (size_t j = 0; j < 32; ++j) x[b * 32 + j] = d * static_cast<float>(static_cast<int>(rng() % 16) - 8);
    x[b * 32 + rng() % 32] = -8 * d;  // the extreme sits at level 0
  }
  const std::vector<float> y = Dequantize(QuantType::kQ4_0, Quantize(QuantType::kQ4_0, x), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i]) << i;
}

// Where each format keeps its f16 scales: poison one and the block is reported.
TEST(QuantTest, FirstNonFiniteBlockFindsBadScales) {
  const uint16_t bad[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff};
  for (QuantType t : kAll) {
    const int64_t n = 8 * QuantBlockElems(t);
    const std::vector<float> x = Normal(static_cast<size_t>(n), 5);
    std::vector<uint8_t> q = Quantize(t, x);
    ASSERT_EQ(FirstNonFiniteBlock(t, q.data(), n), -1) << QuantTypeName(t);
    const size_t d_at = t == QuantType::kQ6_K ? offsetof(BlockQ6_K, d) : 0;
    std::vector<size_t> fields = {d_at};
    if (t == QuantType::kQ4_K || t == QuantType::kQ5_K) fields.push_back(offsetof(BlockQ4_K, dmin));
    if (t == QuantType::kQ4_1 || t == QuantType::kQ5_1) fields.push_back(offsetof(BlockQ4_1, m));
    for (size_t field : fields) {
      for (uint16_t h : bad) {
        std::vector<uint8_t> p = q;
        std::memcpy(p.data() + 5 * QuantBlockBytes(t) + field, &h, 2);
        std::memcpy(p.data() + 6 * QuantBlockBytes(t) + field, &h, 2);
        EXPECT_EQ(FirstNonFiniteBlock(t, p.data(), n), 5) << QuantTypeName(t) << " field " << field << " " << h;
        const std::vector<float> y = Dequantize(t, p, n);
        bool any = false;
        for (int64_t i = 5 * QuantBlockElems(t); i < 6 * QuantBlockElems(t); ++i) any |= !std::isfinite(y[i]);
        EXPECT_TRUE(any) << QuantTypeName(t);
      }
      // The largest finite half and the smallest subnormal are fine.
      for (uint16_t h : {uint16_t{0x7bff}, uint16_t{0xfbff}, uint16_t{0x0001}}) {
        std::vector<uint8_t> p = q;
        std::memcpy(p.data() + 2 * QuantBlockBytes(t) + field, &h, 2);
        EXPECT_EQ(FirstNonFiniteBlock(t, p.data(), n), -1) << QuantTypeName(t);
      }
    }
  }
}

// Quantizing an infinity gives an infinite scale, which the check then reports. (Not for Q6_K:
// ggml's symmetric fit turns a sub-block holding an infinity into a NaN scale that loses the
// search for the block's largest, and the block comes out finite. Callers check the input.)
TEST(QuantTest, InfiniteInputShowsAsANonFiniteScale) {
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ5_K,
                      QuantType::kQ4_1, QuantType::kQ5_1}) {
    const int64_t n = 4 * QuantBlockElems(t);
    std::vector<float> x = Normal(static_cast<size_t>(n), 9);
    x[static_cast<size_t>(2 * QuantBlockElems(t) + 7)] = std::numeric_limits<float>::infinity();
    const std::vector<uint8_t> q = Quantize(t, x);
    EXPECT_EQ(FirstNonFiniteBlock(t, q.data(), n), 2) << QuantTypeName(t);
  }
}

// A row of several blocks is the blocks of each 32/256-value slice quantized alone.
TEST(QuantTest, RowsAreIndependentBlocks) {
  for (QuantType t : kAll) {
    const int64_t be = QuantBlockElems(t), bb = QuantBlockBytes(t);
    const std::vector<float> x = Normal(static_cast<size_t>(5 * be), 13);
    const std::vector<uint8_t> row = Quantize(t, x);
    for (int64_t b = 0; b < 5; ++b) {
      const std::vector<float> slice(x.begin() + b * be, x.begin() + (b + 1) * be);
      const std::vector<uint8_t> one = Quantize(t, slice);
      ASSERT_EQ(std::memcmp(one.data(), row.data() + b * bb, static_cast<size_t>(bb)), 0) << QuantTypeName(t) << " " << b;
    }
  }
}

// Blocks at odd addresses (a GGUF's alignment may be 1): the same values and bytes as aligned ones
// (and no misaligned access for the sanitizer builds to report).
TEST(QuantTest, UnalignedBlocks) {
  for (QuantType t : kAll) {
    const int64_t n = 3 * QuantBlockElems(t);
    const std::vector<float> x = Normal(static_cast<size_t>(n), 17);
    const std::vector<uint8_t> q = Quantize(t, x);
    std::vector<uint8_t> odd(q.size() + 1);
    QuantizeRow(t, x.data(), odd.data() + 1, n);
    ASSERT_EQ(std::memcmp(odd.data() + 1, q.data(), q.size()), 0) << QuantTypeName(t);
    std::vector<float> y(static_cast<size_t>(n));
    DequantizeRow(t, odd.data() + 1, y.data(), n);
    EXPECT_EQ(y, Dequantize(t, q, n)) << QuantTypeName(t);
    EXPECT_EQ(FirstNonFiniteBlock(t, odd.data() + 1, n), -1);
  }
}

}  // namespace
}  // namespace tessera
