// Conversions checked against independent references: decoding by the IEEE formula with ldexp,
// encoding by searching the nearest representable value (ties to the even bit pattern).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tessera/dtype.h"

namespace tessera {
namespace {

double F16Formula(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int man = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(man, -24);
  if (exp == 31) return man ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(1024 + man, exp - 25);
}

// Nearest of the sorted non-negative finite values `table` (bit pattern = index), ties to even;
// `overflow_at` and beyond round to the infinity pattern `inf_bits`.
uint16_t NearestByTable(double x, const std::vector<double>& table, double overflow_at, uint16_t inf_bits) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a >= overflow_at) return sign | inf_bits;
  auto it = std::lower_bound(table.begin(), table.end(), a);
  size_t hi = static_cast<size_t>(it - table.begin());
  if (hi == table.size()) return sign | static_cast<uint16_t>(table.size() - 1);
  if (table[hi] == a || hi == 0) return sign | static_cast<uint16_t>(hi);
  const size_t lo = hi - 1;
  const double dl = a - table[lo], dh = table[hi] - a;
  size_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | static_cast<uint16_t>(pick);
}

TEST(DType, F16DecodeMatchesFormulaForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = F16Formula(static_cast<uint16_t>(h));
    const float got = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << h;
    }
  }
}

TEST(DType, RoundTripIsIdentityForAllNonNanPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    if (!std::isnan(F16ToF32(b))) {
      EXPECT_EQ(F32ToF16(F16ToF32(b)), b) << h;
    }
    if (!std::isnan(Bf16ToF32(b))) {
      EXPECT_EQ(F32ToBf16(Bf16ToF32(b)), b) << h;
    }
  }
}

TEST(DType, EncodeRoundsToNearestEven) {
  std::vector<double> f16_table, bf16_table;
  for (uint32_t h = 0; h < 0x7c00; ++h) f16_table.push_back(F16Formula(static_cast<uint16_t>(h)));
  for (uint32_t h = 0; h < 0x7f80; ++h) bf16_table.push_back(Bf16ToF32(static_cast<uint16_t>(h)));
  // Overflow thresholds: max finite + half an ulp.
  const double f16_overflow = 65504.0 + 16.0;
  const double bf16_overflow = bf16_table.back() + std::ldexp(1.0, 127 - 8);
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> samples;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) samples.push_back(f);
  }
  // Exact midpoints between neighbours (ties) in both formats, and values near the edges.
  for (uint32_t h = 0; h + 1 < 0x7c00; h += 37) samples.push_back(static_cast<float>((f16_table[h] + f16_table[h + 1]) / 2));
  for (uint32_t h = 0; h + 1 < 0x7f80; h += 37) samples.push_back(static_cast<float>((bf16_table[h] + bf16_table[h + 1]) / 2));
  for (float f : {65504.f, 65519.f, 65520.f, 65536.f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 1e-45f,
                  std::numeric_limits<float>::infinity(), 0.f, -0.f, std::numeric_limits<float>::max()}) {
    samples.push_back(f);
    samples.push_back(-f);
  }
  for (float f : samples) {
    EXPECT_EQ(F32ToF16(f), NearestByTable(f, f16_table, f16_overflow, 0x7c00)) << f;
    EXPECT_EQ(F32ToBf16(f), NearestByTable(f, bf16_table, bf16_overflow, 0x7f80)) << f;
  }
}

TEST(DType, NanStaysNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(nan))));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(nan))));
  // A signalling-NaN payload that would round into the exponent must still be NaN.
  uint32_t u = 0x7f800001u;
  float snan;
  std::memcpy(&snan, &u, 4);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(snan))));
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(snan))));
}

TEST(DType, ParseNames) {
  DType t;
  EXPECT_TRUE(ParseDType("bf16", &t));
  EXPECT_EQ(t, DType::kBF16);
  EXPECT_TRUE(ParseDType("float16", &t));
  EXPECT_EQ(t, DType::kF16);
  EXPECT_FALSE(ParseDType("int8", &t));
}

}  // namespace
}  // namespace tessera
