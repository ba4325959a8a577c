// Every SIMD implementation this CPU runs, against double-precision references over random
// lengths (covering every tail) and all operand dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/simd.h"
#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"

namespace tessera::ops {
namespace {

TEST(Simd, AllImplementationsMatchDoubleReferences) {
  const SimdKernels* impls[4];
  const int n_impl = AvailableSimd(impls, 4);
  ASSERT_GE(n_impl, 1);
  EXPECT_STREQ(impls[n_impl - 1]->name, "generic");
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  for (int k = 0; k < n_impl; ++k) {
    const SimdKernels& s = *impls[k];
    SCOPED_TRACE(s.name);
    for (int trial = 0; trial < 300; ++trial) {
      const int64_t n = trial < 130 ? trial : std::uniform_int_distribution<int64_t>(0, 2100)(rng);
      std::vector<float> a(n), b(n), y(n);
      for (int64_t i = 0; i < n; ++i) a[i] = nd(rng), b[i] = nd(rng), y[i] = nd(rng);
      std::vector<uint16_t> bb(n), bh(n);
      EncodeFromF32(DType::kBF16, b.data(), bb.data(), n);
      EncodeFromF32(DType::kF16, b.data(), bh.data(), n);
      std::vector<float> fb(n), fh(n);
      DecodeToF32(DType::kBF16, bb.data(), fb.data(), n);
      DecodeToF32(DType::kF16, bh.data(), fh.data(), n);
      auto dot = [&](const std::vector<float>& x) {
        double r = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) r += double(a[i]) * x[i], mag += std::fabs(double(a[i]) * x[i]);
        return std::pair{r, mag};
      };
      // f32 summation of n products: error <= ~n * eps * sum|a_i b_i| in the worst case; random
      // signs give ~sqrt(n) * eps * sum; allow 4 * sqrt(n + 1) * eps * sum.
      const double eps = 6e-8;
      for (auto [got, x] : {std::pair{s.dot_f32(a.data(), b.data(), n), &b}, std::pair{s.dot_bf16(a.data(), bb.data(), n), &fb},
                            std::pair{s.dot_f16(a.data(), bh.data(), n), &fh}}) {
        const auto [want, mag] = dot(*x);
        ASSERT_NEAR(got, want, 4 * std::sqrt(n + 1.0) * eps * mag + 1e-30) << "dot n=" << n;
      }
      const float alpha = nd(rng);
      for (int which = 0; which < 3; ++which) {
        std::vector<float> out = y;
        const std::vector<float>& x = which == 0 ? b : which == 1 ? fb : fh;
        if (which == 0) s.axpy_f32(out.data(), alpha, b.data(), n);
        if (which == 1) s.axpy_bf16(out.data(), alpha, bb.data(), n);
        if (which == 2) s.axpy_f16(out.data(), alpha, bh.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const double want = y[i] + double(alpha) * x[i];
          // fused or not: at most 2 roundings of values of this size
          ASSERT_NEAR(out[i], want, 2.5 * eps * (std::fabs(y[i]) + std::fabs(alpha * x[i])) + 1e-30) << i;
        }
      }
      std::vector<float> sc = y;
      s.scale(sc.data(), alpha, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sc[i], y[i] * alpha);
      // Rows of a [4, n + 3] matrix: a stride wider than n.
      const int64_t st = n + 3;
      std::vector<float> rows(4 * st);
      for (float& r : rows) r = nd(rng);
      for (int which = 0; which < 3; ++which) {
        float out[4];
        // Four stored rows (this dtype, stride st) against one f32 row a.
        {
          const DType dt = which == 0 ? DType::kF32 : which == 1 ? DType::kBF16 : DType::kF16;
          std::vector<uint8_t> enc(rows.size() * DTypeSize(dt));
          EncodeFromF32(dt, rows.data(), enc.data(), rows.size());
          std::vector<float> dec(rows.size());
          DecodeToF32(dt, enc.data(), dec.data(), rows.size());
          s.DotRows4(dt, a.data(), enc.data(), st, n, out);
          for (int r = 0; r < 4; ++r) {
            double want = 0, mag = 0;
            for (int64_t i = 0; i < n; ++i) want += double(a[i]) * dec[r * st + i], mag += std::fabs(double(a[i]) * dec[r * st + i]);
            ASSERT_NEAR(out[r], want, 4 * std::sqrt(n + 1.0) * eps * mag + 1e-30) << "dot_rows4 n=" << n << " row " << r;
          }
          // Two f32 rows (a and the f32 row 1 of `rows`) against stored row 0.
          float out2[2];
          s.Dot2(dt, a.data(), rows.data() + st, enc.data(), n, out2);
          for (int r = 0; r < 2; ++r) {
            const float* ar = r == 0 ? a.data() : rows.data() + st;
            double want = 0, mag = 0;
            for (int64_t i = 0; i < n; ++i) want += double(ar[i]) * dec[i], mag += std::fabs(double(ar[i]) * dec[i]);
            ASSERT_NEAR(out2[r], want, 4 * std::sqrt(n + 1.0) * eps * mag + 1e-30) << "dot2 n=" << n << " row " << r;
          }
        }
        // y += sum_j w_j x_j with four different x rows (rows of `rows`) stored in this dtype.
        std::vector<float> xf(4 * n);
        std::vector<uint16_t> xh(4 * n);
        std::vector<float> xd(4 * n);  // the values the kernel sees, decoded
        for (int j = 0; j < 4; ++j)
          for (int64_t i = 0; i < n; ++i) xf[j * n + i] = rows[j * st + i];
        const DType dt = static_cast<DType>(which);
        if (which == 0) {
          xd = xf;
        } else {
          EncodeFromF32(dt, xf.data(), xh.data(), 4 * n);
          DecodeToF32(dt, xh.data(), xd.data(), 4 * n);
        }
        const void* xs[4];
        for (int j = 0; j < 4; ++j)
          xs[j] = which == 0 ? static_cast<const void*>(xf.data() + j * n) : static_cast<const void*>(xh.data() + j * n);
        const float w4[4] = {alpha, -0.5f, 0.25f, 2.0f};
        std::vector<float> out4 = y;
        s.Axpy4(dt, out4.data(), w4, xs, n);
        for (int64_t i = 0; i < n; ++i) {
          double want = y[i], mag = std::fabs(y[i]);
          for (int j = 0; j < 4; ++j) want += double(w4[j]) * xd[j * n + i], mag += std::fabs(double(w4[j]) * xd[j * n + i]);
          ASSERT_NEAR(out4[i], want, 5 * eps * mag + 1e-30) << "axpy4 i=" << i;
        }
      }
    }
  }
}

// The GEMM panel packer and micro-tile: packing is exact (a widening copy), and the tile is one
// FMA chain per output in k order in every implementation, so all of them agree bit for bit with
// a scalar std::fma loop, for every mr / nr and with accumulation.
TEST(Simd, GemmPackAndTileMatchScalarFmaChains) {
  const SimdKernels* impls[4];
  const int n_impl = AvailableSimd(impls, 4);
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  for (int k = 0; k < n_impl; ++k) {
    const SimdKernels& s = *impls[k];
    SCOPED_TRACE(s.name);
    for (int trial = 0; trial < 60; ++trial) {
      const int64_t kc = std::uniform_int_distribution<int64_t>(1, 300)(rng), st = kc + trial % 5;
      const int rows = 1 + trial % 16, mr = 1 + trial % 6;
      const bool acc = trial % 2 == 1;
      std::vector<float> wf(16 * st);
      for (float& v : wf) v = nd(rng);
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        std::vector<uint8_t> w(wf.size() * DTypeSize(dt));
        EncodeFromF32(dt, wf.data(), w.data(), wf.size());
        std::vector<float> wide(wf.size());
        DecodeToF32(dt, w.data(), wide.data(), wf.size());
        AlignedBuffer bp_buf(kc * 16 * sizeof(float));  // the packed panel is 64-byte aligned, as in ops/gemm.cc
        float* bp = static_cast<float*>(bp_buf.data());
        s.pack_panel16(dt, w.data(), st, rows, kc, bp);
        for (int64_t kk = 0; kk < kc; ++kk)
          for (int j = 0; j < 16; ++j)
            ASSERT_EQ(bp[kk * 16 + j], j < rows ? wide[j * st + kk] : 0.0f) << DTypeName(dt) << " k=" << kk << " j=" << j;
        std::vector<float> a(6 * kc), c(6 * 20), want(6 * 20);
        for (float& v : a) v = nd(rng);
        for (float& v : c) v = nd(rng);
        want = c;
        const float* ap[6];
        for (int r = 0; r < 6; ++r) ap[r] = a.data() + (r < mr ? r : 0) * kc;
        // Prefetches (none, fewer lines than k steps, more than k steps and than fit the L1) change
        // nothing in the result.
        const int64_t pf_lines = trial % 3 == 0 ? 0 : trial % 3 == 1 ? (kc + 3) / 4 : 3 * kc + 300;
        std::vector<char> pf(pf_lines * 64 + 1);
        s.gemm_tile(ap, bp, kc, c.data(), 20, mr, rows, acc, pf.data(), pf_lines);
        for (int r = 0; r < 6; ++r)
          for (int j = 0; j < 20; ++j) {
            if (r >= mr || j >= rows) {
              ASSERT_EQ(c[r * 20 + j], want[r * 20 + j]) << "wrote outside the tile r=" << r << " j=" << j;
              continue;
            }
            float chain = 0.0f;
            for (int64_t kk = 0; kk < kc; ++kk) chain = std::fma(a[r * kc + kk], bp[kk * 16 + j], chain);
            ASSERT_EQ(c[r * 20 + j], acc ? want[r * 20 + j] + chain : chain) << "r=" << r << " j=" << j;
          }
        // gemm_tile_b reads the same B in place, [kc][st] in the stored dtype (V rows in
        // attention), and must give the same chains; rows >= mr and columns >= nr untouched.
        std::vector<float> bf(kc * st);
        for (float& v : bf) v = nd(rng);
        std::vector<uint8_t> bs(bf.size() * DTypeSize(dt));
        EncodeFromF32(dt, bf.data(), bs.data(), bf.size());
        std::vector<float> bw(bf.size());
        DecodeToF32(dt, bs.data(), bw.data(), bf.size());
        // pack_rows16: the same B as 16-column panels (exact widening copy, zeros past cols).
        const int64_t cols = std::max<int64_t>(1, st - trial % 4);
        AlignedBuffer rp_buf(((cols + 15) / 16) * kc * 16 * sizeof(float));
        float* rp = static_cast<float*>(rp_buf.data());
        s.pack_rows16(dt, bs.data(), st, kc, cols, rp);
        for (int64_t p = 0; p * 16 < cols; ++p)
          for (int64_t kk = 0; kk < kc; ++kk)
            for (int j = 0; j < 16; ++j)
              ASSERT_EQ(rp[(p * kc + kk) * 16 + j], p * 16 + j < cols ? bw[kk * st + p * 16 + j] : 0.0f)
                  << "pack_rows16 p=" << p << " k=" << kk << " j=" << j;
        const int nr = static_cast<int>(std::clamp<int64_t>(st - trial % 3, 1, 16));
        for (float& v : c) v = nd(rng);
        want = c;
        s.gemm_tile_b(dt, ap, bs.data(), st, kc, c.data(), 20, mr, nr, acc);
        for (int r = 0; r < 6; ++r)
          for (int j = 0; j < 20; ++j) {
            if (r >= mr || j >= nr) {
              ASSERT_EQ(c[r * 20 + j], want[r * 20 + j]) << "tile_b wrote outside r=" << r << " j=" << j;
              continue;
            }
            float chain = 0.0f;
            for (int64_t kk = 0; kk < kc; ++kk) chain = std::fma(a[r * kc + kk], bw[kk * st + j], chain);
            ASSERT_EQ(c[r * 20 + j], acc ? want[r * 20 + j] + chain : chain) << "tile_b r=" << r << " j=" << j;
          }
      }
    }
  }
}

