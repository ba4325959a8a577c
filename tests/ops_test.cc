// Ops against plain references: Linear vs double-accumulating loops for every weight dtype;
// RMSNorm, RoPE, GeGLU against formulas evaluated in double; the sampler's statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/simd.h"
#include "runtime/sampler.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"

namespace tessera {
namespace {

TEST(Linear, MatchesReferenceForAllWeightDtypes) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  ThreadPool pool(3);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [n, in, out] : {std::tuple{1, 7, 5}, {3, 64, 33}, {17, 1030, 40}, {2, 513, 129}}) {
      std::vector<float> wf(out * in), x(n * (in + 3)), y(n * out), ref(n * out);
      for (float& v : wf) v = nd(rng);
      for (float& v : x) v = nd(rng);
      std::vector<uint8_t> w(wf.size() * DTypeSize(dt));
      EncodeFromF32(dt, wf.data(), w.data(), wf.size());
      const ops::WeightView wv{w.data(), dt, out, in};
      ops::Linear(wv, x.data(), n, in + 3, y.data(), out, &pool);
      ops::LinearReference(wv, x.data(), n, in + 3, ref.data(), out);
      // f32 accumulation of `in` products of N(0,1) values vs double: ~sqrt(in) * 6e-8 * |terms|.
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 2e-5 * std::sqrt(double(in)) * 4) << i;
    }
  }
}

// The blocked GEMM, Linear and the decode row-dot path directly, with token counts, widths and
// depths that cross every micro-tile (6 x 16) and block (equal k blocks of up to 1024, 32 wide) edge and row-dot
// work items that leave 0-3 rows after their four quarters; strided x and y, 1 and 3 threads.
TEST(Linear, PathsMatchReferenceAcrossTileBlockAndQuarterEdges) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  ThreadPool pool3(3);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [n, in, out] : {std::tuple{1, 5, 3}, {6, 256, 16}, {7, 257, 17}, {13, 600, 129}, {37, 513, 300},
                              {64, 1024, 128}, {9, 31, 255}, {1, 9, 1}, {1, 40, 7}, {2, 33, 67}, {3, 130, 401},
                              {1, 1152, 1001}, {7, 1025, 40}, {12, 2100, 33}}) {
      const int64_t xs = in + 5, ys = out + 3;
      std::vector<float> wf(out * in), x(n * xs), y(n * ys, -7.0f), ref(n * ys, -7.0f);
      for (float& v : wf) v = nd(rng);
      for (float& v : x) v = nd(rng);
      std::vector<uint8_t> w(wf.size() * DTypeSize(dt));
      EncodeFromF32(dt, wf.data(), w.data(), wf.size());
      const ops::WeightView wv{w.data(), dt, out, in};
      ops::LinearReference(wv, x.data(), n, xs, ref.data(), ys);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
        for (int path = 0; path < 3; ++path) {
          std::fill(y.begin(), y.end(), -7.0f);
          if (path == 0) ops::Gemm(wv, x.data(), n, xs, y.data(), ys, pool);
          else if (path == 1) ops::Linear(wv, x.data(), n, xs, y.data(), ys, pool);
          else ops::LinearRowDot(wv, x.data(), n, xs, y.data(), ys, pool);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t o = 0; o < ys; ++o) {
              const size_t i = t * ys + o;
              if (o >= out) {
                ASSERT_EQ(y[i], -7.0f) << "wrote past the row: t=" << t << " o=" << o;
              } else {
                ASSERT_NEAR(y[i], ref[i], 2e-5 * std::sqrt(double(in)) * 4) << DTypeName(dt) << " path " << path << " n=" << n << " in=" << in
                                                                            << " out=" << out << " t=" << t << " o=" << o;
              }
            }
        }
      }
    }
  }
}

// Each GEMM output is one FMA chain in k order: the same token gives bit-identical results alone,
// in any batch and at any position of a micro-tile (prefill chunking cannot change logits).
TEST(Linear, GemmIsBatchInvariant) {
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  ThreadPool pool(2);
  const int64_t in = 2100, out = 150, n = 23;  // three 704-deep blocks
  std::vector<float> wf(out * in), x(n * in), all(n * out), part(n * out);
  for (float& v : wf) v = nd(rng);
  for (float& v : x) v = nd(rng);
  const ops::WeightView wv{wf.data(), DType::kF32, out, in};
  ops::Gemm(wv, x.data(), n, in, all.data(), out, &pool);
  for (int64_t start : {0, 1, 5, 11}) {
    const int64_t cnt = n - start;
    ops::Gemm(wv, x.data() + start * in, cnt, in, part.data(), out, nullptr);
    for (int64_t i = 0; i < cnt * out; ++i) ASSERT_EQ(part[i], all[start * out + i]) << start << " " << i;
  }
}

