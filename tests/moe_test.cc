// The mixture-of-experts block (model/moe.h): the selection rule on hand-made probabilities (ties,
// weight normalization, per-expert scales), and the fast path (tokens grouped by expert, Linear)
// against the reference kernel over random shapes, dtypes, precisions and panels, ties included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "model/moe.h"
#include "ops/bf16_dot.h"
#include "tessera/aligned_buffer.h"
#include "tessera/gemm.h"
#include "tessera/quant.h"

namespace tessera::model {
namespace {

using ops::MatmulPrecision;

TEST(MoeSelect, TopKDescendingTiesToLowerIndex) {
  const float probs[6] = {0.1f, 0.3f, 0.3f, 0.3f, 0.0f, 0.0f};
  const float scale[6] = {1, 1, 1, 1, 1, 1};
  int32_t choice[3];
  float weight[3];
  SelectExperts(probs, 6, 2, scale, choice, weight);
  EXPECT_EQ(choice[0], 1);  // three tied: the two lowest indices, in index order
  EXPECT_EQ(choice[1], 2);
  SelectExperts(probs, 6, 3, scale, choice, weight);
  EXPECT_EQ(choice[0], 1);
  EXPECT_EQ(choice[1], 2);
  EXPECT_EQ(choice[2], 3);
  const float later[4] = {0.2f, 0.2f, 0.1f, 0.5f};
  SelectExperts(later, 4, 2, scale, choice, weight);
  EXPECT_EQ(choice[0], 3);
  EXPECT_EQ(choice[1], 0);  // 0 and 1 tie for the second place
  const float uniform[4] = {0.25f, 0.25f, 0.25f, 0.25f};
  SelectExperts(uniform, 4, 3, scale, choice, weight);
  EXPECT_EQ(choice[0], 0);
  EXPECT_EQ(choice[1], 1);
  EXPECT_EQ(choice[2], 2);
}

TEST(MoeSelect, WeightsNormalizedOverTheChosenThenScaled) {
  const float probs[4] = {0.2f, 0.5f, 0.3f, 0.0f};
  const float scale[4] = {4.0f, 2.0f, 3.0f, 5.0f};
  int32_t choice[2];
  float weight[2];
  SelectExperts(probs, 4, 2, scale, choice, weight);
  ASSERT_EQ(choice[0], 1);
  ASSERT_EQ(choice[1], 2);
  // 0.5 / 0.8 * 2 and 0.3 / 0.8 * 3. Without the normalization: 1.0 and 0.9; scaled before it:
  // 1.0 / 1.9 and 0.9 / 1.9.
  EXPECT_NEAR(weight[0], 1.25f, 1e-6f);
  EXPECT_NEAR(weight[1], 1.125f, 1e-6f);
  SelectExperts(probs, 4, 1, scale, choice, weight);
  EXPECT_EQ(choice[0], 1);
  EXPECT_NEAR(weight[0], 2.0f, 1e-6f);  // k = 1: the probability normalizes to 1
}

// Random probabilities from a few levels (many ties) against a stable sort by probability.
TEST(MoeSelect, SweepAgainstStableSort) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    const int64_t E = 1 + rng() % 12, K = 1 + rng() % E;
    std::vector<float> p(E), scale(E);
    for (float& v : p) v = static_cast<float>(rng() % 4) / 8.0f + 0.01f;
    for (float& v : scale) v = 0.5f + static_cast<float>(rng() % 8) / 8.0f;
    std::vector<int32_t> idx(E), choice(K);
    std::vector<float> weight(K);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    SelectExperts(p.data(), E, K, scale.data(), choice.data(), weight.data());
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) sum += p[idx[k]];
    for (int64_t k = 0; k < K; ++k) {
      ASSERT_EQ(choice[k], idx[k]) << "E " << E << " K " << K << " k " << k;
      EXPECT_NEAR(weight[k], p[idx[k]] / sum * scale[idx[k]], 1e-6);
    }
  }
}

