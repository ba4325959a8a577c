// The int8 prefill GEMM on block-quantized weights (ops/quant_gemm.h) against the plain reference
// LinearReference (each row dequantized by DequantizeRow, products with the f32 x summed in
// double), on random blocks of every GGUF type, random shapes (rows that are no multiple of the
// 32-row tile, 1..40 tokens: partial token tiles), 1 and 2 threads; each token's result the same
// whatever the batch; Linear routes to it with the scratch; non-finite activations give NaN.
//
// The bound (u = 2^-24). Activations: per 32-value block b with d_b = amax_b / 127, the GEMM's
// two-byte value x^ = d_b q_hi + d_b / 256 q_lo is within d_b / 256 of x (q_lo is the residual
// rounded to nearest, or clamped at +-127 where it would be 128), plus the f32 rounding of the
// residual x - d_b q_hi (2 u |x|). Weights: the kernel's decomposition w = a code + b holds with
// a and b the f32 values DequantizeRow forms. Sums: exact integers per sub-block (|isum| < 2^31,
// one rounding to f32), then (a xd) isum + b xs, or a (xd isum + xs) where b = -2^c a and xs carries
// the -2^c (QuantGemmXsScale), added into one f32 chain per output: a handful of
// roundings per term, over G = in / sub terms, each bounded by S = sum_i M_i |x^_i| with M_i =
// |w_i| plus the format's offset counted twice (its part of w = a code + b). So
//   |y - ref| <= sum_i |w_i| (d_b / 256 + 2 u |x_i|) + (G + 10) u S + u |ref|.
//
// With one activation byte (precision int8) the activations are the decode row-dot's, so the
// reference is LinearReference at kInt8 (those same int8 values times DequantizeRow's weights,
// summed in double) and only the f32 steps above remain, with DequantizeRow's rounding of the
// K-quant weights (u S at most) inside the margin: |y - ref| <= (G + 10) u S + u |ref|, x^ = d q.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/quant_act.h"
#include "ops/quant_gemm.h"
#include "quant_blocks.h"
#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"
#include "tessera/quant.h"

namespace tessera {
namespace {

using testing::MakeQuantProblem;
using testing::Magnitudes;
using testing::QuantProblem;
using testing::RandomBlocks;

constexpr QuantType kTypes[] = {QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ8_0, QuantType::kQ4_1, QuantType::kQ5_1,
                                QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K};
constexpr double kU = 1.0 / (1 << 24);
constexpr float kUnwritten = -12345.0f;

std::vector<float> RunQuantGemm(const QuantProblem& p, int64_t n, int64_t t0, ThreadPool* pool,
                                ops::QuantActBytes bytes = ops::QuantActBytes::kTwo) {
  std::vector<float> y(n * p.ys, kUnwritten);
  AlignedBuffer scratch(ops::GemmScratchWords(n, p.in) * 4);
  ops::QuantGemm(p.View(), p.x.data() + t0 * p.xs, n, p.xs, y.data(), p.ys, pool, scratch.as<uint32_t>(), bytes);
  return y;
}

// The GEMM on p's n tokens, with no thread pool and with `pool`: within tol of ref, nothing written
// past a row, and the last min(n, 7) tokens as their own batch the same bits.
void ExpectWithinTolerance(const QuantProblem& p, const std::vector<float>& ref, const std::vector<double>& tol,
                           ThreadPool* pool, ops::QuantActBytes bytes) {
  for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), pool}) {
    const std::vector<float> y = RunQuantGemm(p, p.n, 0, tp, bytes);
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t o = 0; o < p.ys; ++o) {
        const size_t k = i * p.ys + o;
        if (o >= p.out) {
          ASSERT_EQ(y[k], kUnwritten) << "wrote past the row at t=" << i;
        } else {
          ASSERT_LE(std::fabs(double(y[k]) - ref[k]), tol[k]) << "t=" << i << " o=" << o << ": " << y[k] << " vs "
                                                              << ref[k];
        }
      }
    const int64_t tail_n = std::min<int64_t>(p.n, 7);
    const std::vector<float> tail = RunQuantGemm(p, tail_n, p.n - tail_n, tp, bytes);
    for (int64_t i = 0; i < tail_n; ++i)
      for (int64_t o = 0; o < p.out; ++o) ASSERT_EQ(tail[i * p.ys + o], y[(p.n - tail_n + i) * p.ys + o]);
  }
}

