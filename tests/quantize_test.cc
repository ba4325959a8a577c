// tessera quantize's pieces that need no llama.cpp: QAT-grid weights quantize exactly, the
// per-tensor type choice on real model shapes (Gemma 3 1B / 4B), the file types, and errors.
// (Bytes and types against llama.cpp's own quantizer: python/tests/test_quantize.py.)
#include "tessera/quantize.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "tessera/dtype.h"
#include "tessera/quant.h"

namespace tessera {
namespace {

// Weights a quantization-aware checkpoint holds: per block of 32 an f16 scale d and values
// d * (q - offset), one of them the block's largest magnitude (-8 d for Q4_0, +-127 d for Q8_0).
std::vector<float> GridRow(QuantType t, int64_t n, std::mt19937* rng) {
  std::vector<float> w(n);
  std::uniform_real_distribution<float> scale(1e-4f, 0.05f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = F16ToF32(F32ToF16(scale(*rng)));
    std::uniform_int_distribution<int> pick(0, 31);
    const int extreme = pick(*rng);
    for (int j = 0; j < 32; ++j) {
      int q;
      if (t == QuantType::kQ4_0)
        q = j == extreme ? -8 : std::uniform_int_distribution<int>(-7, 7)(*rng);
      else
        q = j == extreme ? ((*rng)() % 2 ? 127 : -127) : std::uniform_int_distribution<int>(-126, 126)(*rng);
      w[b * 32 + j] = d * static_cast<float>(q);
    }
  }
  return w;
}

TEST(QuantizeQat, GridWeightsRoundTripExactly) {
  std::mt19937 rng(11);
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ8_0}) {
    for (int trial = 0; trial < 200; ++trial) {
      const int64_t n = 32 * (1 + trial % 40);
      const std::vector<float> w = GridRow(t, n, &rng);
      std::vector<uint8_t> q(QuantRowBytes(t, n));
      QuantizeRow(t, w.data(), q.data(), n);
      std::vector<float> back(n);
      DequantizeRow(t, q.data(), back.data(), n);
      ASSERT_EQ(back, w) << QuantTypeName(t) << " trial " << trial;
    }
  }
}

TEST(QuantizeFileTypes, NamesAndLlamaNumbers) {
  QuantizeFileType t;
  ASSERT_TRUE(ParseQuantizeFileType("Q4_K_M", &t));
  EXPECT_EQ(t, QuantizeFileType::kQ4_K_M);
  EXPECT_EQ(LlamaFtype(t), 15u);
  ASSERT_TRUE(ParseQuantizeFileType("q8_0", &t));
  EXPECT_EQ(LlamaFtype(t), 7u);
  ASSERT_TRUE(ParseQuantizeFileType("q4_0", &t));
  EXPECT_EQ(LlamaFtype(t), 2u);
  EXPECT_STREQ(QuantizeFileTypeName(t), "q4_0");
  ASSERT_TRUE(ParseQuantizeFileType("Q5_K_M", &t));
  EXPECT_EQ(t, QuantizeFileType::kQ5_K_M);
  EXPECT_EQ(LlamaFtype(t), 17u);
  EXPECT_STREQ(QuantizeFileTypeName(t), "q5_k_m");
  for (const char* bad : {"", "q4_k", "q4_k_s", "f16", "q8"}) EXPECT_FALSE(ParseQuantizeFileType(bad, &t)) << bad;
}

TEST(QuantizeOrder, GlobalsThenBlocksByNumber) {
  EXPECT_TRUE(LlamaTensorOrderLess("token_embd.weight", "blk.0.attn_q.weight"));
  EXPECT_TRUE(LlamaTensorOrderLess("blk.2.ffn_up.weight", "blk.10.attn_k.weight"));
  EXPECT_TRUE(LlamaTensorOrderLess("blk.3.attn_k.weight", "blk.3.attn_v.weight"));
  EXPECT_FALSE(LlamaTensorOrderLess("output_norm.weight", "output.weight"));
}

