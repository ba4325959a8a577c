// Attention sinks (AttentionParams::sink), softmax precisions other than f32 and AttentionScores:
// hand-checkable cases for each, then every kernel against the reference kernel with sinks over
// random masks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attention_problem.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/thread_pool.h"

namespace tessera {
namespace {

using testing::Problem;
using testing::ProblemConfig;

const float kNegInf = -std::numeric_limits<float>::infinity();

// One head, D = 1, scale 1: query i has q[i], keys k[j], values v[j], positions 0.. in order.
struct Tiny {
  std::vector<float> q, k, v, out;
  std::vector<int32_t> q_pos, k_pos;
  AttentionParams p;

  Tiny(std::vector<float> q_in, std::vector<float> k_in, std::vector<float> v_in, bool causal)
      : q(std::move(q_in)), k(std::move(k_in)), v(std::move(v_in)), out(q.size(), -1.0f) {
    const int64_t S_q = static_cast<int64_t>(q.size()), S_kv = static_cast<int64_t>(k.size());
    for (int64_t i = 0; i < S_q; ++i) q_pos.push_back(static_cast<int32_t>(S_kv - S_q + i));
    for (int64_t j = 0; j < S_kv; ++j) k_pos.push_back(static_cast<int32_t>(j));
    p.q = HeadsView::Dense(q.data(), DType::kF32, 1, 1, S_q, 1);
    p.k = HeadsView::Dense(k.data(), DType::kF32, 1, 1, S_kv, 1);
    p.v = HeadsView::Dense(v.data(), DType::kF32, 1, 1, S_kv, 1);
    p.out = OutView::Dense(out.data(), 1, 1, S_q, 1);
    p.mask.q_pos = q_pos.data();
    p.mask.k_pos = k_pos.data();
    p.mask.causal = causal;
  }
};

std::vector<float> RunKernel(const AttentionParams& p, std::vector<float>& out, AttentionKernel kernel) {
  Arena scratch;
  AttentionContext ctx{nullptr, &scratch};
  const Status st = Attention(p, ctx, kernel);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

// Two keys with scores 0 and ln 3 (exp: 1 and 3) and values 0 and 4; a sink z adds e^z to the
// denominator: the output is 12 / (4 + e^z).
TEST(AttentionSink, JoinsTheDenominatorInEveryKernel) {
  for (float z : {kNegInf, 0.0f, std::log(4.0f), 5.0f}) {
    Tiny t({1}, {0, std::log(3.0f)}, {0, 4}, true);
    const float sink[1] = {z};
    t.p.sink = sink;
    for (AttentionKernel kernel : {AttentionKernel::kReference, AttentionKernel::kPrefill, AttentionKernel::kDecode}) {
      RunKernel(t.p, t.out, kernel);
      EXPECT_NEAR(t.out[0], 12.0 / (4.0 + std::exp(static_cast<double>(z))), 1e-6) << "sink " << z << " "
                                                                                      << AttentionKernelName(kernel);
    }
  }
}

TEST(AttentionSink, RowWithoutVisibleKeyStaysZero) {
  Tiny t({1, 1}, {0, 1}, {5, 5}, true);  // query 0 at position 0 ...
  std::vector<int32_t> valid = {0};      // ... but no key is valid
  t.p.mask.kv_valid = valid.data();
  const float sink[1] = {-3.0f};
  t.p.sink = sink;
  for (AttentionKernel kernel : {AttentionKernel::kReference, AttentionKernel::kPrefill, AttentionKernel::kDecode}) {
    RunKernel(t.p, t.out, kernel);
    EXPECT_EQ(t.out[0], 0.0f);
    EXPECT_EQ(t.out[1], 0.0f);
  }
}

TEST(AttentionSink, NaNOrPlusInfIsRefused) {
  Tiny t({1}, {0}, {1}, true);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const float sink[1] = {bad};
    t.p.sink = sink;
    const Status st = ValidateAttention(t.p);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("sink[0]"), std::string::npos) << st.message();
  }
}

// Random masks (windows, blocks, padding, dense masks, softcap) and sinks: the tiled kernels
// against the reference kernel, which the by-hand case above pins down.
TEST(AttentionSink, KernelsMatchReferenceOverRandomMasks) {
  std::mt19937 rng(20);
  ThreadPool pool(2);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t s_q = trial % 3 == 0 ? 1 : 1 + trial * 7, s_kv = 40 + trial * 23;
    const DType dtype = trial % 4 == 3 ? DType::kBF16 : DType::kF32;
    const ProblemConfig cfg = testing::RandomMaskConfig(rng, 2, 8, 2, s_q, s_kv, 64, dtype);
    Problem problem(cfg, 1000 + trial);
    std::vector<float> sink(cfg.hq);
    for (int64_t h = 0; h < cfg.hq; ++h) sink[h] = h == 0 ? kNegInf : std::normal_distribution<float>(0.0f, 3.0f)(rng);
    // bf16 K/V also at precision bf16 (the dot-product kernels where the CPU has them), whose
    // weights are rounded differently from the reference's: 2^-7 max|v| more (attention_bf16_test).
    for (AttentionPrecision precision : {AttentionPrecision::kF32, AttentionPrecision::kBf16}) {
      if (precision == AttentionPrecision::kBf16 && dtype != DType::kBF16) continue;
      const double atol = 1e-4 + (precision == AttentionPrecision::kBf16 ? std::ldexp(problem.MaxAbsFiniteV(), -7) : 0);
      std::vector<float> ref, out;
      AttentionParams pr = problem.Params(ref);
      pr.sink = sink.data();
      pr.precision = precision;
      RunKernel(pr, ref, AttentionKernel::kReference);
      for (AttentionKernel kernel : {AttentionKernel::kPrefill, AttentionKernel::kDecode}) {
        AttentionParams pk = problem.Params(out);
        pk.sink = sink.data();
        pk.precision = precision;
        Arena scratch;
        AttentionContext ctx{&pool, &scratch};
        ASSERT_TRUE(Attention(pk, ctx, kernel).ok());
        for (size_t i = 0; i < ref.size(); ++i)
          ASSERT_NEAR(out[i], ref[i], atol + 1e-4 * std::fabs(ref[i]))
              << cfg.Describe() << " " << AttentionKernelName(kernel) << " " << AttentionPrecisionName(precision)
              << " at " << i;
      }
    }
  }
}

