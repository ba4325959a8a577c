// Attention at precision bf16 (q and the softmax weights rounded to bf16 before their products):
// the AVX-512-BF16 micro-kernels against double references, and every kernel path (bf16 dot
// products where the CPU has them, the f32 kernels on rounded values everywhere) against the
// reference kernel at the same precision.
//
// Tolerance at the attention level: the reference rounds each normalized weight p_t to bf16, the
// kernels round the running numerators exp(s_t - m) of their tile; both are within a factor
// (1 +- 2^-8) of the exact weight, so outputs differ by at most 2 * 2^-8 * sum_t p_t |v_t| <=
// 2^-7 max|v| beyond the f32 differences the f32 sweep allows (1e-4 absolute + 1e-4 relative).
// q is rounded identically on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attention_problem.h"
#include "pv_check.h"
#include "ops/bf16_dot.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"

namespace tessera {
namespace {

using testing::Problem;
using testing::ProblemConfig;

// f32 sums of up to 1024 exact products in 64-term chunks: |error| <= ~80 * 2^-24 * sum |terms|.
constexpr double kSumRel = 1.0 / (1 << 17);

std::vector<uint16_t> RandomBf16(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> nd;
  std::vector<uint16_t> out(n);
  for (auto& x : out) x = F32ToBf16(nd(rng));
  return out;
}

TEST(Bf16Dot, ScoreRows16MatchesDouble) {
  const ops::Bf16DotKernels* dot = ops::Bf16Dot();
  if (!dot) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(3);
  for (int64_t pairs : {1, 7, 31, 32, 33, 64, 128, 256}) {
    for (int n : {1, 5, 8, 9, 16, 63, 64}) {
      const std::vector<uint16_t> q = RandomBf16(rng, 16 * 2 * pairs);     // [16 rows][2 pairs]
      const std::vector<uint16_t> k = RandomBf16(rng, n * (2 * pairs + 6));  // rows with a stride gap
      AlignedBuffer panel_buf(pairs * 16 * 4);
      uint32_t* panel = reinterpret_cast<uint32_t*>(panel_buf.data());
      for (int r = 0; r < 16; ++r)
        for (int64_t p = 0; p < pairs; ++p)
          panel[p * 16 + r] = q[r * 2 * pairs + 2 * p] | static_cast<uint32_t>(q[r * 2 * pairs + 2 * p + 1]) << 16;
      std::vector<const uint16_t*> rows(n);
      for (int t = 0; t < n; ++t) rows[t] = k.data() + t * (2 * pairs + 6);
      std::vector<float> out(n * 16, NAN);
      // Prefetching the rows themselves while computing must not change anything.
      const ops::PrefetchRows ahead{k.data(), (2 * pairs + 6) * 2, 2 * pairs * 2, n};
      dot->score_rows16(panel, pairs, rows.data(), n, out.data(), n % 2 ? &ahead : nullptr);
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < 16; ++r) {
          double want = 0, mag = 0;
          for (int64_t d = 0; d < 2 * pairs; ++d) {
            const double x = double(Bf16ToF32(q[r * 2 * pairs + d])) * Bf16ToF32(rows[t][d]);
            want += x, mag += std::fabs(x);
          }
          ASSERT_NEAR(out[t * 16 + r], want, kSumRel * mag + 1e-30) << "pairs " << pairs << " n " << n << " t " << t << " r " << r;
        }
    }
  }
}

TEST(Bf16Dot, PvTileMatchesDouble) {
  const ops::Bf16DotKernels* dot = ops::Bf16Dot();
  if (!dot) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(4);
  for (int64_t rows : {1, 2, 7, 63, 64}) {
    for (int64_t cols : {1, 15, 16, 17, 40, 256, 512}) {
      const int64_t stride = cols + 3, pairs = (rows + 1) / 2, blocks = (cols + 15) / 16;
      const std::vector<uint16_t> v = RandomBf16(rng, rows * stride);
      // The panels, written here from their definition: (v[2p][16c + j], v[2p + 1][16c + j]),
      // zero past rows and cols.
      AlignedBuffer vp_buf((blocks + 1) * pairs * 16 * 4);
      uint32_t* vp = reinterpret_cast<uint32_t*>(vp_buf.data());
      auto at = [&](int64_t t, int64_t c) -> uint32_t { return t < rows && c < cols ? v[t * stride + c] : 0; };
      for (int64_t c = 0; c < blocks; ++c)
        for (int64_t p = 0; p < pairs; ++p)
          for (int j = 0; j < 16; ++j)
            vp[(c * pairs + p) * 16 + j] = at(2 * p, 16 * c + j) | at(2 * p + 1, 16 * c + j) << 16;
      // 8 weight rows (bf16 pairs) times the panels, added to c.
      const std::vector<uint16_t> wv = RandomBf16(rng, 8 * 2 * pairs);
      std::vector<uint32_t> w_words(8 * pairs);
      for (int r = 0; r < 8; ++r)
        for (int64_t p = 0; p < pairs; ++p)
          w_words[r * pairs + p] = wv[r * 2 * pairs + 2 * p] | static_cast<uint32_t>(wv[r * 2 * pairs + 2 * p + 1]) << 16;
      for (int mr : {1, 3, 8}) {
        const int64_t cs = cols + 32;
        std::vector<float> c(8 * cs, 0.5f);
        const std::vector<float> c0 = c;
        const uint32_t* w[8];
        for (int r = 0; r < 8; ++r) w[r] = w_words.data() + (r < mr ? r : 0) * pairs;
        // With mr 3 the kernel also prefetches V's rows meanwhile, which must change nothing.
        const ops::PrefetchRows ahead{v.data(), stride * 2, cols * 2, rows};
        for (int64_t j0 = 0; j0 < cols; j0 += 32)
          dot->pv_tile(w, vp + j0 / 16 * pairs * 16, pairs, pairs * 16, c.data() + j0, cs, mr,
                       static_cast<int>(std::min<int64_t>(32, cols - j0)), mr == 3 ? &ahead : nullptr);
        for (int r = 0; r < 8; ++r)
          for (int64_t j = 0; j < cs; ++j) {
            if (r >= mr || j >= cols) {
              ASSERT_EQ(c[r * cs + j], c0[r * cs + j]) << "wrote outside the tile: r " << r << " j " << j;
              continue;
            }
            // Padding keys (past an odd row count) hold zeros in the panel, so all 2 * pairs count.
            double want = 0.5, mag = 0.5;
            for (int64_t t = 0; t < rows; ++t) {
              const double x = double(Bf16ToF32(wv[r * 2 * pairs + t])) * Bf16ToF32(v[t * stride + j]);
              want += x, mag += std::fabs(x);
            }
            ASSERT_NEAR(c[r * cs + j], want, kSumRel * mag) << "rows " << rows << " cols " << cols << " mr " << mr;
          }
      }
    }
  }
}

TEST(Bf16Dot, PvRows16MatchesDouble) {
  const ops::Bf16DotKernels* dot = ops::Bf16Dot();
  if (!dot) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(6);
  for (int n : {1, 2, 7, 33, 63, 64}) {
    for (int64_t cols : {1, 15, 16, 17, 31, 32, 33, 40, 512}) {
      const int64_t stride = cols + 3;
      std::vector<uint16_t> v = RandomBf16(rng, n * stride);
      // Weights key-major, [32 pairs][16 rows]; rows past mr hold NaN, which must reach no result.
      const std::vector<uint16_t> wv = RandomBf16(rng, 16 * 64);
      std::vector<uint32_t> w(32 * 16);
      for (int mr : {1, 3, 4, 5, 8, 9, 12, 13, 16}) {
        for (int r = 0; r < 16; ++r)
          for (int p = 0; p < 32; ++p) {
            const uint32_t lo = wv[r * 64 + 2 * p], hi = 2 * p + 1 < n ? wv[r * 64 + 2 * p + 1] : 0;
            w[p * 16 + r] = r < mr ? lo | hi << 16 : 0x7fc07fc0u;  // (bf16 NaN, NaN)
          }
        // Every key, then a random subset: the other keys' V rows hold NaN, which must not be read.
        for (int subset : {0, 1}) {
          uint64_t keys = ~uint64_t{0};
          std::vector<uint16_t> vk = v;
          if (subset) {
            keys = std::uniform_int_distribution<uint64_t>()(rng);
            for (int t = 0; t < n; ++t)
              if (!(keys >> t & 1))
                std::fill(vk.begin() + t * stride, vk.begin() + t * stride + cols, uint16_t{0x7fc0});  // NaN
          }
          // Rescale factors in every other case (some rows 1, others not; NaN past mr, which must
          // reach no result), null in the rest.
          testing::PvCase pc(n, mr, subset, cols);
          // With odd n the kernel also prefetches V's rows meanwhile, which must change nothing.
          const ops::PrefetchRows ahead{vk.data(), stride * 2, cols * 2, n};
          dot->pv_rows16(w.data(), vk.data(), stride, n, keys, pc.c.data(), pc.cs, mr, pc.Alpha(), cols,
                         n % 2 ? &ahead : nullptr);
          ASSERT_TRUE(testing::PvRowsMatch(pc, mr, cols, n, keys, wv.data(), vk.data(), stride,
                                           [](double mag) { return kSumRel * mag; }))
              << "n " << n << " cols " << cols << " mr " << mr << " subset " << subset << " rescale " << pc.rescale;
        }
      }
    }
  }
}

TEST(Bf16Dot, SoftmaxPanel16MatchesDouble) {
  const ops::Bf16DotKernels* dot = ops::Bf16Dot();
  if (!dot) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const float inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 2, 7, 33, 64}) {
    for (int mr : {1, 5, 16}) {
      AlignedBuffer st_buf(64 * 16 * 4), w_buf(32 * 16 * 4);
      float* st = reinterpret_cast<float*>(st_buf.data());
      uint32_t* w = reinterpret_cast<uint32_t*>(w_buf.data());
      for (int i = 0; i < 64 * 16; ++i) st[i] = 4 * nd(rng);
      // Running states: row 0 has seen nothing (-inf), row 1 a max above this tile's, the rest
      // random; row 2 sees only -inf scores in this tile (its max and sum must not move).
      float m[16], l[16], alpha[16];
      for (int r = 0; r < 16; ++r) m[r] = 2 * nd(rng), l[r] = 1 + std::fabs(nd(rng));
      m[0] = -inf, l[0] = 0, m[1] = 1000;
      for (int t = 0; t < n; ++t) st[t * 16 + 2] = -inf;
      float m0[16], l0[16];
      std::copy(m, m + 16, m0), std::copy(l, l + 16, l0);
      for (int i = 0; i < 32 * 16; ++i) w[i] = 0xdeadbeefu;
      const float scale = 0.3f;
      dot->softmax_panel16(st, n, scale, m, l, mr, /*all_visible=*/false, alpha, w);
      for (int r = 0; r < 16; ++r) {
        if (r >= mr) {  // untouched
          ASSERT_EQ(m[r], m0[r]) << r;
          ASSERT_EQ(l[r], l0[r]) << r;
          continue;
        }
        float tile_max = -inf;
        for (int t = 0; t < n; ++t) tile_max = std::max(tile_max, scale * st[t * 16 + r]);
        const float m_new = std::max(m0[r], tile_max);
        ASSERT_EQ(m[r], m_new) << "n " << n << " r " << r;
        const double a = m_new == m0[r] ? 1.0 : std::exp(double(m0[r]) - m_new);
        ASSERT_NEAR(alpha[r], a, 1e-6 * a + 1e-37) << "n " << n << " r " << r;
        double sum = 0;
        for (int t = 0; t < 2 * ((n + 1) / 2); ++t) {
          const double e = t < n && m_new != -inf ? std::exp(double(scale * st[t * 16 + r]) - m_new) : 0.0;
          sum += e;
          const uint32_t word = w[t / 2 * 16 + r];
          const float got = Bf16ToF32(static_cast<uint16_t>(t % 2 ? word >> 16 : word & 0xffff));
          // bf16 of a weight within 1e-6 relative of exp: at most half a bf16 step (2^-8 of the
          // value) off, flushed to zero below 2^-126.
          ASSERT_NEAR(got, e, e * (1.0 / 256 + 1e-6) + std::ldexp(1.0, -126)) << "n " << n << " r " << r << " t " << t;
        }
        const double want_l = l0[r] * a + sum;
        ASSERT_NEAR(l[r], want_l, 1e-6 * want_l) << "n " << n << " r " << r;
      }
    }
  }
}

