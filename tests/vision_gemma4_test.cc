// The Gemma 4 vision tower + embedder and the Gemma 4 unified patch embedder: pieces against plain
// loops written from transformers' formulas, whole encoders against transformers' own outputs on
// the committed tiny checkpoints (goldens written by python/tests/test_vision_gemma4.py
// --write-goldens), and the input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/loaded_model.h"
#include "tessera/attention.h"
#include "tessera/npy.h"
#include "vision/gemma4_ops.h"
#include "vision/vision_ops.h"
#include "vision/gemma4_vision_config.h"
#include "vision/vision_encoder.h"

namespace tessera::vision {
namespace {

std::string Testdata(const std::string& rel) { return std::string(TESSERA_TESTDATA_DIR) + "/" + rel; }

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// max |a - b| / max |b|.
double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - b[i]));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return num / den;
}

TEST(VisionGemma4Ops, AxialRopeMatchesTransformersFormula) {
  // transformers: cos = cat(cos(x f), cos(x f), cos(y f), cos(y f)) over f = inv_freq, and each
  // half of the head gets x * cos + rotate_half(x) * sin within that half.
  const int64_t n = 5, heads = 3, D = 16, Q = D / 4;
  std::vector<float> x = Random(n * heads * D, 1), want = x;
  const std::vector<int32_t> xp = {0, 3, 1, 7, 2}, yp = {4, 0, 9, 1, 2};
  const std::vector<float> inv = AxialInvFreq(D, 100.0);
  ASSERT_EQ(inv.size(), static_cast<size_t>(Q));
  for (int64_t i = 0; i < Q; ++i) EXPECT_FLOAT_EQ(inv[i], 1.0f / std::pow(100.0f, 2.0f * i / (D / 2)));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const float* src = x.data() + (t * heads + h) * D;
      float* dst = want.data() + (t * heads + h) * D;
      for (int part = 0; part < 2; ++part) {
        const float pos = float(part == 0 ? xp[t] : yp[t]);
        const float* a = src + part * D / 2;
        for (int64_t j = 0; j < D / 2; ++j) {
          const float ang = pos * inv[j % Q];
          const float rot = j < Q ? -a[j + Q] : a[j - Q];
          dst[part * D / 2 + j] = a[j] * std::cos(ang) + rot * std::sin(ang);
        }
      }
    }
  ThreadPool pool(2);
  AxialRope(x.data(), n, heads, D, xp.data(), yp.data(), inv.data(), pool);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], want[i], 1e-6) << i;
}

TEST(VisionGemma4Ops, LayerNormAndRmsNormMatchPlainLoops) {
  const int64_t n = 70, d = 12;  // more rows than one pool item
  const std::vector<float> x = Random(n * d, 2, -3.0f, 5.0f), w = Random(d, 3), b = Random(d, 4);
  std::vector<float> ln(n * d), rms(n * d);
  ThreadPool pool(3);
  LayerNorm(x.data(), w.data(), b.data(), 1e-5f, n, d, ln.data(), &pool);
  RmsNormRows(x.data(), d, w.data(), 1e-6f, n, d, rms.data(), d, pool);
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0, var = 0, ms = 0;
    for (int64_t i = 0; i < d; ++i) mean += x[r * d + i] / double(d);
    for (int64_t i = 0; i < d; ++i) var += (x[r * d + i] - mean) * (x[r * d + i] - mean) / double(d);
    for (int64_t i = 0; i < d; ++i) ms += double(x[r * d + i]) * x[r * d + i] / double(d);
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(ln[r * d + i], (x[r * d + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i], 1e-5);
      // Gemma4RMSNorm scales by w itself (not 1 + w).
      EXPECT_NEAR(rms[r * d + i], x[r * d + i] * std::pow(ms + 1e-6, -0.5) * w[i], 1e-5);
    }
  }
}

TEST(VisionGemma4Ops, RealShapedImageAttendsWithTheTiledKernel) {
  // 4096 patches (SigLIP at 896^2) and 2520 (Gemma 4 at budget 280): the prefill kernel, whose
  // scratch does not grow with patches^2.
  std::vector<int32_t> iota(4096);
  for (int32_t i = 0; i < 4096; ++i) iota[i] = i;
  for (int64_t n : {2520, 4096}) {
    const int32_t valid = static_cast<int32_t>(n);
    const AttentionParams p = ImageAttentionParams(nullptr, nullptr, nullptr, nullptr, n, 16, 16, 72, iota.data(), &valid);
    EXPECT_EQ(ChooseAttentionKernel(p), AttentionKernel::kPrefill);
    EXPECT_LT(AttentionScratchBytes(p, 16), static_cast<size_t>(n * n)) << n;
  }
}