// Per value of token t: the activation error bound d_b / 256 + 2 u |x_i| of the header comment
// (d_b = amax_b / 127 of its 32-value block, computed here from x).
std::vector<double> ActError(const QuantProblem& p, int64_t t) {
  std::vector<double> e(p.in);
  const float* x = p.x.data() + t * p.xs;
  for (int64_t b = 0; b < p.in / 32; ++b) {
    double amax = 0;
    for (int64_t i = 32 * b; i < 32 * b + 32; ++i) amax = std::max(amax, std::fabs(double(x[i])));
    for (int64_t i = 32 * b; i < 32 * b + 32; ++i) e[i] = (amax / 127 / 256) * (1 + 1e-6) + 2 * kU * std::fabs(x[i]);
  }
  return e;
}

TEST(QuantGemm, MatchesReferenceOnRandomShapes) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t), sub = ops::QuantGemmSubBlock(t);
    for (int64_t blocks : {int64_t{1}, int64_t{3}, be == 32 ? int64_t{70} : int64_t{9}}) {
      for (int64_t out : {3, 33, 70, 129}) {
        const int64_t n = 1 + rng() % 40, in = blocks * be;
        SCOPED_TRACE(std::string(QuantTypeName(t)) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
                     " n=" + std::to_string(n));
        const QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
        std::vector<float> ref(n * p.ys);
        ops::LinearReference(p.View(), p.x.data(), n, p.xs, ref.data(), p.ys);
        std::vector<double> tol(n * p.ys);
        std::vector<std::vector<double>> err(n);
        for (int64_t i = 0; i < n; ++i) err[i] = ActError(p, i);
        for (int64_t o = 0; o < out; ++o) {
          const uint8_t* row = p.w.data() + o * QuantRowBytes(t, in);
          const std::vector<double> m = Magnitudes(t, row, in, /*q8_0_offset=*/256);
          std::vector<float> w(in);
          DequantizeRow(t, row, w.data(), in);
          for (int64_t i = 0; i < n; ++i) {
            double s = 0, act = 0;
            for (int64_t k = 0; k < in; ++k) {
              const double xk = std::fabs(double(p.x[i * p.xs + k]));
              s += m[k] * (xk + err[i][k]), act += std::fabs(w[k]) * err[i][k];
            }
            tol[i * p.ys + o] = act + (in / sub + 10) * kU * s + kU * std::fabs(ref[i * p.ys + o]);
          }
        }
        ExpectWithinTolerance(p, ref, tol, &pool, ops::QuantActBytes::kTwo);
      }
    }
  }
}

// Linear sends 12 tokens or more to the int8 GEMM when given the scratch (as the model gives it),
// and to the f32 panels without it.
TEST(QuantGemm, LinearRoutesPrefillWithScratch) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_K)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(12);
  ThreadPool pool(2);
  const QuantProblem p = MakeQuantProblem(rng, QuantType::kQ4_K, 20, 512, 48);
  const std::vector<float> int8 = RunQuantGemm(p, 20, 0, &pool);
  std::vector<float> y(20 * p.ys, kUnwritten), f32(20 * p.ys, kUnwritten);
  AlignedBuffer scratch(ops::GemmScratchWords(20, p.in) * 4);
  ops::Linear(p.View(), p.x.data(), 20, p.xs, y.data(), p.ys, &pool, ops::MatmulPrecision::kF32,
              scratch.as<uint32_t>());
  EXPECT_EQ(y, int8);
  ops::Linear(p.View(), p.x.data(), 20, p.xs, f32.data(), p.ys, &pool, ops::MatmulPrecision::kF32);
  EXPECT_NE(f32, int8);  // the f32 panels round differently: a different path
}

