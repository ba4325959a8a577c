// The Gemma 3 vision encoder (src/vision/siglip_*) and the vision ops against plain loops written
// here from the transformers definitions (SiglipVisionTransformer, Gemma3MultiModalProjector):
// the conv as a direct 4-D loop, attention as an explicit softmax, sums in double. The comparison
// with transformers itself is python/tests/test_vision_gemma3.py.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/loaded_model.h"
#include "tessera/attention.h"
#include "vision/siglip_config.h"
#include "vision/siglip_encoder.h"
#include "vision/vision_encoder.h"
#include "vision/vision_ops.h"

namespace tessera::vision {
namespace {

const std::string kGemma3 = std::string(TESSERA_TESTDATA_DIR) + "/models/gemma3";

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = offset + scale * d(rng);
  return v;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// max |a - b| / max |b|
double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(static_cast<double>(a[i]) - b[i]));
  return e / std::max(MaxAbs(b), 1e-30);
}

std::vector<float> F32(const ops::WeightView& w) {
  std::vector<float> out(static_cast<size_t>(w.out * w.in));
  DecodeToF32(w.dtype, w.data, out.data(), out.size());
  return out;
}

// y[n, out] = x[n, in] W^T + b, in double.
std::vector<float> Dense(const std::vector<float>& x, const ops::WeightView& w, const std::vector<float>& b) {
  const std::vector<float> W = F32(w);
  const int64_t n = static_cast<int64_t>(x.size()) / w.in;
  std::vector<float> y(static_cast<size_t>(n * w.out));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < w.out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < w.in; ++i) s += static_cast<double>(x[t * w.in + i]) * W[o * w.in + i];
      y[t * w.out + o] = static_cast<float>(s);
    }
  return y;
}

// Full softmax attention over one sequence of S tokens, H heads of Dh, keys [0, valid) only.
std::vector<float> NaiveAttention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                  int64_t S, int64_t H, int64_t Dh, int64_t valid) {
  const int64_t W = H * Dh;
  std::vector<float> out(static_cast<size_t>(S * W));
  std::vector<double> p(static_cast<size_t>(S));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < S; ++i) {
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < valid; ++j) {
        double s = 0;
        for (int64_t d = 0; d < Dh; ++d) s += static_cast<double>(q[i * W + h * Dh + d]) * k[j * W + h * Dh + d];
        p[j] = s / std::sqrt(static_cast<double>(Dh));
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j < valid; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t d = 0; d < Dh; ++d) {
        double o = 0;
        for (int64_t j = 0; j < valid; ++j) o += p[j] / sum * v[j * W + h * Dh + d];
        out[i * W + h * Dh + d] = static_cast<float>(o);
      }
    }
  return out;
}

std::vector<float> RefLayerNorm(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                                float eps) {
  std::vector<float> y(x.size());
  LayerNormReference(x.data(), w.data(), b.data(), eps, static_cast<int64_t>(x.size() / w.size()),
                     static_cast<int64_t>(w.size()), y.data());
  return y;
}