// A layer's MoE weights with random values, stored as `dtype`, optionally packed into panels.
struct Block {
  MoeShape s;
  std::vector<std::vector<char>> store;
  std::vector<AlignedBuffer> panels;
  std::vector<float> router_scale, expert_scale, pre2, post2;
  LayerWeights w;

  ops::WeightView Matrix(std::mt19937& rng, DType dtype, int64_t out, int64_t in, float sd, bool pack,
                         const std::vector<float>* rows = nullptr) {
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> f(out * in);
    for (float& v : f) v = nd(rng);
    if (rows) f = *rows;
    store.emplace_back(out * in * DTypeSize(dtype));
    EncodeFromF32(dtype, f.data(), store.back().data(), out * in);
    ops::WeightView v{store.back().data(), dtype, out, in};
    if (pack && dtype == DType::kBF16 && ops::Bf16Dot()) {
      panels.emplace_back(ops::PairPanelWords(out, in) * 4);
      EXPECT_TRUE(ops::PackPairPanels(v, panels.back().as<uint32_t>()));
      v.pairs = panels.back().as<uint32_t>();
    } else if (pack && dtype == DType::kF32) {
      panels.emplace_back(ops::F32PanelFloats(out, in) * 4);
      ops::PackF32Panels(v, panels.back().as<float>());
      v.panels = panels.back().as<float>();
    }
    return v;
  }

  // Every expert's matrices quantized to q (QuantizeRow), as quantize-on-load binds them.
  std::vector<std::vector<char>> blocks;
  void QuantizeExperts(QuantType q) {
    blocks.reserve(3 * s.experts);
    auto quantize = [&](ops::WeightView* v) {
      blocks.emplace_back(v->out * QuantRowBytes(q, v->in));
      const int64_t row_bytes = QuantRowBytes(q, v->in);
      for (int64_t r = 0; r < v->out; ++r)
        QuantizeRow(q, static_cast<const float*>(v->data) + r * v->in, blocks.back().data() + r * row_bytes, v->in);
      v->data = blocks.back().data();
      v->quant = q;
    };
    for (int64_t e = 0; e < s.experts; ++e)
      for (auto* v : {&w.expert_gate[e], &w.expert_up[e], &w.expert_down[e]}) quantize(v);
  }

  // tie_pairs: router rows 2i+1 copy rows 2i, so those experts tie for every token.
  Block(std::mt19937& rng, MoeShape shape, DType dtype, bool pack, bool tie_pairs) : s(shape) {
    store.reserve(3 * s.experts + 1);
    panels.reserve(3 * s.experts + 1);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> ud(0.5f, 1.5f);
    std::vector<float> router(s.experts * s.hidden);
    for (float& v : router) v = 2.0f * nd(rng);  // spread the probabilities as a trained router does
    if (tie_pairs)
      for (int64_t e = 1; e < s.experts; e += 2)
        std::copy_n(router.begin() + (e - 1) * s.hidden, s.hidden, router.begin() + e * s.hidden);
    w.router = Matrix(rng, dtype, s.experts, s.hidden, 1.0f, pack, &router);
    for (int64_t e = 0; e < s.experts; ++e) {
      w.expert_gate.push_back(Matrix(rng, dtype, s.inter, s.hidden, 1.0f / std::sqrt(float(s.hidden)), pack));
      w.expert_up.push_back(Matrix(rng, dtype, s.inter, s.hidden, 1.0f / std::sqrt(float(s.hidden)), pack));
      w.expert_down.push_back(Matrix(rng, dtype, s.hidden, s.inter, 1.0f / std::sqrt(float(s.inter)), pack));
    }
    for (auto* v : {&router_scale, &pre2, &post2}) {
      v->resize(s.hidden);
      for (float& x : *v) x = ud(rng);
    }
    expert_scale.resize(s.experts);
    for (float& x : expert_scale) x = ud(rng);
    w.router_scale = router_scale.data();
    w.expert_scale = expert_scale.data();
    w.pre_ffw_norm_2 = pre2.data();
    w.post_ffw_norm_2 = post2.data();
  }
};