// The codes and (a, b) reproduce DequantizeRow: a * code + b equals the dequantized weight to
// within the f32 rounding of one multiply-add (both round d * sc the same way).
TEST(QuantGemm, UnpackedCodesReproduceDequantizedWeights) {
  std::mt19937 rng(13);
  for (QuantType t : kTypes) {
    const int64_t in = 2 * 256, sub = ops::QuantGemmSubBlock(t);
    const std::vector<uint8_t> w = RandomBlocks(rng, t, 1, in);
    std::vector<float> ref(in), a(in / sub), b(in / sub);
    std::vector<uint8_t> codes(in);
    DequantizeRow(t, w.data(), ref.data(), in);
    ops::UnpackQuantCodes(t, w.data(), 0, in, codes.data(), a.data(), b.data());
    for (int64_t i = 0; i < in; ++i) {
      const double v = double(a[i / sub]) * codes[i] + b[i / sub];
      EXPECT_LE(std::fabs(v - ref[i]), 2 * kU * (std::fabs(double(a[i / sub]) * codes[i]) + std::fabs(b[i / sub])))
          << QuantTypeName(t) << " i=" << i;
    }
  }
}

// The panel packing's fast forms against the plain code: UnpackCodesAvx512 gives UnpackQuantCodes'
// bytes (random blocks, every bit pattern, k ranges that start and end inside the row), the
// scales-only call the same a and b, and TransposeCodesAvx512 a plain loop's panel.
TEST(QuantGemm, FastPackingMatchesPlainUnpack) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(15);
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t), sub = ops::QuantGemmSubBlock(t);
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t blocks = 1 + rng() % 9, in = blocks * be;
      const int64_t b0 = rng() % blocks, nb = 1 + rng() % (blocks - b0), k0 = b0 * be, kc = nb * be;
      const std::vector<uint8_t> w = RandomBlocks(rng, t, 1, in);
      std::vector<uint8_t> ref(kc), got(kc, 0xaa);
      std::vector<float> a(kc / sub), b(kc / sub), a2(kc / sub, kUnwritten), b2(kc / sub, kUnwritten);
      ops::UnpackQuantCodes(t, w.data(), k0, kc, ref.data(), a.data(), b.data());
      ops::UnpackCodesAvx512(t, w.data(), k0, kc, got.data());
      EXPECT_EQ(got, ref) << QuantTypeName(t) << " k0=" << k0 << " kc=" << kc;
      ops::UnpackQuantCodes(t, w.data(), k0, kc, nullptr, a2.data(), b2.data());
      EXPECT_EQ(0, std::memcmp(a.data(), a2.data(), a.size() * 4)) << QuantTypeName(t);
      EXPECT_EQ(0, std::memcmp(b.data(), b2.data(), b.size() * 4)) << QuantTypeName(t);
    }
  }
  for (const int64_t kc : {32, 64, 96, 256, 2048}) {
    const int64_t stride = 2048 + 64 * (rng() % 3);
    AlignedBuffer rows(16 * stride), panel(16 * kc);
    for (int64_t i = 0; i < 16 * stride; ++i) rows.as<uint8_t>()[i] = static_cast<uint8_t>(rng());
    ops::TransposeCodesAvx512(rows.as<uint8_t>(), stride, kc, panel.as<uint8_t>());
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t r = 0; r < 16; ++r)
        ASSERT_EQ(panel.as<uint8_t>()[k / 4 * 64 + r * 4 + k % 4], rows.as<uint8_t>()[r * stride + k])
            << "kc=" << kc << " k=" << k << " r=" << r;
  }
}