// The wide attention tile (AVX-512 CPUs only): every row and column count, two panels a stride
// apart, against the scalar FMA chain gemm_tile computes (so results equal it bit for bit), with
// rows >= mr and columns >= nr of c untouched.
TEST(Simd, WideTileMatchesScalarFmaChains) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512 on this CPU";
  const GemmTileWideFn wide = GemmTileWideAvx512();
  ASSERT_NE(wide, nullptr);
  std::mt19937 rng(31);
  std::normal_distribution<float> nd;
  constexpr int kRows = kWideTileRows, kCs = 37;
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t kc = std::uniform_int_distribution<int64_t>(1, 130)(rng);
    const int64_t ps = kc * 16 + 16 * (trial % 3);  // the second panel's offset (floats, a multiple of 16)
    const int mr = 1 + trial % kRows, nr = 1 + trial % 32;
    const bool acc = trial % 2 == 1;
    AlignedBuffer bp_buf((ps + kc * 16) * sizeof(float));
    float* bp = static_cast<float*>(bp_buf.data());
    for (int64_t i = 0; i < ps + kc * 16; ++i) bp[i] = nd(rng);
    std::vector<float> a(kRows * kc), c(kRows * kCs), want;
    for (float& v : a) v = nd(rng);
    for (float& v : c) v = nd(rng);
    want = c;
    const float* ap[kRows];
    for (int r = 0; r < kRows; ++r) ap[r] = a.data() + (r < mr ? r : 0) * kc;
    wide(ap, bp, ps, kc, c.data(), kCs, mr, nr, acc, {});
    for (int r = 0; r < kRows; ++r)
      for (int j = 0; j < kCs; ++j) {
        if (r >= mr || j >= nr) {
          ASSERT_EQ(c[r * kCs + j], want[r * kCs + j]) << "wrote outside the tile r=" << r << " j=" << j;
          continue;
        }
        const float* panel = bp + (j / 16) * ps;
        float chain = 0.0f;
        for (int64_t kk = 0; kk < kc; ++kk) chain = std::fma(a[r * kc + kk], panel[kk * 16 + j % 16], chain);
        ASSERT_EQ(c[r * kCs + j], acc ? want[r * kCs + j] + chain : chain) << "r=" << r << " j=" << j << " mr=" << mr;
      }
  }
}