TEST(MoeForward, SweepAgainstReference) {
  std::mt19937 rng(11);
  struct Case {
    int64_t hidden, experts, top_k, inter, n;
  };
  const Case cases[] = {{16, 4, 2, 8, 1},    {16, 4, 2, 8, 7},     {32, 8, 3, 24, 33},  {64, 1, 1, 32, 5},
                        {48, 6, 6, 16, 9},   {64, 16, 4, 40, 2},   {128, 8, 2, 96, 64}, {96, 32, 8, 64, 19},
                        {33, 5, 2, 17, 13},  {64, 128, 8, 16, 3}};
  int checked = 0;
  for (const Case& c : cases)
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (MatmulPrecision mp : {MatmulPrecision::kF32, MatmulPrecision::kBf16})
        for (bool pack : {false, true})
          for (bool ties : {false, true}) {
            if (mp == MatmulPrecision::kBf16 && dtype != DType::kBF16) continue;
            MoeShape s{c.hidden, c.experts, c.top_k, c.inter, 1e-6f, 0.0f};
            Block b(rng, s, dtype, pack, ties);
            std::normal_distribution<float> nd(0.0f, 3.0f);
            std::vector<float> h(c.n * s.hidden), fast(c.n * s.hidden), ref(c.n * s.hidden);
            for (float& v : h) v = nd(rng);
            AlignedBuffer scratch(MoeScratch::Words(s, c.n) * 4);
            AlignedBuffer pairs(ops::GemmScratchWords(c.n, std::max(s.hidden, s.inter)) * 4);
            MoeScratch sc = MoeScratch::Carve(s, c.n, scratch.as<float>());
            sc.x_pairs = pairs.as<uint32_t>();
            ThreadPool pool(2);
            MoeForward(b.w, s, h.data(), c.n, mp, false, &pool, sc, fast.data());
            std::vector<int32_t> choice(c.n * s.top_k);
            std::vector<float> weight(c.n * s.top_k);
            MoeReference(b.w, s, h.data(), c.n, mp, ref.data(), choice.data(), weight.data());
            const std::string where = "hidden " + std::to_string(c.hidden) + " E " + std::to_string(c.experts) +
                                      " K " + std::to_string(c.top_k) + " n " + std::to_string(c.n) + " " +
                                      DTypeName(dtype) + (mp == MatmulPrecision::kBf16 ? " bf16" : " f32") +
                                      (pack ? " packed" : "") + (ties ? " ties" : "");
            for (int64_t i = 0; i < c.n * s.top_k; ++i) {
              ASSERT_EQ(sc.choice[i], choice[i]) << where << " slot " << i;
              ASSERT_NEAR(sc.weight[i], weight[i], 1e-5f * std::abs(weight[i])) << where << " slot " << i;
            }
            // Outputs are RMS-normed (O(1)); the fast path's f32 sums against double ones, and at
            // bf16 precision its rounding of the expert inputs against LinearReference's.
            const float tol = mp == MatmulPrecision::kBf16 ? 2e-2f : 2e-4f;
            for (int64_t i = 0; i < c.n * s.hidden; ++i)
              ASSERT_NEAR(fast[i], ref[i], tol * std::max(1.0f, std::abs(ref[i]))) << where << " at " << i;
            ++checked;
          }
  EXPECT_GE(checked, 80);
}