// UnpackScalesAvx512 gives each live row's UnpackQuantCodes a and b in the panel layout, bit for
// bit (zero, subnormal and extreme f16 scales and minimums included), and +0 in the lanes past the
// live rows, for every type. Where the offsets fold into xs it leaves b unwritten, and the plain
// unpack's b is then exactly QuantGemmXsScale(t) a: the premise of the fold.
TEST(QuantGemm, PanelScalesMatchPlainUnpack) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_K)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(16);
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0xfbff};
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t), bb = QuantBlockBytes(t), sub = ops::QuantGemmSubBlock(t);
    // Where a block's f16 values are: d (and dmin or m) first, Q6_K's d last.
    const int64_t f16_at = t == QuantType::kQ6_K ? 208 : 0;
    const int f16_count = t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ4_1 ||
                                  t == QuantType::kQ5_1
                              ? 2
                              : 1;
    for (int trial = 0; trial < 40; ++trial) {
      const int64_t blocks = 1 + rng() % (be == 32 ? 24 : 6), in = blocks * be;
      const int64_t b0 = rng() % blocks, k0 = b0 * be, kc = (1 + rng() % (blocks - b0)) * be;
      const int live = static_cast<int>(rng() % 17), groups = static_cast<int>(kc / sub);
      std::vector<uint8_t> w = RandomBlocks(rng, t, std::max(live, 1), in);
      for (int64_t i = 0; i < static_cast<int64_t>(w.size()) / bb; i += 3)
        std::memcpy(w.data() + i * bb + f16_at + 2 * (rng() % f16_count), &specials[rng() % 6], 2);
      AlignedBuffer a(groups * 16 * 4), b(groups * 16 * 4);
      std::memset(b.as<float>(), 0x7f, groups * 16 * 4);  // a poison no unpacked value is
      ops::UnpackScalesAvx512(t, w.data(), in / be * bb, live, k0, kc, a.as<float>(), b.as<float>());
      const float fold = ops::QuantGemmXsScale(t);
      std::vector<float> ra(groups), rb(groups);
      for (int r = 0; r < 16; ++r) {
        if (r < live) ops::UnpackQuantCodes(t, w.data() + r * (in / be * bb), k0, kc, nullptr, ra.data(), rb.data());
        for (int g = 0; g < groups; ++g) {
          const float wa = r < live ? ra[g] : 0.0f, wb = r < live ? rb[g] : 0.0f;
          ASSERT_EQ(0, std::memcmp(&a.as<float>()[g * 16 + r], &wa, 4)) << QuantTypeName(t) << " r=" << r << " g=" << g;
          if (fold == 1.0f) {
            ASSERT_EQ(0, std::memcmp(&b.as<float>()[g * 16 + r], &wb, 4)) << QuantTypeName(t) << " r=" << r << " g=" << g;
          } else {
            uint32_t bits;
            std::memcpy(&bits, &b.as<float>()[g * 16 + r], 4);
            ASSERT_EQ(bits, 0x7f7f7f7fu) << QuantTypeName(t) << " b written, r=" << r << " g=" << g;
            const float folded = fold * wa;
            if (r < live) {
              ASSERT_EQ(0, std::memcmp(&folded, &wb, 4)) << QuantTypeName(t) << " b != scale a, r=" << r << " g=" << g;
            }
          }
        }
      }
    }
  }
}