TEST(Elementwise, RmsNormMatchesFormula) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  const int64_t n = 3, d = 37;
  std::vector<float> x(n * d), w(d), y(n * d);
  for (float& v : x) v = nd(rng);
  for (float& v : w) v = nd(rng);
  for (float offset : {0.0f, 1.0f}) {
    ops::RmsNorm(x.data(), d, w.data(), offset, 1e-6f, n, d, y.data(), d);
    for (int64_t r = 0; r < n; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += double(x[r * d + i]) * x[r * d + i];
      const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
      for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(y[r * d + i], x[r * d + i] * inv * (offset + w[i]), 1e-5);
    }
  }
  ops::RmsNorm(x.data(), d, nullptr, 0.0f, 1e-6f, n, d, y.data(), d);  // weightless
  double ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * x[i];
  EXPECT_NEAR(y[5], x[5] / std::sqrt(ss / d + 1e-6), 1e-5);
}

TEST(Elementwise, RopeRotatesHalvesByPositionTimesFrequency) {
  const int64_t d = 8, heads = 2;
  std::vector<float> x(heads * d), orig;
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * (i + 1);
  orig = x;
  const float inv_freq[4] = {1.0f, 0.1f, 0.01f, 0.0f};  // a zero frequency leaves its pair unchanged
  const int32_t pos[1] = {7};
  ops::Rope(x.data(), 1, heads, d, heads * d, d, pos, inv_freq, 1.0f);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 4; ++i) {
      const double a = orig[h * d + i], b = orig[h * d + i + 4], t = 7.0 * inv_freq[i];
      EXPECT_NEAR(x[h * d + i], a * std::cos(t) - b * std::sin(t), 1e-6);
      EXPECT_NEAR(x[h * d + i + 4], b * std::cos(t) + a * std::sin(t), 1e-6);
    }
}

TEST(Elementwise, GeGluMatchesTanhGelu) {
  const float g[4] = {-3.0f, -0.5f, 0.0f, 2.0f}, u[4] = {1.0f, 2.0f, 3.0f, -1.0f};
  float out[4];
  ops::GeGlu(g, u, 4, out);
  for (int i = 0; i < 4; ++i) {
    const double x = g[i];
    const double gelu = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(out[i], gelu * u[i], 1e-6);
  }
}