// The whole Gemma 3 vision path for one image [C, S, S], from the definitions.
std::vector<float> ReferenceEncode(const SiglipEncoder& enc, const std::vector<float>& pixels) {
  const SiglipConfig& c = enc.config();
  const SiglipWeights& w = enc.weights();
  const int64_t D = c.hidden_size, p = c.patch_size, side = c.patches_per_side(), S = c.image_size;
  const int64_t P = c.num_patches(), C = c.num_channels, H = c.num_attention_heads;
  const std::vector<float> conv = F32(w.patch);  // [D, C, p, p]
  std::vector<float> h(static_cast<size_t>(P * D));
  for (int64_t py = 0; py < side; ++py)
    for (int64_t px = 0; px < side; ++px)
      for (int64_t o = 0; o < D; ++o) {
        double s = w.patch_b[o];
        for (int64_t ch = 0; ch < C; ++ch)
          for (int64_t ky = 0; ky < p; ++ky)
            for (int64_t kx = 0; kx < p; ++kx)
              s += static_cast<double>(conv[((o * C + ch) * p + ky) * p + kx]) *
                   pixels[(ch * S + py * p + ky) * S + px * p + kx];
        const int64_t t = py * side + px;
        h[t * D + o] = static_cast<float>(s + w.position[t * D + o]);
      }
  for (const SiglipLayerWeights& L : w.layers) {
    std::vector<float> x = RefLayerNorm(h, L.ln1_w, L.ln1_b, c.layer_norm_eps);
    const std::vector<float> a = NaiveAttention(Dense(x, L.q, L.q_b), Dense(x, L.k, L.k_b), Dense(x, L.v, L.v_b), P,
                                                H, D / H, P);
    std::vector<float> o = Dense(a, L.o, L.o_b);
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    x = RefLayerNorm(h, L.ln2_w, L.ln2_b, c.layer_norm_eps);
    std::vector<float> m = Dense(x, L.fc1, L.fc1_b);
    for (float& z : m) {
      const double u = z;
      z = static_cast<float>(0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u))));
    }
    o = Dense(m, L.fc2, L.fc2_b);
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
  }
  h = RefLayerNorm(h, w.post_w, w.post_b, c.layer_norm_eps);
  const int64_t k = c.pool_kernel(), ts = c.tokens_per_side(), T = c.mm_tokens_per_image;
  std::vector<float> pooled(static_cast<size_t>(T * D));
  for (int64_t ty = 0; ty < ts; ++ty)
    for (int64_t tx = 0; tx < ts; ++tx)
      for (int64_t d = 0; d < D; ++d) {
        double s = 0;
        for (int64_t dy = 0; dy < k; ++dy)
          for (int64_t dx = 0; dx < k; ++dx) s += h[((ty * k + dy) * side + tx * k + dx) * D + d];
        pooled[(ty * ts + tx) * D + d] = static_cast<float>(s / (k * k));
      }
  for (int64_t t = 0; t < T; ++t) {
    double ms = 0;
    for (int64_t d = 0; d < D; ++d) ms += static_cast<double>(pooled[t * D + d]) * pooled[t * D + d];
    const double inv = 1.0 / std::sqrt(ms / D + c.layer_norm_eps);
    for (int64_t d = 0; d < D; ++d) pooled[t * D + d] = static_cast<float>(pooled[t * D + d] * inv * (1.0 + w.mm_norm_w[d]));
  }
  return Dense(pooled, w.mm_proj, {});
}

image::PixelInput Pixels(const SiglipConfig& c, uint32_t seed) {
  image::PixelInput in;
  in.shape = {c.num_channels, c.image_size, c.image_size};
  in.pixels = Random(static_cast<size_t>(c.num_channels * c.image_size * c.image_size), seed);
  in.soft_tokens = c.mm_tokens_per_image;
  return in;
}

TEST(VisionOps, LayerNormMatchesReference) {
  const int64_t n = 37, d = 1152;
  // Rows far from zero: the variance must not cancel.
  const std::vector<float> x = Random(n * d, 1, 0.5f, 30.0f), w = Random(d, 2), b = Random(d, 3);
  std::vector<float> y(x.size()), ref(x.size());
  ThreadPool pool(2);
  LayerNorm(x.data(), w.data(), b.data(), 1e-6f, n, d, y.data(), &pool);
  LayerNormReference(x.data(), w.data(), b.data(), 1e-6f, n, d, ref.data());
  EXPECT_LT(RelErr(y, ref), 1e-6);
}

TEST(VisionOps, BidirectionalAttentionMatchesNaiveWithPadding) {
  const int64_t images = 2, S = 19, H = 3, Dh = 8, W = H * Dh;
  const std::vector<float> q = Random(images * S * W, 4), k = Random(images * S * W, 5), v = Random(images * S * W, 6);
  std::vector<float> out(q.size());
  std::vector<int32_t> positions(images * S), valid = {S, 11};  // the second sequence's last 8 rows are padding
  BidirectionalAttention attn{images, S, H, Dh, 1.0f / std::sqrt(static_cast<float>(Dh)), valid.data(),
                              positions.data()};
  ThreadPool pool(2);
  Arena arena;
  arena.Reserve(attn.ScratchBytes(pool.num_threads()));
  ASSERT_TRUE(attn.Run(q.data(), k.data(), v.data(), out.data(), &pool, arena).ok());
  for (int64_t i = 0; i < images; ++i) {
    auto part = [&](const std::vector<float>& t) {
      return std::vector<float>(t.begin() + i * S * W, t.begin() + (i + 1) * S * W);
    };
    const std::vector<float> ref = NaiveAttention(part(q), part(k), part(v), S, H, Dh, valid[i]);
    const std::vector<float> got = part(out);
    // Only the valid query rows are used; padding rows still attend to the valid keys.
    EXPECT_LT(RelErr(got, ref), 1e-5) << "image " << i;
  }
}