// QuantizeResidualAvx512 gives QuantizeResidual's bytes and floats bit for bit, for both sub-block
// sizes, on rows from subnormal to huge magnitudes, with all-zero blocks and blocks holding an
// infinity or a NaN, xs scaled by 1, -8 or -128; the reference's two bytes reproduce each finite x
// within the bound the header comment states (d / 256, plus the rounding of the residual x - d q_hi),
// and its xs is dl (256 sum(q_hi) + sum(q_lo)) times the scale.
TEST(QuantGemm, ResidualMatchesPlainQuantizer) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t nb = 1 + rng() % 12, in = 32 * nb;
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 250) - 140);
    std::vector<float> x(in);
    for (float& v : x) v = nd(rng) * scale;
    const int64_t at = rng() % in;
    if (trial % 5 == 1) std::fill(x.begin() + at / 32 * 32, x.begin() + at / 32 * 32 + 32, 0.0f);
    if (trial % 5 == 2) x[at] = (rng() % 2 ? 1 : -1) * std::numeric_limits<float>::infinity();
    if (trial % 5 == 3) x[at] = std::numeric_limits<float>::quiet_NaN();
    std::vector<ops::ActBlock32> blocks(nb);
    ops::QuantizeActivations(QuantType::kQ8_0, x.data(), in, blocks.data());
    for (int64_t sub : {16, 32}) {
      const float scale = trial % 3 == 0 ? 1.0f : trial % 3 == 1 ? -8.0f : -128.0f;
      std::vector<int8_t> hi(in), lo(in), hi2(in), lo2(in);
      std::vector<float> xd(nb), xd2(nb), xs(in / sub), xs2(in / sub);
      ops::QuantizeResidual(x.data(), blocks.data(), nb, sub, hi.data(), lo.data(), xd.data(), xs.data(), scale);
      ops::QuantizeResidualAvx512(x.data(), blocks.data(), nb, sub, hi2.data(), lo2.data(), xd2.data(), xs2.data(),
                                  scale);
      const std::string where = "trial " + std::to_string(trial) + " sub " + std::to_string(sub);
      ASSERT_EQ(hi, hi2) << where;
      ASSERT_EQ(lo, lo2) << where;
      ASSERT_EQ(0, std::memcmp(xd.data(), xd2.data(), 4 * nb)) << where;
      ASSERT_EQ(0, std::memcmp(xs.data(), xs2.data(), 4 * (in / sub))) << where;
      for (int64_t g = 0; g < in / sub && std::isfinite(xd[g * sub / 32]); ++g) {  // xs: dl qs, scaled
        int32_t qs = 0;
        for (int64_t i = g * sub; i < (g + 1) * sub; ++i) qs += 256 * hi[i] + lo[i];
        ASSERT_EQ(xd[g * sub / 32] * static_cast<float>(qs) * scale, xs[g]) << where << " g " << g;
      }
      for (int64_t i = 0; i < in; ++i) {
        const double d = blocks[i / 32].d, dl = xd[i / 32];
        if (!std::isfinite(d) || !(dl >= std::numeric_limits<float>::min())) continue;  // normal scales
        const double got = d * hi[i] + dl * lo[i], u = std::ldexp(1.0, -24);
        ASSERT_LE(std::abs(got - x[i]), dl + 4 * u * (std::abs(x[i]) + std::abs(d * hi[i]))) << where << " i " << i;
      }
    }
  }
}

TEST(QuantGemm, NonFiniteActivationsGiveNaN) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(14);
  for (QuantType t : kTypes) {
    QuantProblem p = MakeQuantProblem(rng, t, 3, 2 * QuantBlockElems(t), 40);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      p.x[p.xs + 5] = bad;
      const std::vector<float> y = RunQuantGemm(p, 3, 0, nullptr);
      for (int64_t o = 0; o < p.out; ++o) {
        EXPECT_TRUE(std::isfinite(y[o])) << QuantTypeName(t);
        EXPECT_TRUE(std::isnan(y[p.ys + o])) << QuantTypeName(t);
        EXPECT_TRUE(std::isfinite(y[2 * p.ys + o])) << QuantTypeName(t);
      }
    }
  }
}

// One activation byte against LinearReference at kInt8 (header comment's bound), every type, random
// shapes, 1 and 2 threads, and each token's bits the same in any batch.
TEST(QuantGemm, OneByteMatchesInt8Reference) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(15);
  ThreadPool pool(2);
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t), sub = ops::QuantGemmSubBlock(t), ab = ops::ActBlockElems(t);
    for (int64_t blocks : {int64_t{1}, int64_t{3}, be == 32 ? int64_t{70} : int64_t{9}}) {
      for (int64_t out : {3, 33, 129}) {
        const int64_t n = 1 + rng() % 40, in = blocks * be;
        SCOPED_TRACE(std::string(QuantTypeName(t)) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
                     " n=" + std::to_string(n));
        const QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
        std::vector<float> ref(n * p.ys);
        ops::LinearReference(p.View(), p.x.data(), n, p.xs, ref.data(), p.ys, ops::MatmulPrecision::kInt8);
        // |x^_i| <= |x_i| + d_b / 2 with d_b = amax / 127 over the activation block (32 or 256).
        std::vector<double> xq(n * in);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t b = 0; b < in / ab; ++b) {
            double amax = 0;
            const float* xb = p.x.data() + i * p.xs;
            for (int64_t k = b * ab; k < (b + 1) * ab; ++k) amax = std::max(amax, std::fabs(double(xb[k])));
            for (int64_t k = b * ab; k < (b + 1) * ab; ++k) xq[i * in + k] = std::fabs(double(xb[k])) + amax / 254;
          }
        std::vector<double> tol(n * p.ys);
        for (int64_t o = 0; o < out; ++o) {
          const std::vector<double> m = Magnitudes(t, p.Row(o), in, /*q8_0_offset=*/256);
          for (int64_t i = 0; i < n; ++i) {
            double s = 0;
            for (int64_t k = 0; k < in; ++k) s += m[k] * xq[i * in + k];
            tol[i * p.ys + o] = (in / sub + 10) * kU * s + kU * std::fabs(ref[i * p.ys + o]);
          }
        }
        ExpectWithinTolerance(p, ref, tol, &pool, ops::QuantActBytes::kOne);
      }
    }
  }
}