// A Gemma-3-shaped text model: hidden h, q_out / kv_out projection widths, ffn f, tied embedding.
std::vector<TensorPlan> GemmaPlan(int layers, int64_t h, int64_t q_out, int64_t kv_out, int64_t f) {
  std::vector<TensorPlan> p = {{"token_embd.weight", {262144, h}}, {"output_norm.weight", {h}}};
  for (int i = 0; i < layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    p.push_back({b + "attn_q.weight", {q_out, h}});
    p.push_back({b + "attn_k.weight", {kv_out, h}});
    p.push_back({b + "attn_v.weight", {kv_out, h}});
    p.push_back({b + "attn_output.weight", {h, q_out}});
    p.push_back({b + "ffn_gate.weight", {f, h}});
    p.push_back({b + "ffn_up.weight", {f, h}});
    p.push_back({b + "ffn_down.weight", {h, f}});
    p.push_back({b + "attn_norm.weight", {h}});
  }
  return p;
}

std::string TypeOf(const std::vector<TensorPlan>& p, const std::vector<GgufElementType>& t, const std::string& name) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i].name == name) return t[i].Name();
  return "absent";
}

// llama.cpp's rules (src/llama-quant.cpp) on Gemma 3 1B: hidden 1152 is not a whole number of
// 256-blocks, so Q4_K falls back to Q5_0 and Q6_K to Q8_0 wherever a row is 1152 wide.
TEST(QuantizeTypes, Gemma3_1BShapes) {
  const std::vector<TensorPlan> p = GemmaPlan(26, 1152, 1024, 256, 6912);
  const auto q8 = ChooseTensorTypes(QuantizeFileType::kQ8_0, p, 26);
  EXPECT_EQ(TypeOf(p, q8, "token_embd.weight"), "q8_0");
  EXPECT_EQ(TypeOf(p, q8, "blk.5.ffn_down.weight"), "q8_0");
  EXPECT_EQ(TypeOf(p, q8, "blk.5.attn_norm.weight"), "f32");
  const auto q4 = ChooseTensorTypes(QuantizeFileType::kQ4_0, p, 26);
  EXPECT_EQ(TypeOf(p, q4, "token_embd.weight"), "q8_0");  // tied output: Q6_K, whose blocks do not fit
  EXPECT_EQ(TypeOf(p, q4, "blk.0.attn_v.weight"), "q4_0");
  EXPECT_EQ(TypeOf(p, q4, "blk.0.ffn_down.weight"), "q4_0");
  const auto km = ChooseTensorTypes(QuantizeFileType::kQ4_K_M, p, 26);
  EXPECT_EQ(TypeOf(p, km, "token_embd.weight"), "q8_0");
  EXPECT_EQ(TypeOf(p, km, "blk.4.attn_q.weight"), "q5_0");       // rows of 1152
  EXPECT_EQ(TypeOf(p, km, "blk.4.attn_output.weight"), "q4_k");  // rows of 1024
  // "more bits" layers of 26: i < 3, i >= 22, (i - 3) % 3 == 2
  EXPECT_EQ(TypeOf(p, km, "blk.0.ffn_down.weight"), "q6_k");  // rows of 6912 = 27 blocks
  EXPECT_EQ(TypeOf(p, km, "blk.3.ffn_down.weight"), "q4_k");
  EXPECT_EQ(TypeOf(p, km, "blk.5.ffn_down.weight"), "q6_k");
  EXPECT_EQ(TypeOf(p, km, "blk.23.ffn_down.weight"), "q6_k");
  EXPECT_EQ(TypeOf(p, km, "blk.0.attn_v.weight"), "q8_0");  // Q6_K on rows of 1152
  EXPECT_EQ(TypeOf(p, km, "blk.3.attn_v.weight"), "q5_0");  // Q4_K on rows of 1152
  // Q5_K_M: the same "more bits" layers; Q5_K falls back to Q5_1 on rows of 1152.
  const auto k5 = ChooseTensorTypes(QuantizeFileType::kQ5_K_M, p, 26);
  EXPECT_EQ(TypeOf(p, k5, "token_embd.weight"), "q8_0");
  EXPECT_EQ(TypeOf(p, k5, "blk.4.attn_q.weight"), "q5_1");
  EXPECT_EQ(TypeOf(p, k5, "blk.4.attn_output.weight"), "q5_k");
  EXPECT_EQ(TypeOf(p, k5, "blk.0.ffn_down.weight"), "q6_k");
  EXPECT_EQ(TypeOf(p, k5, "blk.3.ffn_down.weight"), "q5_k");
  EXPECT_EQ(TypeOf(p, k5, "blk.0.attn_v.weight"), "q8_0");
  EXPECT_EQ(TypeOf(p, k5, "blk.3.attn_v.weight"), "q5_1");
}