TEST(Bf16Dot, ScoresToRowsAndPairsFromF32) {
  const ops::Bf16DotKernels* dot = ops::Bf16Dot();
  if (!dot) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (int n : {1, 15, 16, 17, 33, 63, 64}) {
    for (int rows : {1, 7, 16}) {
      std::vector<float> st(64 * 16), s(16 * 70, -1.0f);
      for (float& x : st) x = nd(rng);
      dot->scores_to_rows(st.data(), n, 0.37f, s.data(), 70, rows);
      for (int r = 0; r < 16; ++r)
        for (int t = 0; t < 70; ++t) {
          const float want = r < rows && t < n ? 0.37f * st[t * 16 + r] : -1.0f;  // untouched elsewhere
          ASSERT_EQ(s[r * 70 + t], want) << "n " << n << " rows " << rows << " r " << r << " t " << t;
        }
    }
    // Weights (exp outputs in [0, 1]) and q values (any sign), ties, values that round up to the
    // next binade, denormals.
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i) {
      const int kind = i % 7;
      x[i] = kind == 0 ? std::exp(-std::fabs(nd(rng)) * 10) : kind == 1 ? 1.0f + 3.0f * std::ldexp(1.0f, -9)
             : kind == 2 ? std::nextafter(2.0f, 0.0f) : kind == 3 ? std::ldexp(1.0f, -130)
             : kind == 4 ? 0.0f : kind == 5 ? -nd(rng) * 100 : -std::ldexp(1.0f, -131);
    }
    std::vector<uint32_t> w((n + 1) / 2 + 4, 0xdeadbeefu);
    dot->pairs_from_f32(x.data(), n, w.data());
    for (int p = 0; p < (n + 1) / 2 + 4; ++p) {
      if (p >= (n + 1) / 2) {
        ASSERT_EQ(w[p], 0xdeadbeefu) << "wrote past the last pair, n " << n;
        continue;
      }
      auto want = [&](int i) -> uint32_t {
        if (i >= n) return 0;
        // denormals flush to a zero of their sign
        return std::fabs(x[i]) < std::ldexp(1.0f, -126) ? (std::signbit(x[i]) ? 0x8000u : 0u) : F32ToBf16(x[i]);
      };
      ASSERT_EQ(w[p], want(2 * p) | want(2 * p + 1) << 16) << "n " << n << " pair " << p;
    }
  }
}