TEST(VisionOps, RealShapedAttentionUsesTheTiledKernel) {
  // SigLIP-So400m at 896^2: 4096 patches, 16 heads of 72.
  const int64_t S = 4096;
  std::vector<int32_t> positions(S), valid = {static_cast<int32_t>(S)};
  BidirectionalAttention attn{1, S, 16, 72, 1.0f, valid.data(), positions.data()};
  const AttentionParams p = attn.Params(nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(ChooseAttentionKernel(p), AttentionKernel::kPrefill);
  // Scratch independent of S^2 (a dense score matrix would be 64 MiB per head).
  EXPECT_LT(attn.ScratchBytes(16), static_cast<size_t>(S) * S);
}

TEST(SiglipConfig, TinyCheckpoint) {
  StatusOr<SiglipConfig> c = LoadSiglipConfig(kGemma3);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().hidden_size, 32);
  EXPECT_EQ(c.value().num_patches(), 36);
  EXPECT_EQ(c.value().mm_tokens_per_image, 9);
  EXPECT_EQ(c.value().pool_kernel(), 2);
}

TEST(SiglipConfig, DefaultsAndErrorsNameTheField) {
  // No vision_config: SiglipVisionConfig's defaults (224 / 16: a 14 x 14 grid).
  StatusOr<SiglipConfig> d = ParseSiglipConfig(R"({"model_type": "gemma3", "mm_tokens_per_image": 49})", "c.json");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d.value().hidden_size, 768);
  EXPECT_EQ(d.value().num_hidden_layers, 12);
  EXPECT_EQ(d.value().num_patches(), 196);
  EXPECT_EQ(d.value().pool_kernel(), 2);
  struct Case {
    const char* json;
    const char* field;
  } cases[] = {
      {R"({})", "mm_tokens_per_image"},  // 256 tokens from a 14 x 14 grid
      {R"({"mm_tokens_per_image": 48})", "mm_tokens_per_image"},
      {R"({"mm_tokens_per_image": 16, "vision_config": {"hidden_size": 30, "num_attention_heads": 4}})",
       "vision_config.hidden_size"},
      {R"({"mm_tokens_per_image": 16, "vision_config": {"image_size": 30}})", "vision_config.image_size"},
      {R"({"vision_config": {"patch_size": "x"}})", "vision_config.patch_size"},
      {R"({"vision_config": {"hidden_act": "relu"}})", "vision_config.hidden_act"},
      {R"({"vision_config": {"layer_norm_eps": -1}})", "vision_config.layer_norm_eps"},
      {R"({"vision_config": 3})", "vision_config"},
      {R"([1, 2])", "top level"},
      {R"({"vision_config": )", "JSON"},
  };
  for (const Case& c : cases) {
    StatusOr<SiglipConfig> r = ParseSiglipConfig(c.json, "c.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("c.json"), std::string::npos) << r.status().message();
  }
}

class SiglipEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<model::LoadedModel>> m = model::LoadedModel::Load(kGemma3);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m.value());
  }
  std::unique_ptr<model::LoadedModel> model_;
  ThreadPool pool_{2};
};

TEST_F(SiglipEncoderTest, LoadDispatchesToSiglip) {
  StatusOr<std::unique_ptr<VisionEncoder>> enc = VisionEncoder::Load(*model_);
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  EXPECT_EQ(enc.value()->family(), image::Family::kGemma3);
  EXPECT_EQ(enc.value()->output_width(), 64);
}