// Decode = prefill: a token's output does not depend on the other tokens of the step.
TEST(MoeForward, TokenAloneEqualsInBatch) {
  std::mt19937 rng(5);
  MoeShape s{64, 8, 2, 32, 1e-6f, 0.0f};
  Block b(rng, s, DType::kF32, true, false);
  const int64_t n = 24;
  std::normal_distribution<float> nd;
  std::vector<float> h(n * s.hidden), all(n * s.hidden), one(s.hidden);
  for (float& v : h) v = nd(rng);
  AlignedBuffer scratch(MoeScratch::Words(s, n) * 4);
  MoeScratch sc = MoeScratch::Carve(s, n, scratch.as<float>());
  MoeForward(b.w, s, h.data(), n, MatmulPrecision::kF32, false, nullptr, sc, all.data());
  for (int64_t t = 0; t < n; ++t) {
    MoeScratch sc1 = MoeScratch::Carve(s, 1, scratch.as<float>());
    MoeForward(b.w, s, h.data() + t * s.hidden, 1, MatmulPrecision::kF32, false, nullptr, sc1, one.data());
    for (int64_t i = 0; i < s.hidden; ++i)
      ASSERT_NEAR(one[i], all[t * s.hidden + i], 1e-5f * std::max(1.0f, std::abs(one[i]))) << t << " " << i;
  }
}

// Decode reads only the chosen experts: the others' weights are replaced by NaN matrices of the same
// shape (a NaN read anywhere, even weighted by 0, reaches the output) and the step still gives the
// reference's output.
TEST(MoeForward, UnchosenExpertsAreNotRead) {
  std::mt19937 rng(9);
  MoeShape s{64, 16, 2, 32, 1e-6f, 0.0f};
  for (bool pack : {false, true}) {
    Block b(rng, s, DType::kBF16, pack, false);
    const int64_t n = 2;
    std::normal_distribution<float> nd;
    std::vector<float> h(n * s.hidden), fast(n * s.hidden), ref(n * s.hidden);
    for (float& v : h) v = nd(rng);
    std::vector<int32_t> choice(n * s.top_k);
    std::vector<float> weight(n * s.top_k);
    MoeReference(b.w, s, h.data(), n, MatmulPrecision::kF32, ref.data(), choice.data(), weight.data());
    std::vector<float> nan_matrix(s.hidden * s.inter, std::numeric_limits<float>::quiet_NaN());
    int64_t removed = 0;
    for (int64_t e = 0; e < s.experts; ++e) {
      if (std::find(choice.begin(), choice.end(), e) != choice.end()) continue;
      b.w.expert_gate[e] = b.w.expert_up[e] = ops::WeightView{nan_matrix.data(), DType::kF32, s.inter, s.hidden};
      b.w.expert_down[e] = ops::WeightView{nan_matrix.data(), DType::kF32, s.hidden, s.inter};
      ++removed;
    }
    ASSERT_GE(removed, s.experts - n * s.top_k);
    AlignedBuffer scratch(MoeScratch::Words(s, n) * 4);
    MoeScratch sc = MoeScratch::Carve(s, n, scratch.as<float>());
    MoeForward(b.w, s, h.data(), n, MatmulPrecision::kF32, false, nullptr, sc, fast.data());
    for (int64_t i = 0; i < n * s.hidden; ++i)
      ASSERT_NEAR(fast[i], ref[i], 2e-4f * std::max(1.0f, std::abs(ref[i]))) << i;
  }
}

