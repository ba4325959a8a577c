// Non-finite inputs (docs/reliability.md, "Non-finite numbers"): NaN / +inf / -inf injected into
// random q rows, K and V elements (keys visible to every query, to some, or to none), over a
// randomized sweep of shapes and masks at both precisions. (Masks are validated: a NaN or +inf
// additive bias is an error, attention_validate_test.cc.)
//
// The policy, checked on the reference kernel by an oracle written from it here, and on every fast
// kernel against the reference:
//  - a row with no visible key is zeros, whatever the values;
//  - a masked key contributes nothing, whatever its K and V hold;
//  - a visible key whose score q.k * scale is not finite (a non-finite q or k element) makes the
//    whole row NaN;
//  - otherwise element d of the row is non-finite exactly where some visible key's v[d] is (NaN or
//    +-inf: which one depends on the order of the sums), and finite, within the sweeps'
//    tolerances, elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/mask.h"
#include "attention_problem.h"
#include "ops/bf16_dot.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"

namespace tessera {
namespace {

using testing::Problem;
using testing::ProblemConfig;

bool AllFinite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

// Checks `ref` (the reference kernel's output) against the policy, from the inputs alone.
void ExpectPolicy(const Problem& problem, const std::vector<float>& ref) {
  const ProblemConfig& c = problem.config();
  std::vector<float> unused;
  const AttentionParams p = problem.Params(unused);
  const MaskSpec& m = p.mask;
  const int64_t group = c.hq / c.hkv;
  std::vector<float> row(std::max(c.d, c.dv));
  // Per (b, g, j): K row finite; V row finite; V elements finite.
  std::vector<char> k_ok(c.batch * c.hkv * c.s_kv), v_row_ok(k_ok.size());
  std::vector<char> v_ok(c.batch * c.hkv * c.s_kv * c.dv);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t g = 0; g < c.hkv; ++g)
      for (int64_t j = 0; j < c.s_kv; ++j) {
        const int64_t idx = (b * c.hkv + g) * c.s_kv + j;
        DecodeToF32(p.k.dtype, p.k.At(b, g, j), row.data(), c.d);
        k_ok[idx] = AllFinite(std::vector<float>(row.begin(), row.begin() + c.d));
        DecodeToF32(p.v.dtype, p.v.At(b, g, j), row.data(), c.dv);
        for (int64_t d = 0; d < c.dv; ++d) v_ok[idx * c.dv + d] = std::isfinite(row[d]);
        v_row_ok[idx] = std::all_of(v_ok.begin() + idx * c.dv, v_ok.begin() + (idx + 1) * c.dv, [](char x) { return x; });
      }
  std::vector<char> col_ok(c.dv);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t i = 0; i < c.s_q; ++i) {
        const float* q = reinterpret_cast<const float*>(p.q.At(b, h, i));
        const bool q_ok = std::all_of(q, q + c.d, [](float x) { return std::isfinite(x); });
        const int32_t qb = m.q_block ? m.q_block[b * c.s_q + i] : -1;
        bool any = false, score_ok = true;
        std::fill(col_ok.begin(), col_ok.end(), 1);
        for (int64_t j = 0; j < attn::KvValid(m, b, c.s_kv); ++j) {
          const int32_t kb = m.k_block ? m.k_block[b * c.s_kv + j] : -1;
          if (!attn::StructuredVisible(m, m.q_pos[b * c.s_q + i], qb, m.k_pos[b * c.s_kv + j], kb)) continue;
          const float bias = attn::DenseTerm(m.dense, b, h, i, j);
          if (bias == -INFINITY) continue;
          const int64_t idx = (b * c.hkv + h / group) * c.s_kv + j;
          any = true;
          score_ok &= q_ok && k_ok[idx] && std::isfinite(bias);
          if (!v_row_ok[idx])
            for (int64_t d = 0; d < c.dv; ++d) col_ok[d] &= v_ok[idx * c.dv + d];
        }
        const float* out = ref.data() + ((b * c.hq + h) * c.s_q + i) * c.dv;
        for (int64_t d = 0; d < c.dv; ++d) {
          if (!any) {
            ASSERT_EQ(out[d], 0.0f) << "row with no visible key, b " << b << " h " << h << " i " << i;
          } else if (!score_ok) {
            ASSERT_TRUE(std::isnan(out[d])) << "non-finite score must give a NaN row, b " << b << " h " << h << " i "
                                            << i << " d " << d << " got " << out[d];
          } else {
            ASSERT_EQ(std::isfinite(out[d]), bool(col_ok[d]))
                << "b " << b << " h " << h << " i " << i << " d " << d << " got " << out[d];
          }
        }
      }
}