// Gemma 3 4B: hidden 2560 = 10 blocks of 256, so the K-quant mix applies as chosen.
TEST(QuantizeTypes, Gemma3_4BShapesAndUntiedOutput) {
  std::vector<TensorPlan> p = GemmaPlan(34, 2560, 2048, 1024, 10240);
  auto km = ChooseTensorTypes(QuantizeFileType::kQ4_K_M, p, 34);
  EXPECT_EQ(TypeOf(p, km, "token_embd.weight"), "q6_k");
  EXPECT_EQ(TypeOf(p, km, "blk.10.attn_q.weight"), "q4_k");
  EXPECT_EQ(TypeOf(p, km, "blk.0.attn_v.weight"), "q6_k");
  EXPECT_EQ(TypeOf(p, km, "blk.4.attn_v.weight"), "q4_k");
  EXPECT_EQ(TypeOf(p, km, "blk.33.ffn_down.weight"), "q6_k");
  // With an output matrix the embedding is not the output: it keeps the base type.
  p.push_back({"output.weight", {262144, 2560}});
  km = ChooseTensorTypes(QuantizeFileType::kQ4_K_M, p, 34);
  EXPECT_EQ(TypeOf(p, km, "token_embd.weight"), "q4_k");
  EXPECT_EQ(TypeOf(p, km, "output.weight"), "q6_k");
}