// Every SIMD implementation (and the pooled entry point) against the formula in double over
// the range the MLP sees and far beyond it (tanh saturation, tiny arguments), every tail length.
TEST(Elementwise, GeluTanhMulAllImplementationsMatchDouble) {
  const ops::SimdKernels* impls[4];
  const int n_impl = ops::AvailableSimd(impls, 4);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
  for (int k = 0; k < n_impl; ++k) {
    SCOPED_TRACE(impls[k]->name);
    for (int64_t n : {1, 7, 8, 9, 16, 17, 33, 1000}) {
      std::vector<float> g(n), u(n), out(n);
      for (int64_t i = 0; i < n; ++i) g[i] = i % 13 == 3 ? nd(rng) * 1e-4f : (i % 17 == 5 ? nd(rng) * 30 : nd(rng)), u[i] = nd(rng);
      impls[k]->gelu_tanh_mul(g.data(), u.data(), n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const double want = gelu(g[i]) * u[i];
        ASSERT_NEAR(out[i], want, 1e-6 * std::fabs(u[i]) * (std::fabs(g[i]) + 1e-3) + 1e-6 * std::fabs(want)) << g[i];
      }
      // In place, without a multiplier (GeluTanh): gelu(g) itself.
      std::vector<float> in_place = g;
      impls[k]->gelu_tanh_mul(in_place.data(), nullptr, n, in_place.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(in_place[i], gelu(g[i]), 1e-6 * (std::fabs(g[i]) + 1e-3) + 1e-6 * std::fabs(gelu(g[i]))) << g[i];
    }
  }
  ThreadPool pool(2);
  std::vector<float> g(50000), u(50000), out(50000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = nd(rng), u[i] = nd(rng);
  ops::GeGlu(g.data(), u.data(), 50000, out.data(), &pool);
  for (size_t i = 0; i < g.size(); i += 97) ASSERT_NEAR(out[i], gelu(g[i]) * u[i], 1e-5 * (1 + std::fabs(gelu(g[i]) * u[i])));
}

// GeGlu takes the AVX-512 table's GELU on AVX-512 CPUs (GeluTanhMulWide): it must give the AVX2
// table's bits for every element, whatever n leaves to its tail, on values across the whole range
// (tiny, saturating, zero, +-inf, NaN), with and without a multiplier.
TEST(Elementwise, GeluTanhMulWideIsTheAvx2TablesBits) {
  const ops::SimdKernels* impls[4];
  const int n_impl = ops::AvailableSimd(impls, 4);
  const ops::SimdKernels *avx2 = nullptr, *avx512 = nullptr;
  for (int k = 0; k < n_impl; ++k) {
    if (std::string(impls[k]->name) == "avx2") avx2 = impls[k];
    if (std::string(impls[k]->name) == "avx512") avx512 = impls[k];
  }
  if (!avx2 || !avx512) GTEST_SKIP() << "needs both the AVX2 and the AVX-512 tables";
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const float special[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), 1e-30f, -60.0f, 60.0f, 1e30f};
  for (int64_t n : {1, 7, 8, 15, 16, 17, 23, 24, 31, 33, 1000, 16391}) {
    std::vector<float> g(n), u(n), a(n), b(n);
    for (int64_t i = 0; i < n; ++i)
      g[i] = i % 11 == 4 ? special[(i / 11) % 9] : (i % 13 == 3 ? nd(rng) * 1e-4f : nd(rng) * (i % 7 == 1 ? 30 : 1)),
      u[i] = nd(rng);
    for (const float* mul : {static_cast<const float*>(u.data()), static_cast<const float*>(nullptr)}) {
      avx2->gelu_tanh_mul(g.data(), mul, n, a.data());
      avx512->gelu_tanh_mul(g.data(), mul, n, b.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << "n " << n << " i " << i << " g " << g[i] << ": " << a[i]
                                                                << " vs " << b[i];
    }
  }
  if (std::getenv("TESSERA_SIMD") == nullptr) {
    EXPECT_EQ(ops::GeluTanhMulWide(), avx512->gelu_tanh_mul);  // what GeGlu runs
  }
}

// The final logit soft cap, every SIMD implementation against cap tanh(x / cap) in double: tiny
// arguments (where tanh from exp cancels), both sides of the series/exp switch, saturation, inf
// and NaN, every tail length; and an element's result the same wherever n ends.
TEST(Elementwise, SoftCapAllImplementationsMatchDouble) {
  const ops::SimdKernels* impls[4];
  const int n_impl = ops::AvailableSimd(impls, 4);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float cap = 30.0f;
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = i % 11 == 1   ? nd(rng) * 1e-5f                     // tiny: the series
           : i % 11 == 2 ? cap * (0.4f + 1e-3f * nd(rng))      // at the series/exp switch
           : i % 7 == 3  ? nd(rng) * 400                       // saturated
                         : nd(rng) * 15;
  x[5] = 0.0f, x[6] = -0.0f, x[7] = INFINITY, x[8] = -INFINITY, x[9] = NAN, x[10] = 1e-30f;
  for (int k = 0; k < n_impl; ++k) {
    SCOPED_TRACE(impls[k]->name);
    std::vector<float> whole = x;
    impls[k]->soft_cap(whole.data(), static_cast<int64_t>(whole.size()), cap);
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = cap * std::tanh(static_cast<double>(x[i]) / cap);
      if (std::isnan(x[i])) {
        ASSERT_TRUE(std::isnan(whole[i]));
        continue;
      }
      ASSERT_NEAR(whole[i], want, 4e-7 * std::fabs(want) + 1e-37) << x[i];
      ASSERT_EQ(std::signbit(whole[i]), std::signbit(x[i])) << x[i];
    }
    for (int64_t n : {1, 3, 7, 8, 9, 15, 17}) {
      for (int64_t at : {int64_t{0}, int64_t{5}, int64_t{981}}) {
        std::vector<float> part(x.begin() + at, x.begin() + at + n);
        impls[k]->soft_cap(part.data(), n, cap);
        for (int64_t i = 0; i < n; ++i)
          if (!std::isnan(x[at + i])) {
            ASSERT_EQ(part[i], whole[at + i]) << "n " << n << " at " << at + i;
          }
      }
    }
  }
  // The pooled entry point (the logits of several rows, in chunks over two threads): the same bits.
  ThreadPool pool(2);
  std::vector<float> big(70001), one(big.size());
  for (float& v : big) v = nd(rng) * 20;
  one = big;
  ops::Simd().soft_cap(one.data(), static_cast<int64_t>(one.size()), cap);
  ops::SoftCap(big.data(), static_cast<int64_t>(big.size()), cap, &pool);
  for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(big[i], one[i]) << i;
}

// The sampled token (and that sampling succeeded).
int32_t Draw(runtime::Sampler& s, const float* logits) {
  int32_t token = -1;
  const Status st = s.Sample(logits, &token);
  EXPECT_TRUE(st.ok()) << st.message();
  return token;
}

TEST(Sampler, GreedyTemperatureTopKTopP) {
  const float logits[5] = {1.0f, 3.0f, 3.0f, 0.0f, 2.0f};
  runtime::Sampler greedy({0.0f, 0, 1.0f, 0}, 5);
  EXPECT_EQ(Draw(greedy, logits), 1);  // lowest id among ties
  // top_k = 2 keeps {1, 2} only; both equally likely.
  runtime::Sampler topk({1.0f, 2, 1.0f, 42}, 5);
  std::map<int, int> seen;
  for (int i = 0; i < 4000; ++i) ++seen[Draw(topk, logits)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_NEAR(seen[1] / 4000.0, 0.5, 0.05);
  // top_p: probabilities at T=1 are ~{0.05, 0.39, 0.39, 0.02, 0.14}: p = 0.7 keeps the two 3.0s.
  runtime::Sampler topp({1.0f, 0, 0.7f, 7}, 5);
  for (int i = 0; i < 1000; ++i) {
    const int t = Draw(topp, logits);
    ASSERT_TRUE(t == 1 || t == 2) << t;
  }
  // Plain temperature sampling follows softmax(logits / T).
  runtime::Sampler plain({2.0f, 0, 1.0f, 9}, 5);
  std::map<int, int> counts;
  const int trials = 40000;
  for (int i = 0; i < trials; ++i) ++counts[Draw(plain, logits)];
  double z = 0;
  for (float l : logits) z += std::exp(l / 2.0);
  for (int t = 0; t < 5; ++t) EXPECT_NEAR(counts[t] / double(trials), std::exp(logits[t] / 2.0) / z, 0.01) << t;
  EXPECT_FALSE(runtime::ValidateSampling({-1.0f, 0, 1.0f, 0}).ok());
  EXPECT_FALSE(runtime::ValidateSampling({1.0f, 0, 0.0f, 0}).ok());
}

// Non-finite logits are an error naming the first bad token, greedy or not (all-NaN logits once
// gave token 0 without a word).
TEST(Sampler, NonFiniteLogitsAreAnError) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float all_nan[4] = {nan, nan, nan, nan}, one_inf[4] = {0.5f, 1.0f, inf, 0.0f};
  const float one_nan[4] = {0.5f, 1.0f, 2.0f, nan}, minus_inf[4] = {-inf, 1.0f, 2.0f, 0.0f};
  for (const runtime::SamplingParams& params : {runtime::SamplingParams{0.0f, 0, 1.0f, 0},
                                                runtime::SamplingParams{1.0f, 2, 0.9f, 3}}) {
    runtime::Sampler s(params, 4);
    int32_t token = -1;
    Status st = s.Sample(all_nan, &token);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("logit of token 0 is nan"), std::string::npos) << st.message();
    st = s.Sample(one_inf, &token);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("logit of token 2 is inf"), std::string::npos) << st.message();
    st = s.Sample(one_nan, &token);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("logit of token 3 is nan"), std::string::npos) << st.message();
    st = s.Sample(minus_inf, &token);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("logit of token 0 is -inf"), std::string::npos) << st.message();
    EXPECT_EQ(token, -1);  // never written on error
  }
}

}  // namespace
}  // namespace tessera