void ExpectBf16Close(const Problem& problem, const std::vector<float>& ref, const std::vector<float>& out,
                     const char* what) {
  const double weights = std::ldexp(problem.MaxAbsFiniteV(), -7);
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << what << " non-finite at " << i;
    ASSERT_LE(std::fabs(double(out[i]) - ref[i]), 1e-4 + 1e-4 * std::fabs(ref[i]) + weights)
        << what << " element " << i << " got " << out[i] << " want " << ref[i] << "\n" << problem.config().Describe();
  }
  // Rows without a visible key are exact zeros.
  const int64_t dv = problem.config().dv;
  for (size_t row = 0; row < ref.size() / dv; ++row)
    if (std::all_of(ref.begin() + row * dv, ref.begin() + (row + 1) * dv, [](float x) { return x == 0.0f; })) {
      ASSERT_TRUE(std::all_of(out.begin() + row * dv, out.begin() + (row + 1) * dv, [](float x) { return x == 0.0f; }))
          << what << " fully masked row " << row;
    }
}

// Runs run(mode) on each bf16 path: 0 AMX panels (where the CPU has them), 1 the dot products
// alone, 2 the f32 kernels on rounded operands; then turns both back on.
template <typename Fn>
void ForEachBf16Path(Fn run) {
  for (int mode : {0, 1, 2}) {
    ops::EnableBf16Amx(mode == 0);
    ops::EnableBf16Dot(mode < 2);
    run(mode);
  }
  ops::EnableBf16Amx(true);
  ops::EnableBf16Dot(true);
}