TEST(VisionGemma4Config, DefaultsAndErrorsNameTheField) {
  auto c = ParseGemma4VisionConfig(R"({"vision_config": {"model_type": "gemma4_vision"}})", "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().hidden_size, 768);
  EXPECT_EQ(c.value().num_hidden_layers, 16);
  EXPECT_EQ(c.value().pooling_kernel_size, 3);
  EXPECT_EQ(c.value().position_embedding_size, 10240);
  EXPECT_DOUBLE_EQ(c.value().rope_theta, 100.0);
  auto none = ParseGemma4VisionConfig(R"({"model_type": "gemma4"})", "cfg.json");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("vision_config"), std::string::npos);
  auto heads = ParseGemma4VisionConfig(R"({"vision_config": {"num_attention_heads": 6, "num_key_value_heads": 4}})",
                                       "cfg.json");
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.status().message().find("num_attention_heads"), std::string::npos);
  auto type = ParseGemma4VisionConfig(R"({"vision_config": {"patch_size": "16"}})", "cfg.json");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("cfg.json: vision_config.patch_size"), std::string::npos)
      << type.status().message();
  auto rope = ParseGemma4VisionConfig(R"({"vision_config": {"rope_parameters": {"rope_type": "default"}}})", "c");
  ASSERT_FALSE(rope.ok());
  EXPECT_NE(rope.status().message().find("rope_type"), std::string::npos);
  auto u = ParseUnifiedVisionConfig(R"({"vision_config": {"mm_embed_dim": 8, "output_proj_dims": 8}})", "u.json");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u.value().model_patch_size(), 48);
  EXPECT_EQ(u.value().mm_posemb_size, 1120);
}

// One golden case: inputs [B * R, P] and positions [B * R, 2] as written by the Python side.
struct Golden {
  std::vector<image::PixelInput> inputs;
  std::vector<float> out;
  int64_t rows = 0;
};

Golden ReadGolden(const std::string& name, int64_t images, int64_t k2) {
  Golden g;
  auto px = io::ReadNpy(Testdata("vision/" + name + "_pixels.npy"));
  auto pos = io::ReadNpy(Testdata("vision/" + name + "_positions.npy"));
  auto out = io::ReadNpy(Testdata("vision/" + name + "_out.npy"));
  EXPECT_TRUE(px.ok() && pos.ok() && out.ok());
  if (!px.ok() || !pos.ok() || !out.ok()) return g;
  const int64_t R = px.value().shape[0] / images, P = px.value().shape[1];
  for (int64_t b = 0; b < images; ++b) {
    image::PixelInput in;
    in.shape = {R, P};
    in.pixels.assign(px.value().data.begin() + b * R * P, px.value().data.begin() + (b + 1) * R * P);
    for (int64_t r = 0; r < R; ++r) {
      in.positions.push_back(static_cast<int32_t>(pos.value().data[(b * R + r) * 2]));
      in.positions.push_back(static_cast<int32_t>(pos.value().data[(b * R + r) * 2 + 1]));
      if (in.positions[2 * r] >= 0) in.valid_rows = r + 1;
    }
    in.soft_tokens = in.valid_rows / k2;
    g.inputs.push_back(std::move(in));
  }
  g.out = out.value().data;
  g.rows = out.value().shape[0];
  return g;
}

std::vector<float> EncodeAll(const VisionEncoder& e, const std::vector<image::PixelInput>& inputs, ThreadPool& pool,
                             Status* status, EncodeScratch* kept = nullptr) {
  EncodeScratch fresh;
  std::vector<const image::PixelInput*> ptrs;
  int64_t rows = 0;
  for (const image::PixelInput& in : inputs) {
    ptrs.push_back(&in);
    rows += in.soft_tokens;
  }
  std::vector<float> out(rows * e.output_width(), -7.0f);
  *status = e.Encode(ptrs, out.data(), pool, kept ? *kept : fresh);
  return out;
}

struct Case {
  const char* model;
  image::Family family;
  int64_t k2;
};

class VisionGemma4Golden : public ::testing::TestWithParam<Case> {};