// Quantize-on-load binds each expert's matrices as block-quantized views: the quantized Linears
// (the int8 row-dot for these few tokens) then run per expert, and an expert no token chose is
// still never read. Its blocks are replaced by ones with NaN scales; the output must be bit for
// bit the output with the real blocks, and finite.
TEST(MoeForward, QuantizedUnchosenExpertsAreNotRead) {
  std::mt19937 rng(13);
  MoeShape s{64, 16, 2, 32, 1e-6f, 0.0f};
  for (QuantType q : {QuantType::kQ8_0, QuantType::kQ4_0}) {
    Block b(rng, s, DType::kF32, false, false);
    b.QuantizeExperts(q);
    const int64_t n = 2;
    std::normal_distribution<float> nd;
    std::vector<float> h(n * s.hidden), full(n * s.hidden), fast(n * s.hidden), ref(n * s.hidden);
    for (float& v : h) v = nd(rng);
    std::vector<int32_t> choice(n * s.top_k);
    std::vector<float> weight(n * s.top_k);
    // (The reference's choices only: the row-dot rounds each expert's inputs to int8 blocks, which
    // the reference does not; the model-level accuracy is python/tests/test_quantize_moe.py's.)
    MoeReference(b.w, s, h.data(), n, MatmulPrecision::kF32, ref.data(), choice.data(), weight.data());
    AlignedBuffer scratch(MoeScratch::Words(s, n) * 4);
    MoeScratch sc = MoeScratch::Carve(s, n, scratch.as<float>());
    MoeForward(b.w, s, h.data(), n, MatmulPrecision::kF32, false, nullptr, sc, full.data());
    // Every block's leading f16 scale NaN (0x7e00), the rest zero.
    std::vector<char> nan_blocks(s.hidden * QuantRowBytes(q, s.hidden), 0);
    for (size_t at = 0; at < nan_blocks.size(); at += QuantBlockBytes(q)) {
      nan_blocks[at] = 0x00;
      nan_blocks[at + 1] = 0x7e;
    }
    int64_t removed = 0;
    for (int64_t e = 0; e < s.experts; ++e) {
      if (std::find(choice.begin(), choice.end(), e) != choice.end()) continue;
      for (auto* v : {&b.w.expert_gate[e], &b.w.expert_up[e], &b.w.expert_down[e]}) v->data = nan_blocks.data();
      ++removed;
    }
    ASSERT_GE(removed, s.experts - n * s.top_k);
    MoeForward(b.w, s, h.data(), n, MatmulPrecision::kF32, false, nullptr, sc, fast.data());
    for (int64_t i = 0; i < n * s.hidden; ++i) {
      ASSERT_TRUE(std::isfinite(fast[i])) << QuantTypeName(q) << " " << i;
      ASSERT_EQ(fast[i], full[i]) << QuantTypeName(q) << " " << i;
    }
  }
}

// Up to MoeScratch::kBatchedTokens tokens, all chosen experts' quantized matrices run in one
// LinearBatch per stage; more tokens go expert by expert. With rows_as_steps both take the int8
// row-dot for every expert, so each token's output must be the same bits either way: steps of 1, 3
// and 8 tokens (batched) against one 20-token call (expert by expert), many experts sharing tokens.
TEST(MoeForward, QuantizedBatchedExpertsEqualOneByOne) {
  std::mt19937 rng(17);
  MoeShape s{256, 12, 4, 256, 1e-6f, 0.0f};
  const int64_t n = 20;
  ASSERT_GT(n, MoeScratch::kBatchedTokens);
  for (QuantType q : {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ4_K}) {
    Block b(rng, s, DType::kF32, false, false);
    b.QuantizeExperts(q);
    std::normal_distribution<float> nd;
    std::vector<float> h(n * s.hidden), all(n * s.hidden), part(n * s.hidden);
    for (float& v : h) v = nd(rng);
    AlignedBuffer scratch(MoeScratch::Words(s, n) * 4);
    ThreadPool pool(2);
    MoeForward(b.w, s, h.data(), n, MatmulPrecision::kF32, true, &pool, MoeScratch::Carve(s, n, scratch.as<float>()),
               all.data());
    for (int64_t step : {1, 3, 8}) {
      for (int64_t t0 = 0; t0 < n; t0 += step) {
        const int64_t m = std::min(step, n - t0);
        MoeForward(b.w, s, h.data() + t0 * s.hidden, m, MatmulPrecision::kF32, true, &pool,
                   MoeScratch::Carve(s, m, scratch.as<float>()), part.data() + t0 * s.hidden);
      }
      for (int64_t i = 0; i < n * s.hidden; ++i)
        ASSERT_EQ(part[i], all[i]) << QuantTypeName(q) << " step " << step << " token " << i / s.hidden;
    }
  }
}

}  // namespace
}  // namespace tessera::model