// Same non-finite positions as the reference; finite values within the sweep tolerances
// (attention_sweep_test.cc at f32, attention_bf16_test.cc at bf16); zero rows exactly zero.
// `extra`: the bf16 allowance, 0 at f32.
void ExpectSameAsReference(const Problem& problem, double extra, const std::vector<float>& ref,
                           const std::vector<float>& out, const char* what) {
  const int64_t dv = problem.config().dv;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(std::isfinite(out[i]), std::isfinite(ref[i]))
        << what << " element " << i << " (row " << i / dv << ") got " << out[i] << " want " << ref[i];
    const auto row_begin = ref.begin() + i / dv * dv, row_end = row_begin + dv;
    if (std::all_of(row_begin, row_end, [](float x) { return std::isnan(x); })) {  // a NaN row stays one
      ASSERT_TRUE(std::isnan(out[i])) << what << " element " << i << " got " << out[i];
    }
    if (!std::isfinite(ref[i])) continue;
    if (std::all_of(row_begin, row_end, [](float x) { return x == 0.0f; })) {
      ASSERT_EQ(out[i], 0.0f) << what << " row with no visible key, element " << i;
    }
    ASSERT_LE(std::fabs(double(out[i]) - ref[i]), 1e-4 + 1e-4 * std::fabs(ref[i]) + extra)
        << what << " element " << i << " got " << out[i] << " want " << ref[i];
  }
}

// Reference against the oracle, then every kernel (threaded and not; at bf16 with the bf16 dot
// products on and off) against the reference.
void CheckAllKernels(const Problem& problem, AttentionPrecision precision, ThreadPool* pool) {
  SCOPED_TRACE(problem.config().Describe() + " precision " + AttentionPrecisionName(precision));
  const std::vector<float> ref = problem.Run(precision, AttentionKernel::kReference, nullptr);
  ExpectPolicy(problem, ref);
  if (::testing::Test::HasFatalFailure()) return;
  const bool bf16 = precision == AttentionPrecision::kBf16;
  const double extra = bf16 ? std::ldexp(problem.MaxAbsFiniteV(), -7) : 0.0;
  for (bool dot_on : {true, false}) {
    if (!bf16 && !dot_on) continue;
    ops::EnableBf16Dot(dot_on);
    for (AttentionKernel k : {AttentionKernel::kPrefill, AttentionKernel::kDecode})
      for (ThreadPool* tp : {pool, static_cast<ThreadPool*>(nullptr)}) {
        SCOPED_TRACE(std::string(AttentionKernelName(k)) + (tp ? " threaded" : " single") + (dot_on ? "" : " no-dot"));
        ExpectSameAsReference(problem, extra, ref, problem.Run(precision, k, tp), AttentionKernelName(k));
        if (::testing::Test::HasFatalFailure()) break;
      }
  }
  ops::EnableBf16Dot(true);
}

class NonFiniteSweep : public ::testing::TestWithParam<std::tuple<int, std::pair<int, int>, int>> {};

TEST_P(NonFiniteSweep, KernelsFollowThePolicy) {
  const auto [d, heads, s_q] = GetParam();
  const auto [hq, hkv] = heads;
  std::mt19937 rng(7777u * d + 31u * hq + 131u * hkv + s_q);
  ThreadPool pool(3);
  const int64_t budget = 8'000'000;  // reference multiply-adds per case
  const int64_t max_kv = std::clamp<int64_t>(budget / (int64_t{2} * hq * s_q * d), 8, 1024);
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t s_kv = std::max<int64_t>(s_q, std::uniform_int_distribution<int64_t>(max_kv / 3, max_kv)(rng));
    const bool bf16 = trial % 2 == 1;
    const DType dtype = bf16 ? DType::kBF16 : static_cast<DType>(trial / 2 % 3 == 1 ? 2 : 0);
    ProblemConfig cfg = testing::RandomMaskConfig(rng, 2, hq, hkv, s_q, s_kv, d, dtype);
    Problem problem(cfg, rng());
    if (trial == 3) problem.PoisonInvisibleKeys();
    problem.InjectNonFinite(rng);
    CheckAllKernels(problem, bf16 ? AttentionPrecision::kBf16 : AttentionPrecision::kF32, &pool);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, NonFiniteSweep,
                         ::testing::Combine(::testing::Values(64, 128, 256),
                                            ::testing::Values(std::pair{1, 1}, std::pair{8, 4}, std::pair{16, 8},
                                                              std::pair{16, 1}),
                                            ::testing::Values(1, 3, 64, 150)));

// The cases of the issue, one at a time on a causal prefill with several tiles each way: a NaN q
// row, a NaN / +inf / -inf key, and NaN in the V of a key that only the later queries see (at bf16
// the dot path's P.V once spread it to the earlier rows of the panel).
TEST(AttentionNonFinite, SingleInjections) {
  ThreadPool pool(2);
  const float kinds[] = {NAN, INFINITY, -INFINITY};
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int what = 0; what < 3; ++what) {
      for (float x : kinds) {
        ProblemConfig c;
        c.batch = 1, c.hq = 16, c.hkv = 1, c.s_q = 100, c.s_kv = 200, c.d = 64, c.dv = 64, c.kv_dtype = dt;
        Problem problem(c, 5);
        // q row 60, or key 150 (seen by queries 50.. only).
        problem.SetElement(what, 0, 0, what == 0 ? 60 : 150, 7, x);
        for (AttentionPrecision prec : {AttentionPrecision::kF32, AttentionPrecision::kBf16}) {
          if (prec == AttentionPrecision::kBf16 && dt != DType::kBF16) continue;
          CheckAllKernels(problem, prec, &pool);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