// Shapes where the dot-product path engages (blocks of >= 4 rows: prefill, decode with groups of
// 4 and 16; on AMX tiles where head dims are multiples of 32) and where it does not (groups of 1-2,
// odd head_dim), each on AMX, on the dot products alone and on neither, against the bf16 reference; f32 precision must be unchanged by the option's existence.
TEST(AttentionBf16, AllPathsMatchBf16Reference) {
  ThreadPool pool(3);
  std::mt19937 rng(21);
  struct Shape {
    int64_t hq, hkv, s_q, s_kv, d;
  };
  const Shape shapes[] = {{16, 1, 1, 700, 512}, {16, 8, 1, 900, 256}, {16, 1, 1, 1, 64},   {8, 2, 1, 130, 256},
                          {16, 1, 3, 300, 512}, {8, 4, 64, 257, 256}, {4, 4, 37, 120, 63}, {16, 8, 257, 300, 128},
                          {2, 1, 100, 100, 2}, {16, 16, 5, 66, 32}};
  for (const Shape& s : shapes) {
    for (int trial = 0; trial < 2; ++trial) {
      ProblemConfig cfg = testing::RandomMaskConfig(rng, 2, s.hq, s.hkv, s.s_q, s.s_kv, s.d, DType::kBF16);
      Problem problem(cfg, rng());
      SCOPED_TRACE(cfg.Describe());
      const std::vector<float> ref = problem.Run(AttentionPrecision::kBf16, AttentionKernel::kReference, nullptr);
      ForEachBf16Path([&](int mode) {
        for (AttentionKernel k : {AttentionKernel::kPrefill, AttentionKernel::kDecode})
          for (ThreadPool* p : {&pool, static_cast<ThreadPool*>(nullptr)}) {
            const std::vector<float> out = problem.Run(AttentionPrecision::kBf16, k, p);
            const std::string what = AttentionKernelName(k) + std::string(" mode ") + std::to_string(mode);
            ExpectBf16Close(problem, ref, out, what.c_str());
          }
      });
    }
  }
}