TEST_F(SiglipEncoderTest, TinyCheckpointMatchesReferenceLoops) {
  StatusOr<std::unique_ptr<VisionEncoder>> loaded = VisionEncoder::Load(*model_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const auto& enc = static_cast<const SiglipEncoder&>(*loaded.value());
  const SiglipConfig& c = enc.config();
  // Three images in one call: one group, each image attends only within itself.
  std::vector<image::PixelInput> images;
  for (uint32_t i = 0; i < 3; ++i) images.push_back(Pixels(c, 10 + i));
  std::vector<const image::PixelInput*> ptrs;
  for (const auto& im : images) ptrs.push_back(&im);
  const int64_t T = c.mm_tokens_per_image, W = enc.output_width();
  std::vector<float> out(static_cast<size_t>(3 * T * W), std::nanf(""));
  EncodeScratch scratch;
  ASSERT_TRUE(enc.Encode(ptrs, out.data(), pool_, scratch).ok());
  for (int64_t i = 0; i < 3; ++i) {
    const std::vector<float> ref = ReferenceEncode(enc, images[i].pixels);
    const std::vector<float> got(out.begin() + i * T * W, out.begin() + (i + 1) * T * W);
    EXPECT_LT(RelErr(got, ref), 1e-5) << "image " << i;
  }
  // One image alone gives the same rows as inside the batch, on the kept scratch made all NaN
  // first (so nothing reads scratch the call did not write).
  std::vector<float> one(static_cast<size_t>(T * W));
  const size_t held = scratch.bytes();
  scratch.Poison();
  ASSERT_TRUE(enc.Encode({ptrs[1]}, one.data(), pool_, scratch).ok());
  EXPECT_LT(RelErr(one, std::vector<float>(out.begin() + T * W, out.begin() + 2 * T * W)), 1e-6);
  EXPECT_EQ(scratch.bytes(), held);
}

TEST_F(SiglipEncoderTest, BadInputsAreRefusedByName) {
  StatusOr<std::unique_ptr<VisionEncoder>> enc = VisionEncoder::Load(*model_);
  ASSERT_TRUE(enc.ok()) << enc.status().message();
  const SiglipConfig& c = static_cast<const SiglipEncoder&>(*enc.value()).config();
  std::vector<float> out(1000);
  image::PixelInput good = Pixels(c, 1), shape = good, count = good, tokens = good;
  shape.shape = {3, 12, 10};
  count.pixels.pop_back();
  tokens.soft_tokens = 256;
  image::PixelInput nan = good;
  nan.pixels[(2 * 12 + 5) * 12 + 7] = std::nanf("");
  const std::pair<const image::PixelInput*, const char*> cases[] = {{&shape, "shape [3, 12, 10]"},
                                                                     {&count, "pixel values"},
                                                                     {&tokens, "256 soft tokens"},
                                                                     {&nan, "non-finite pixel value at [2, 5, 7]"},
                                                                     {nullptr, "null"}};
  for (const auto& [in, what] : cases) {
    EncodeScratch scratch;
    Status s = enc.value()->Encode({&good, in}, out.data(), pool_, scratch);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find("input 1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
}

TEST_F(SiglipEncoderTest, Bf16PrecisionRunsOnBf16CopiesOfF32Weights) {
  VisionOptions o;
  o.matmul_precision = ops::MatmulPrecision::kBf16;
  StatusOr<std::unique_ptr<VisionEncoder>> b = VisionEncoder::Load(*model_, o);
  StatusOr<std::unique_ptr<VisionEncoder>> f = VisionEncoder::Load(*model_);
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_TRUE(f.ok()) << f.status().message();
  const auto& enc = static_cast<const SiglipEncoder&>(*b.value());
  EXPECT_EQ(enc.weights().layers[0].fc1.dtype, DType::kBF16);
  EXPECT_EQ(enc.weights().mm_proj.dtype, DType::kBF16);
  const image::PixelInput in = Pixels(enc.config(), 7);
  const size_t n = static_cast<size_t>(in.soft_tokens * enc.output_width());
  std::vector<float> got(n), ref(n);
  EncodeScratch scratch;
  ASSERT_TRUE(enc.Encode({&in}, got.data(), pool_, scratch).ok());
  ASSERT_TRUE(f.value()->Encode({&in}, ref.data(), pool_, scratch).ok());
  // The bf16 buffers (rounded x, K and V copies) come from the scratch too: kept and poisoned, the
  // same bits.
  std::vector<float> again(n);
  scratch.Poison();
  ASSERT_TRUE(enc.Encode({&in}, again.data(), pool_, scratch).ok());
  EXPECT_EQ(again, got);
  // bf16 operands (8 significant bits) through one layer and the projector: a few units of 2^-8.
  const double err = RelErr(got, ref);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 3e-2);
}

TEST(SiglipWeights, TextOnlyCheckpointHasNoVisionTower) {
  StatusOr<io::SafetensorsCheckpoint> ck =
      io::SafetensorsCheckpoint::Open(std::string(TESSERA_TESTDATA_DIR) + "/models/gemma3_text/model.safetensors");
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  StatusOr<SiglipConfig> c = LoadSiglipConfig(kGemma3);
  ASSERT_TRUE(c.ok());
  StatusOr<SiglipWeights> w = LoadSiglipWeights(ck.value(), c.value(), 64, ops::MatmulPrecision::kF32);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("no Gemma 3 vision weights"), std::string::npos) << w.status().message();
}

}  // namespace
}  // namespace tessera::vision