TEST(SoftmaxPrecision, OtherThanF32RunsOnTheReferenceKernel) {
  Tiny t({0.3f}, {0, 1}, {1, 2}, false);
  t.p.softmax_precision = SoftmaxPrecision::kF64;
  EXPECT_EQ(ChooseAttentionKernel(t.p), AttentionKernel::kReference);
  std::vector<float> ref = t.out;
  {
    AttentionParams pr = t.p;
    pr.out = OutView::Dense(ref.data(), 1, 1, 1, 1);
    RunKernel(pr, ref, AttentionKernel::kReference);
  }
  RunKernel(t.p, t.out, AttentionKernel::kAuto);
  EXPECT_EQ(t.out, ref);
  Arena scratch;
  AttentionContext ctx{nullptr, &scratch};
  const Status st = Attention(t.p, ctx, AttentionKernel::kPrefill);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("softmax precision f64 runs on the reference kernel only"), std::string::npos)
      << st.message();
}

// bf16 / f16: the softmax input is rounded to the type, the normalized weights too. Scores 0 and
// 0.3 (0.30078125 in bf16, 0.300048828125 in f16), values 0 and 1: the output is the rounded
// weight of key 1.
TEST(SoftmaxPrecision, SixteenBitRoundsTheSoftmaxInputAndOutput) {
  for (SoftmaxPrecision sp : {SoftmaxPrecision::kBf16, SoftmaxPrecision::kF16}) {
    const bool bf16 = sp == SoftmaxPrecision::kBf16;
    auto round = [bf16](double x) {
      return bf16 ? Bf16ToF32(F32ToBf16(static_cast<float>(x))) : F16ToF32(F32ToF16(static_cast<float>(x)));
    };
    const double s1 = bf16 ? 0.30078125 : 0.300048828125;
    ASSERT_EQ(round(0.3), s1);
    Tiny t({1}, {0, 0.3f}, {0, 1}, false);
    t.p.softmax_precision = sp;
    RunKernel(t.p, t.out, AttentionKernel::kAuto);
    EXPECT_EQ(t.out[0], static_cast<float>(round(std::exp(s1) / (1.0 + std::exp(s1))))) << SoftmaxPrecisionName(sp);
  }
}

// Two queries (positions 0 and 1), keys 0 and ln 3, values 0 and 4, causal, an additive bias of
// 0.5 on key 0 for query 1; softcap c = 10.
TEST(AttentionScores, EveryStageByHand) {
  const float ln3 = std::log(3.0f), c = 10.0f, m = -7.0f;
  Tiny t({1, 1}, {0, ln3}, {0, 4}, true);
  const std::vector<float> bias = {0, 0, 0.5f, 0};  // [S_q, S_kv]
  t.p.mask.dense = {DenseMask::Kind::kAdditive, bias.data(), 0, 0, 2, 1};
  t.p.softcap = c;
  const float cap3 = c * std::tanh(ln3 / c);
  std::vector<float> s(4);
  ASSERT_TRUE(AttentionScores(t.p, ScoreStage::kRaw, m, s.data()).ok());
  EXPECT_EQ(s, (std::vector<float>{0, ln3, 0, ln3}));  // every pair, the masked one too
  ASSERT_TRUE(AttentionScores(t.p, ScoreStage::kSoftcapped, m, s.data()).ok());
  EXPECT_EQ(s, (std::vector<float>{0, cap3, 0, cap3}));
  ASSERT_TRUE(AttentionScores(t.p, ScoreStage::kMasked, m, s.data()).ok());
  EXPECT_EQ(s, (std::vector<float>{0, m, 0.5f, cap3}));
  ASSERT_TRUE(AttentionScores(t.p, ScoreStage::kProbabilities, m, s.data()).ok());
  const double e0 = std::exp(0.5), e1 = std::exp(static_cast<double>(cap3));
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_NEAR(s[2], e0 / (e0 + e1), 1e-7);
  EXPECT_NEAR(s[3], e1 / (e0 + e1), 1e-7);
  const float sink[1] = {1.0f};
  t.p.sink = sink;
  ASSERT_TRUE(AttentionScores(t.p, ScoreStage::kProbabilities, m, s.data()).ok());
  EXPECT_NEAR(s[0], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(s[3], e1 / (e0 + e1 + std::exp(1.0)), 1e-7);
}

}  // namespace
}  // namespace tessera