// The vision towers' case: no causal order, window or dense mask (every tile fully visible), where
// prefill blocks hold kWideRowsPerFullBlock query rows on AVX-512 CPUs: several blocks per head,
// a partial last one, key padding (kv_valid) on one config, against the bf16 reference on AMX,
// the dot products and the f32 kernels.
TEST(AttentionBf16, FullyVisibleTallBlocksMatchBf16Reference) {
  ThreadPool pool(2);
  std::mt19937 rng(22);
  struct Shape {
    int64_t hq, hkv, s, d;
    bool padding;
  };
  for (const Shape& s : {Shape{4, 4, 600, 64, false}, Shape{8, 2, 333, 128, false}, Shape{2, 2, 520, 72, true}}) {
    ProblemConfig cfg;
    cfg.batch = 1, cfg.hq = s.hq, cfg.hkv = s.hkv, cfg.s_q = s.s, cfg.s_kv = s.s, cfg.d = s.d, cfg.dv = s.d;
    cfg.kv_dtype = DType::kBF16, cfg.causal = false, cfg.padding = s.padding;
    Problem problem(cfg, rng());
    SCOPED_TRACE(cfg.Describe());
    const std::vector<float> ref = problem.Run(AttentionPrecision::kBf16, AttentionKernel::kReference, nullptr);
    ForEachBf16Path([&](int mode) {
      const std::vector<float> out = problem.Run(AttentionPrecision::kBf16, AttentionKernel::kPrefill, &pool);
      ExpectBf16Close(problem, ref, out, ("prefill mode " + std::to_string(mode)).c_str());
    });
  }
}

// Invisible keys poisoned with NaN must stay unread on the bf16 paths too.
TEST(AttentionBf16, InvisibleKeysAreNeverRead) {
  ThreadPool pool(2);
  std::mt19937 rng(12);
  for (int trial = 0; trial < 8; ++trial) {
    ProblemConfig c = testing::RandomMaskConfig(rng, 2, 16, trial % 2 ? 1 : 4, trial % 2 ? 1 : 96, 700, 256, DType::kBF16);
    c.dense = 0;
    c.padding = true;
    Problem problem(c, rng());
    problem.PoisonInvisibleKeys();
    SCOPED_TRACE(c.Describe());
    const std::vector<float> ref = problem.Run(AttentionPrecision::kBf16, AttentionKernel::kReference, nullptr);
    for (AttentionKernel k : {AttentionKernel::kPrefill, AttentionKernel::kDecode})
      ExpectBf16Close(problem, ref, problem.Run(AttentionPrecision::kBf16, k, &pool), AttentionKernelName(k));
  }
}

// The bound above is not vacuous: bf16 precision really differs from f32 by more than the f32
// tolerance on these problems, and the reference's rounding is what the kernels reproduce.
TEST(AttentionBf16, DiffersFromF32ByRoundingOnly) {
  ProblemConfig c;
  c.batch = 1, c.hq = 16, c.hkv = 1, c.s_q = 1, c.s_kv = 200, c.d = 256, c.dv = 256, c.kv_dtype = DType::kBF16;
  Problem problem(c, 9);
  const std::vector<float> f32 = problem.Run(AttentionPrecision::kF32, AttentionKernel::kReference, nullptr);
  const std::vector<float> bf = problem.Run(AttentionPrecision::kBf16, AttentionKernel::kReference, nullptr);
  const std::vector<float> fast = problem.Run(AttentionPrecision::kBf16, AttentionKernel::kDecode, nullptr);
  double ref_gap = 0, fast_gap = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    ref_gap = std::max(ref_gap, std::fabs(double(bf[i]) - f32[i]));
    fast_gap = std::max(fast_gap, std::fabs(double(fast[i]) - bf[i]));
  }
  EXPECT_GT(ref_gap, 1e-4);                      // rounding q and the weights is visible
  EXPECT_LT(ref_gap, std::ldexp(problem.MaxAbsFiniteV(), -5));  // and small
  EXPECT_LT(fast_gap, std::ldexp(problem.MaxAbsFiniteV(), -7) + 1e-4);
}

// K/V rows at an odd element stride: the dot path reads K's bf16 pairs at 2-byte boundaries.
TEST(AttentionBf16, OddRowStride) {
  const int64_t hq = 16, S = 150, D = 64, stride = D + 1;
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  std::vector<float> q(hq * 3 * D), out(q.size()), ref(q.size());
  for (float& x : q) x = nd(rng);
  const std::vector<uint16_t> k = RandomBf16(rng, S * stride + 1), v = RandomBf16(rng, S * stride + 1);
  std::vector<int32_t> q_pos = {S - 3, S - 2, S - 1}, k_pos(S);
  for (int32_t j = 0; j < S; ++j) k_pos[j] = j;
  AttentionParams p;
  p.q = HeadsView::Dense(q.data(), DType::kF32, 1, hq, 3, D);
  p.k = {k.data() + 1, DType::kBF16, 1, 1, S, D, S * stride, S * stride, stride};  // starts 2 bytes in
  p.v = {v.data() + 1, DType::kBF16, 1, 1, S, D, S * stride, S * stride, stride};
  p.mask.q_pos = q_pos.data();
  p.mask.k_pos = k_pos.data();
  p.scale = 0.125f;
  p.precision = AttentionPrecision::kBf16;
  p.out = OutView::Dense(ref.data(), 1, hq, 3, D);
  AttentionContext none{};
  ASSERT_TRUE(Attention(p, none, AttentionKernel::kReference).ok());
  double max_v = 0;
  for (uint16_t x : v) max_v = std::max(max_v, double(std::fabs(Bf16ToF32(x))));
  for (AttentionKernel kernel : {AttentionKernel::kPrefill, AttentionKernel::kDecode}) {
    p.out = OutView::Dense(out.data(), 1, hq, 3, D);
    Arena scratch;
    AttentionContext ctx{nullptr, &scratch};
    ASSERT_TRUE(Attention(p, ctx, kernel).ok());
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], ref[i], 1e-4 + 1e-4 * std::fabs(ref[i]) + std::ldexp(max_v, -7)) << AttentionKernelName(kernel) << " " << i;
  }
}

TEST(AttentionBf16, NeedsBf16KeysAndValues) {
  for (DType dt : {DType::kF32, DType::kF16}) {
    ProblemConfig c;
    c.batch = 1, c.hq = 2, c.hkv = 1, c.s_q = 1, c.s_kv = 4, c.d = 8, c.dv = 8, c.kv_dtype = dt;
    Problem problem(c, 1);
    std::vector<float> out;
    AttentionParams p = problem.Params(out);
    p.precision = AttentionPrecision::kBf16;
    const Status st = ValidateAttention(p);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("precision bf16 needs bf16 K/V, got"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(DTypeName(dt)), std::string::npos) << st.message();
  }
  AttentionPrecision parsed;
  EXPECT_TRUE(ParseAttentionPrecision("bf16", &parsed));
  EXPECT_EQ(parsed, AttentionPrecision::kBf16);
  EXPECT_FALSE(ParseAttentionPrecision("fp8", &parsed));
}

}  // namespace
}  // namespace tessera