// The softmax's max pass: every lane and tail length, with NaN, +-inf and signed zeros placed at
// random, against the plain scalar loop (NaNs skipped; -inf for no values) and its finiteness flag.
TEST(Simd, RowMaxMatchesScalarLoop) {
  const SimdKernels* impls[4];
  const int n_impl = AvailableSimd(impls, 4);
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> ud(-50.0f, 50.0f);
  const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3.0e38f, -3.0e38f};
  for (int k = 0; k < n_impl; ++k) {
    const SimdKernels& s = *impls[k];
    SCOPED_TRACE(s.name);
    for (int trial = 0; trial < 400; ++trial) {
      const int64_t n = trial % 70;
      std::vector<float> x(n);
      const int odds = trial % 4 == 0 ? 0 : 1 + trial % 9;  // every 4th trial: finite values only
      for (int64_t i = 0; i < n; ++i)
        x[i] = odds && rng() % (3 * odds) == 0 ? specials[rng() % 8] : (trial % 3 ? ud(rng) : -ud(rng) - 60.0f);
      float want = -INFINITY;
      uint32_t want_bad = 0;
      for (float v : x) {
        want_bad |= std::isnan(v) || std::isinf(v);
        want = want < v ? v : want;
      }
      uint32_t bad = 0;
      const float got = s.row_max(x.data(), n, &bad);
      ASSERT_EQ(got, want) << "trial " << trial << " n=" << n;  // (-0 == +0: either sign is a right max)
      ASSERT_EQ(bad, want_bad) << "trial " << trial << " n=" << n;
      uint32_t kept = 1;  // *bad is or-ed into, never cleared
      s.row_max(x.data(), n, &kept);
      ASSERT_EQ(kept, 1u);
    }
  }
}

// The softmax numerator: every lane and tail length, arguments from 0 down past the f32 underflow
// (-87.3) and -inf, against exp in double: a few ulps relative, exact 0 for -inf.
TEST(Simd, ExpSubSumMatchesDoubleExp) {
  const SimdKernels* impls[4];
  const int n_impl = AvailableSimd(impls, 4);
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> ud(-95.0f, 0.0f);
  for (int k = 0; k < n_impl; ++k) {
    const SimdKernels& s = *impls[k];
    SCOPED_TRACE(s.name);
    for (int64_t n = 0; n < 70; ++n) {
      const float m = n % 2 ? 3.5f : -20.0f;
      std::vector<float> x(n), y(n);
      for (int64_t i = 0; i < n; ++i) x[i] = i % 11 == 5 ? -INFINITY : (i % 7 == 0 ? m : ud(rng) + m);
      y = x;
      const float sum = s.exp_sub_sum(y.data(), n, m);
      double want_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(double(x[i]) - double(m));
        want_sum += want;
        if (std::isinf(x[i])) {
          ASSERT_EQ(y[i], 0.0f) << i;
        } else if (double(x[i]) - m < -87.3) {
          ASSERT_LE(y[i], 1.22e-38f) << i;  // underflow: 0 or at most exp(-87.3) = 1.2146e-38
        } else {
          ASSERT_NEAR(y[i], want, 4e-7 * want) << "n=" << n << " i=" << i << " x-m=" << double(x[i]) - m;
        }
      }
      ASSERT_NEAR(sum, want_sum, 1e-6 * want_sum + 1e-30) << n;
    }
  }
}

// The AVX-512 table's exp (16 lanes, ops/exp16_avx512.inc) is the AVX2 table's function (8 lanes),
// as both claim: the same value for every input, bit for bit, underflow, clamping, -inf and NaN
// included. (The sums differ by reduction order only.)
TEST(Simd, ExpSubSumValuesAreTheSameOnAvx2AndAvx512) {
  const SimdKernels* impls[4];
  const int n_impl = AvailableSimd(impls, 4);
  const SimdKernels *avx2 = nullptr, *avx512 = nullptr;
  for (int k = 0; k < n_impl; ++k) {
    if (std::string(impls[k]->name) == "avx2") avx2 = impls[k];
    if (std::string(impls[k]->name) == "avx512") avx512 = impls[k];
  }
  if (avx2 == nullptr || avx512 == nullptr) GTEST_SKIP() << "needs the AVX2 and AVX-512 tables";
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> ud(-100.0f, 5.0f);
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t n = 1; n < 300; ++n) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = ud(rng);
      if (i % 13 == 3) x[i] = -INFINITY;
      if (i % 17 == 4) x[i] = std::numeric_limits<float>::quiet_NaN();
      if (i % 19 == 5) {  // any bit pattern: huge, tiny, subnormal, infinite, NaN
        const uint32_t b = bits(rng);
        std::memcpy(&x[i], &b, 4);
      }
    }
    std::vector<float> a = x, b = x;
    avx2->exp_sub_sum(a.data(), n, 1.5f);
    avx512->exp_sub_sum(b.data(), n, 1.5f);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0) << "x=" << x[i] << " avx2 " << a[i] << " avx512 " << b[i];
  }
}

// Precision bf16's rounding of x: every table's loops against the scalar conversions, bit for bit,
// on every tail length, random bit patterns (NaNs, infinities, subnormals) and the ties.
TEST(Simd, RoundAndWidenBf16AreTheScalarConversions) {
  const SimdKernels* impls[4];
  const int n_impl = AvailableSimd(impls, 4);
  std::mt19937 rng(37);
  const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.00390625f, 1.01171875f, -3.4e38f, 1e-40f};
  for (int k = 0; k < n_impl; ++k) {
    const SimdKernels& s = *impls[k];
    SCOPED_TRACE(s.name);
    for (int64_t n = 0; n < 300; n += n < 70 ? 1 : 37) {
      std::vector<float> x(n), back(n);
      std::vector<uint16_t> bits(n);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t b = rng();
        std::memcpy(&x[i], &b, 4);
        if (i % 5 == 1) x[i] = specials[(i / 5) % 9];
      }
      s.round_bf16(x.data(), n, bits.data());
      s.widen_bf16(bits.data(), n, back.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits[i], F32ToBf16(x[i])) << "n=" << n << " i=" << i;
        const float want = Bf16ToF32(bits[i]);
        ASSERT_EQ(std::memcmp(&back[i], &want, 4), 0) << "n=" << n << " i=" << i;
      }
    }
  }
}

// The several-token row dot against the table's dot_rows4 for each token alone: the same bits, on
// every tail length (the 8-lane tail and the scalar one), 1-12 tokens, f32 and bf16 rows.
TEST(Simd, DotRows4TokensIsDotRows4PerToken) {
  const DotRows4TokensFn tokens = DotRows4Tokens();
  if (tokens == nullptr) GTEST_SKIP() << "no AVX-512, or TESSERA_SIMD asks for another table";
  const SimdKernels& s = Simd();
  std::mt19937 rng(41);
  std::normal_distribution<float> nd;
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t n = trial < 40 ? trial : 16 * (trial % 7) + trial % 16 + 40;
    const int count = 1 + trial % 12;  // (10-12: two passes)
    const int64_t a_stride = n + trial % 3, b_stride = n + 5;
    std::vector<float> a(count * a_stride), bf(4 * b_stride);
    std::vector<uint16_t> bh(4 * b_stride);
    for (float& v : a) v = trial % 5 == 0 && rng() % 7 == 0 ? -0.0f : nd(rng);
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = nd(rng), bh[i] = F32ToBf16(bf[i]);
    for (const DType dt : {DType::kF32, DType::kBF16}) {
      const void* b = dt == DType::kF32 ? static_cast<const void*>(bf.data()) : bh.data();
      std::vector<float> got(4 * count);
      tokens(dt, a.data(), a_stride, count, b, b_stride, n, got.data());
      for (int t = 0; t < count; ++t) {
        float want[4];
        s.DotRows4(dt, a.data() + t * a_stride, b, b_stride, n, want);
        for (int r = 0; r < 4; ++r)
          ASSERT_EQ(std::memcmp(&got[4 * t + r], &want[r], 4), 0)
              << DTypeName(dt) << " n=" << n << " tokens=" << count << " t=" << t << " r=" << r;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::ops