// llama.cpp's quantizer on a 2-layer Gemma-4-26B-A4B-shaped GGUF (128 experts of width 704, dense
// MLP 2112; layer 1 full attention with K = V, no attn_v) wrote these types at Q4_K_M: the "more
// bits" ffn_down is chosen by the layer in the name, the same for the dense and the expert matrix.
TEST(QuantizeTypes, Gemma4MoeShapes) {
  std::vector<TensorPlan> p = {{"token_embd.weight", {16384, 2816}}, {"output_norm.weight", {2816}}};
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const int64_t q = l == 0 ? 4096 : 8192;
    p.push_back({b + "attn_q.weight", {q, 2816}});
    p.push_back({b + "attn_k.weight", {l == 0 ? 2048 : 1024, 2816}});
    if (l == 0) p.push_back({b + "attn_v.weight", {2048, 2816}});
    p.push_back({b + "attn_output.weight", {2816, q}});
    p.push_back({b + "ffn_gate.weight", {2112, 2816}});
    p.push_back({b + "ffn_up.weight", {2112, 2816}});
    p.push_back({b + "ffn_down.weight", {2816, 2112}});
    p.push_back({b + "ffn_gate_inp.weight", {128, 2816}});
    p.push_back({b + "ffn_gate_up_exps.weight", {128, 1408, 2816}});
    p.push_back({b + "ffn_down_exps.weight", {128, 2816, 704}});
    p.push_back({b + "ffn_down_exps.scale", {128}});
  }
  const auto km = ChooseTensorTypes(QuantizeFileType::kQ4_K_M, p, 2, 128);
  EXPECT_EQ(TypeOf(p, km, "token_embd.weight"), "q6_k");
  EXPECT_EQ(TypeOf(p, km, "blk.0.attn_v.weight"), "q6_k");
  EXPECT_EQ(TypeOf(p, km, "blk.0.attn_k.weight"), "q4_k");
  EXPECT_EQ(TypeOf(p, km, "blk.1.attn_output.weight"), "q4_k");
  EXPECT_EQ(TypeOf(p, km, "blk.0.ffn_down.weight"), "q5_0");       // Q4_K on rows of 2112
  EXPECT_EQ(TypeOf(p, km, "blk.0.ffn_down_exps.weight"), "q5_0");  // Q4_K on rows of 704
  EXPECT_EQ(TypeOf(p, km, "blk.1.ffn_down.weight"), "q8_0");       // Q6_K ("more bits") on 2112
  EXPECT_EQ(TypeOf(p, km, "blk.1.ffn_down_exps.weight"), "q8_0");
  EXPECT_EQ(TypeOf(p, km, "blk.1.ffn_gate_up_exps.weight"), "q4_k");
  EXPECT_EQ(TypeOf(p, km, "blk.1.ffn_gate_inp.weight"), "f32");
  EXPECT_EQ(TypeOf(p, km, "blk.1.ffn_down_exps.scale"), "f32");
  const auto q4 = ChooseTensorTypes(QuantizeFileType::kQ4_0, p, 2, 128);
  EXPECT_EQ(TypeOf(p, q4, "blk.0.attn_k.weight"), "q4_0");  // Q8_0 only with exactly 8 experts
  EXPECT_EQ(TypeOf(p, q4, "blk.1.ffn_down_exps.weight"), "q4_0");
  const auto q4_8 = ChooseTensorTypes(QuantizeFileType::kQ4_0, p, 2, 8);
  EXPECT_EQ(TypeOf(p, q4_8, "blk.0.attn_k.weight"), "q8_0");
  EXPECT_EQ(TypeOf(p, q4_8, "blk.0.attn_v.weight"), "q8_0");
  // With exactly 8 experts Q4_K_M raises attn_output to Q5_K, whose fallback on rows that are not
  // whole 256-blocks is Q5_1 (llama.cpp's choice; python/tests/test_quantize.py compares its bytes).
  const auto km8 = ChooseTensorTypes(QuantizeFileType::kQ4_K_M, p, 2, 8);
  EXPECT_EQ(TypeOf(p, km8, "blk.0.attn_output.weight"), "q5_k");
  const std::vector<TensorPlan> narrow = {{"blk.0.attn_output.weight", {2816, 4160}}};
  EXPECT_EQ(ChooseTensorTypes(QuantizeFileType::kQ4_K_M, narrow, 2, 8)[0].Name(), "q5_1");
}

TEST(QuantizeTypes, RowsThatFitNoBlockAreF16) {
  const std::vector<TensorPlan> p = {{"blk.0.proj.weight", {64, 8}},
                                     {"per_layer_model_proj.weight", {48, 64}},
                                     {"blk.0.layer_output_scale.weight", {1}}};
  const auto t = ChooseTensorTypes(QuantizeFileType::kQ4_0, p, 1);
  EXPECT_EQ(t[0].Name(), "f16");
  EXPECT_EQ(ChooseTensorTypes(QuantizeFileType::kQ5_K_M, p, 1)[0].Name(), "f16");  // Q5_K, Q5_1, then F16
  EXPECT_EQ(t[1].Name(), "f32");  // llama.cpp leaves the PLE model projection unquantized
  EXPECT_EQ(t[2].Name(), "f32");
}

TEST(QuantizeCheckpointErrors, NameTheDirectoryAndWhatIsMissing) {
  testing::TempDir dir;
  StatusOr<QuantizeReport> r = QuantizeCheckpoint(dir.File("absent"), QuantizeFileType::kQ8_0, dir.File("o.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir.File("absent")), std::string::npos) << r.status().message();
  // The fixture has weights and a config but no tokenizer: a GGUF needs one.
  const std::string fixture = std::string(TESSERA_TESTDATA_DIR) + "/models/gemma3_text";
  r = QuantizeCheckpoint(fixture, QuantizeFileType::kQ8_0, dir.File("o.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has no tokenizer.model"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessera
