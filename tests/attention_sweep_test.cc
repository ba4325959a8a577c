// Every fast kernel against the reference kernel over a randomized sweep of shapes, K/V dtypes
// and structured masks.
//
// Tolerance: the reference accumulates in double from the same (already rounded) K/V values, so
// the only differences are f32 rounding in the kernels: dot products of length D <= 512 (relative
// error ~ sqrt(D) * 6e-8 on scores of magnitude <= ~60 at scale 1), exp, and the online-softmax
// rescaling. That bounds |fast - ref| by ~1e-5 on outputs of magnitude ~1; we allow 1e-4 absolute
// plus 1e-4 relative. The K/V dtype does not enter: both kernels read identical values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "attention_problem.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"

namespace tessera {
namespace {

using testing::Problem;
using testing::ProblemConfig;

constexpr double kAtol = 1e-4, kRtol = 1e-4;

void ExpectClose(const Problem& problem, const std::vector<float>& ref, const std::vector<float>& out,
                 AttentionKernel kernel);

std::vector<float> RunReference(const Problem& problem) {
  std::vector<float> ref;
  AttentionParams p = problem.Params(ref);
  AttentionContext ctx{};
  EXPECT_TRUE(Attention(p, ctx, AttentionKernel::kReference).ok());
  return ref;
}

// Runs each of `kernels` on `problem` and compares with the reference output `ref`; rows the
// reference leaves at exactly zero (no visible key) must be exactly zero.
void ExpectMatches(const Problem& problem, const std::vector<float>& ref, std::initializer_list<AttentionKernel> kernels,
                   ThreadPool* pool) {
  for (AttentionKernel kernel : kernels) {
    std::vector<float> out;
    AttentionParams pk = problem.Params(out);
    Arena scratch;
    AttentionContext ctx{pool, &scratch};
    Status st = Attention(pk, ctx, kernel);
    ASSERT_TRUE(st.ok()) << st.message();
    ExpectClose(problem, ref, out, kernel);
  }
}

void ExpectMatchesReference(const Problem& problem, AttentionKernel kernel, ThreadPool* pool) {
  ExpectMatches(problem, RunReference(problem), {kernel}, pool);
}

void ExpectClose(const Problem& problem, const std::vector<float>& ref, const std::vector<float>& out,
                 AttentionKernel kernel) {
  const ProblemConfig& c = problem.config();
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << "non-finite output at " << i << " " << c.Describe();
    const double err = std::fabs(double(out[i]) - ref[i]);
    ASSERT_LE(err, kAtol + kRtol * std::fabs(ref[i]))
        << AttentionKernelName(kernel) << " element " << i << " got " << out[i] << " want " << ref[i] << "\n"
        << c.Describe();
  }
  for (size_t row = 0; row < ref.size() / c.dv; ++row) {
    bool ref_zero = true, out_zero = true;
    for (int64_t d = 0; d < c.dv; ++d) {
      ref_zero &= ref[row * c.dv + d] == 0.0f;
      out_zero &= out[row * c.dv + d] == 0.0f;
    }
    if (ref_zero) {
      EXPECT_TRUE(out_zero) << "fully masked row " << row << " must be zeros; " << c.Describe();
    }
  }
}

// The sweep of the issue: head_dim x (Hq, Hkv) x S_q, with a random mask, dtype and S_kv each.
class AttentionSweep : public ::testing::TestWithParam<std::tuple<int, std::pair<int, int>, int>> {};

TEST_P(AttentionSweep, FastKernelsMatchReference) {
  const auto [d, heads, s_q] = GetParam();
  const auto [hq, hkv] = heads;
  std::mt19937 rng(1000003u * d + 7919u * hq + 104729u * hkv + s_q);
  ThreadPool pool(3);  // odd thread count: uneven splits
  // Keep reference cost bounded (~30M multiply-adds per case) while reaching 2048 keys.
  const int64_t budget = 30'000'000;
  const int64_t max_kv = std::clamp<int64_t>(budget / (int64_t{2} * hq * s_q * d), 8, 2048);
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t s_kv = std::max<int64_t>(s_q, std::uniform_int_distribution<int64_t>(max_kv / 3, max_kv)(rng));
    const DType dtype = static_cast<DType>(trial % 3);
    const ProblemConfig cfg = testing::RandomMaskConfig(rng, 2, hq, hkv, s_q, s_kv, d, dtype);
    Problem problem(cfg, rng());
    SCOPED_TRACE(cfg.Describe());
    const std::vector<float> ref = RunReference(problem);
    ExpectMatches(problem, ref, {AttentionKernel::kPrefill, AttentionKernel::kAuto}, &pool);
    ExpectMatches(problem, ref, {AttentionKernel::kAuto}, nullptr);  // single-threaded
    if (s_q <= 64) ExpectMatches(problem, ref, {AttentionKernel::kDecode}, &pool);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionSweep,
                         ::testing::Combine(::testing::Values(64, 128, 256, 512),
                                            ::testing::Values(std::pair{1, 1}, std::pair{8, 4}, std::pair{16, 8},
                                                              std::pair{16, 1}),
                                            ::testing::Values(1, 3, 64, 257)));

// Long contexts for decode: 2048 keys, one query, every mask feature.
TEST(AttentionDecode, LongContextAllFeatures) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 12; ++trial) {
    ProblemConfig cfg = testing::RandomMaskConfig(rng, 2, 16, trial % 2 ? 1 : 8, 1, 2048, trial % 3 ? 256 : 512,
                                                  static_cast<DType>(trial % 3));
    Problem problem(cfg, rng());
    ExpectMatchesReference(problem, AttentionKernel::kDecode, &pool);
  }
}

// Each mask feature alone at a shape with several tiles in both directions.
TEST(AttentionMasks, EachFeatureAlone) {
  ThreadPool pool(2);
  for (int feature = 0; feature < 13; ++feature) {
    ProblemConfig c;
    c.batch = 3, c.hq = 4, c.hkv = 2, c.s_q = 150, c.s_kv = 300, c.d = 64, c.dv = 48;
    switch (feature) {
      case 0: break;                                             // plain causal
      case 1: c.window_left = 63, c.window_right = 0; break;     // HF sliding_window = 64
      case 2: c.blocks = true; break;
      case 3: c.blocks = true, c.window_left = 20, c.window_right = 0; break;  // window < block
      case 4: c.padding = true; break;
      case 5: c.ring = true, c.window_left = 100, c.window_right = 0; break;
      case 6: c.causal = false, c.window_left = 5, c.window_right = 7; break;
      case 7: c.dense = 2; break;
      case 8: c.dense = 3, c.blocks = true; break;
      case 9: c.random_q_pos = true, c.softcap = 2.0f, c.scale = 1.0f; break;
      case 10: c.blocks = true, c.blocks_ignore_window = true, c.window_left = 20, c.window_right = 0; break;
      // Bidirectional, no window (the vision towers): at f32 on AVX-512, query blocks of
      // kWideRowsPerFullBlock rows (300 rows here: a full block and a partial one).
      case 11: c.causal = false; break;
      case 12: c.causal = false, c.padding = true; break;
    }
    Problem problem(c, 77 + feature);
    SCOPED_TRACE(c.Describe());
    ExpectMatches(problem, RunReference(problem), {AttentionKernel::kPrefill, AttentionKernel::kDecode}, &pool);
  }
}

// Kernels must not read K/V that no query can see: NaN there would poison the output.
TEST(AttentionMasks, InvisibleKeysAreNeverRead) {
  ThreadPool pool(2);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 16; ++trial) {
    ProblemConfig c = testing::RandomMaskConfig(rng, 2, 8, 2, trial % 2 ? 1 : 96, 700, 64,
                                                static_cast<DType>(trial % 3));
    c.dense = 0;
    c.padding = true;
    if (trial % 4 == 0) c.window_left = 40, c.window_right = c.causal ? 0 : 3;
    Problem problem(c, rng());
    problem.PoisonInvisibleKeys();
    SCOPED_TRACE(c.Describe());
    ExpectMatches(problem, RunReference(problem), {AttentionKernel::kPrefill, AttentionKernel::kDecode}, &pool);
  }
}

// Scratch planning must cover what the kernels take for every shape, including the tiniest (each
// Take() rounds to 64 bytes), on a fresh arena: an undersized plan aborts with "arena overflow".
TEST(AttentionScratch, FreshArenaSufficesForTinyShapes) {
  for (int64_t dv : {1, 3, 8, 17}) {
    for (int64_t hq : {1, 2, 4}) {
      for (int threads : {1, 2, 3}) {
        ProblemConfig c;
        c.batch = 1, c.hq = hq, c.hkv = 1, c.s_q = 1, c.s_kv = 1 + dv, c.d = 8, c.dv = dv;
        Problem problem(c, 5);
        ThreadPool pool(threads);
        ExpectMatches(problem, RunReference(problem), {AttentionKernel::kDecode, AttentionKernel::kPrefill}, &pool);
      }
    }
  }
}

TEST(AttentionMasks, FullyMaskedRowsAreZero) {
  ProblemConfig c;
  c.batch = 2, c.hq = 2, c.hkv = 1, c.s_q = 5, c.s_kv = 70, c.d = 16, c.dv = 16;
  c.padding = true;  // row 0 has kv_valid = 0
  Problem problem(c, 3);
  std::vector<float> out;
  AttentionParams p = problem.Params(out);
  Arena scratch;
  AttentionContext ctx{nullptr, &scratch};
  for (AttentionKernel k : {AttentionKernel::kReference, AttentionKernel::kPrefill, AttentionKernel::kDecode}) {
    ASSERT_TRUE(Attention(p, ctx, k).ok());
    for (int64_t i = 0; i < c.hq * c.s_q * c.dv; ++i) ASSERT_EQ(out[i], 0.0f) << AttentionKernelName(k);
  }
}

}  // namespace
}  // namespace tessera