// Precision int8 sends quantized prefill to the one-byte GEMM and, for a weight that is not
// block-quantized, computes exactly what precision f32 does (GEMM and row-dot token counts).
TEST(QuantGemm, LinearRoutesPrecisionInt8) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_K)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(16);
  ThreadPool pool(2);
  const QuantProblem p = MakeQuantProblem(rng, QuantType::kQ4_K, 20, 512, 48);
  AlignedBuffer scratch(ops::GemmScratchWords(20, p.in) * 4);
  std::vector<float> y(20 * p.ys, kUnwritten);
  ops::Linear(p.View(), p.x.data(), 20, p.xs, y.data(), p.ys, &pool, ops::MatmulPrecision::kInt8,
              scratch.as<uint32_t>());
  EXPECT_EQ(y, RunQuantGemm(p, 20, 0, &pool, ops::QuantActBytes::kOne));
  EXPECT_NE(y, RunQuantGemm(p, 20, 0, &pool, ops::QuantActBytes::kTwo));
  std::vector<float> w(48 * 512);
  std::normal_distribution<float> nd;
  for (float& v : w) v = nd(rng);
  ops::WeightView fw{w.data(), DType::kF32, 48, 512};
  AlignedBuffer panels(ops::F32PanelFloats(48, 512) * 4);
  ops::PackF32Panels(fw, panels.as<float>());
  for (bool packed : {false, true}) {
    // With panels the matrix is read only through them (the loader may release `data`): poisoned
    // data shows a path that skips them.
    ops::WeightView v = fw;
    std::vector<float> poisoned(w.size(), std::numeric_limits<float>::quiet_NaN());
    if (packed) v.panels = panels.as<float>(), v.data = poisoned.data();
    for (int64_t n : {2, 20}) {
      std::vector<float> a(n * p.ys, kUnwritten), b(n * p.ys, kUnwritten);
      ops::Linear(v, p.x.data(), n, p.xs, a.data(), p.ys, &pool, ops::MatmulPrecision::kInt8, scratch.as<uint32_t>());
      ops::Linear(v, p.x.data(), n, p.xs, b.data(), p.ys, &pool, ops::MatmulPrecision::kF32, scratch.as<uint32_t>());
      EXPECT_EQ(a, b) << "n=" << n << " panels=" << packed;
      EXPECT_TRUE(std::all_of(a.begin(), a.begin() + 48, [](float f) { return std::isfinite(f); }));
    }
  }
}

TEST(QuantGemm, OneByteNonFiniteActivationsGiveNaN) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(17);
  for (QuantType t : kTypes) {
    QuantProblem p = MakeQuantProblem(rng, t, 3, 2 * QuantBlockElems(t), 40);
    p.x[p.xs + 5] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> y = RunQuantGemm(p, 3, 0, nullptr, ops::QuantActBytes::kOne);
    for (int64_t o = 0; o < p.out; ++o) {
      EXPECT_TRUE(std::isfinite(y[o])) << QuantTypeName(t);
      EXPECT_TRUE(std::isnan(y[p.ys + o])) << QuantTypeName(t);
      EXPECT_TRUE(std::isfinite(y[2 * p.ys + o])) << QuantTypeName(t);
    }
  }
}

}  // namespace
}  // namespace tessera