TEST_P(VisionGemma4Golden, MatchesTransformers) {
  const Case c = GetParam();
  auto model = model::LoadedModel::Load(Testdata(std::string("models/") + c.model));
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto enc = VisionEncoder::Load(*model.value());
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  EXPECT_EQ(enc.value()->family(), c.family);
  EXPECT_EQ(enc.value()->output_width(), 64);
  const Golden g = ReadGolden(c.model, 2, c.k2);
  ASSERT_EQ(g.inputs.size(), 2u);
  ThreadPool pool(3);
  Status st;
  EncodeScratch scratch;
  const std::vector<float> got = EncodeAll(*enc.value(), g.inputs, pool, &st, &scratch);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(got.size(), g.out.size());
  EXPECT_LT(RelErr(got, g.out), 1e-5);
  // Each image alone gives its rows of the batched call; padding pixels are never read, nor is
  // scratch the call did not write (the kept scratch is all NaN before it).
  std::vector<image::PixelInput> second = {g.inputs[1]};
  for (size_t i = second[0].valid_rows * second[0].shape[1]; i < second[0].pixels.size(); ++i)
    second[0].pixels[i] = 1e30f;
  const size_t held = scratch.bytes();
  scratch.Poison();
  const std::vector<float> alone = EncodeAll(*enc.value(), second, pool, &st, &scratch);
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<float> tail(got.end() - alone.size(), got.end());
  EXPECT_LT(RelErr(alone, tail), 1e-6);
  EXPECT_EQ(scratch.bytes(), held);  // the smaller call fit in what the first one left
  // The same call again on the kept, poisoned scratch: the same bits.
  scratch.Poison();
  EXPECT_EQ(EncodeAll(*enc.value(), g.inputs, pool, &st, &scratch), got);
  ASSERT_TRUE(st.ok()) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Tiny, VisionGemma4Golden,
                         ::testing::Values(Case{"gemma4", image::Family::kGemma4, 4},
                                           Case{"gemma4_unified", image::Family::kGemma4Unified, 1}),
                         [](const auto& info) { return std::string(info.param.model); });

TEST(VisionGemma4, BadInputsAreErrorsNamingTheProblem) {
  auto model = model::LoadedModel::Load(Testdata("models/gemma4"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto enc = VisionEncoder::Load(*model.value());
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  const Golden g = ReadGolden("gemma4", 2, 4);
  ThreadPool pool(1);
  auto expect_error = [&](image::PixelInput in, const std::string& needle) {
    std::vector<float> out(64 * 64);
    std::vector<const image::PixelInput*> ptrs = {&in};
    EncodeScratch scratch;
    const Status st = enc.value()->Encode(ptrs, out.data(), pool, scratch);
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  image::PixelInput in = g.inputs[0];
  in.shape = {in.shape[0], 13};
  expect_error(in, "shape");
  in = g.inputs[0];
  in.positions[2] = 99;
  expect_error(in, "row 1 has position (99");
  in = g.inputs[0];
  in.positions[2 * (in.shape[0] - 1)] = 0;
  expect_error(in, "padding rows");
  in = g.inputs[0];
  in.soft_tokens += 1;
  expect_error(in, "soft_tokens");
  in = g.inputs[0];
  in.valid_rows = 0;
  expect_error(in, "valid_rows");
  in = g.inputs[0];
  in.positions.pop_back();
  expect_error(in, "position values");
}

TEST(VisionGemma4, Bf16MatmulPrecisionStaysCloseToF32) {
  auto model = model::LoadedModel::Load(Testdata("models/gemma4"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  VisionOptions bf16;
  bf16.matmul_precision = ops::MatmulPrecision::kBf16;
  auto e32 = VisionEncoder::Load(*model.value());
  auto e16 = VisionEncoder::Load(*model.value(), bf16);
  ASSERT_TRUE(e32.ok() && e16.ok());
  const Golden g = ReadGolden("gemma4", 2, 4);
  ThreadPool pool(2);
  Status s32, s16;
  EncodeScratch kept;
  const std::vector<float> a = EncodeAll(*e32.value(), g.inputs, pool, &s32);
  const std::vector<float> b = EncodeAll(*e16.value(), g.inputs, pool, &s16, &kept);
  ASSERT_TRUE(s32.ok() && s16.ok()) << s16.message();
  // The bf16 buffers (rounded x, K and V copies) come from the scratch too: kept and poisoned, the
  // same bits.
  kept.Poison();
  EXPECT_EQ(EncodeAll(*e16.value(), g.inputs, pool, &s16, &kept), b);
  ASSERT_TRUE(s16.ok()) << s16.message();
  // Each Linear input rounded to bf16 moves it by at most 2^-9 relative; over the tower's 9 Linear
  // stages (patch embedder, 7 per layer, embedder) that stays within a few times 9 * 2^-9.
  const double err = RelErr(b, a);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 0.05);
}

}  // namespace
}  // namespace tessera::vision
