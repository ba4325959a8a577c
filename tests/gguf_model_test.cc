// GGUF model loading on hand-written files (io::GgufWriter): the metadata -> ModelConfig mapping of
// Gemma 3 and Gemma 4 (what is read, what is inferred) and the errors for files the engine does not
// run. The converter-made files and the logits are python/tests/test_gguf_model.py's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/gguf_config.h"
#include "model/gguf_vocab.h"
#include "model/loaded_model.h"
#include "temp_dir.h"
#include "tessera/engine.h"
#include "tessera/gguf.h"
#include "tessera/quant.h"

namespace tessera::model {
namespace {

using io::GgufWriter;
using testing::TempDir;

// Random f32 values (seeded by name); norms near 1 as the converter's 1 + w would be.
GgufWriter::Fill Random(const std::string& name, int64_t n) {
  return [name, n](char* dst) {
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(name)));
    std::normal_distribution<float> d(0.0f, 0.05f);
    const bool norm = name.find("norm") != std::string::npos || name.find("scale") != std::string::npos;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = (norm ? 1.0f : 0.0f) + d(rng);
    std::memcpy(dst, v.data(), v.size() * 4);
    return Status::Ok();
  };
}

// A tiny GGUF as llama.cpp's converter lays one out; `edit` changes metadata or tensors before writing.
struct Spec {
  bool gemma4 = false;
  int64_t L = 2, H = 64, heads = 4, kv = 2, kv_full = 2, hd = 32, full_hd = 64, ff = 96, vocab = 64, ple = 0, shared = 0;
  std::vector<bool> sliding = {true, false};
  bool k_eq_v = false, double_wide = false;
  int64_t experts = 0, used = 2, expert_ff = 32;  // Gemma 4 MoE (expert_count > 0)
  QuantType expert_quant = QuantType::kNone;       // of the stacked expert tensors
  std::set<std::string> drop;                        // tensors left out
  std::map<std::string, std::vector<int64_t>> shape;  // tensors written with another shape
  std::function<void(GgufWriter*)> edit;
};

void AddF32(GgufWriter* w, const Spec& s, const std::string& name, std::vector<int64_t> shape) {
  if (s.drop.count(name)) return;
  if (s.shape.count(name)) shape = s.shape.at(name);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  w->AddTensor(name, shape, DType::kF32, Random(name, n));
}

// Element i of a stacked expert tensor (distinct per position, so a misplaced slice shows).
float ExpertValue(int64_t i) { return 0.001f * static_cast<float>(i % 997) - 0.4f; }

// A stacked expert tensor as the converter writes it: f32, or block-quantized from ExpertValue.
void AddStacked(GgufWriter* w, const Spec& s, const std::string& name, std::vector<int64_t> shape) {
  if (s.drop.count(name)) return;
  if (s.shape.count(name)) shape = s.shape.at(name);
  const int64_t n = shape[0] * shape[1] * shape[2];
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = ExpertValue(i);
  if (s.expert_quant == QuantType::kNone) {
    w->AddTensor(name, shape, DType::kF32, [v](char* d) {
      std::memcpy(d, v.data(), v.size() * 4);
      return Status::Ok();
    });
    return;
  }
  const QuantType q = s.expert_quant;
  w->AddQuantTensor(name, shape, q, [v, q](char* d) {
    QuantizeRow(q, v.data(), d, static_cast<int64_t>(v.size()));
    return Status::Ok();
  });
}

// One layer's MoE block under llama.cpp's names (gate and up fused, gate rows first).
void AddExperts(GgufWriter* w, const Spec& s, const std::string& p) {
  const int64_t H = s.H, E = s.experts, I = s.expert_ff;
  AddF32(w, s, p + "ffn_gate_inp.weight", {E, H});
  AddF32(w, s, p + "ffn_gate_inp.scale", {H});
  AddF32(w, s, p + "ffn_down_exps.scale", {E});
  AddStacked(w, s, p + "ffn_gate_up_exps.weight", {E, 2 * I, H});
  AddStacked(w, s, p + "ffn_down_exps.weight", {E, H, I});
  AddF32(w, s, p + "pre_ffw_norm_2.weight", {H});
  AddF32(w, s, p + "post_ffw_norm_1.weight", {H});
  AddF32(w, s, p + "post_ffw_norm_2.weight", {H});
}

void WriteMetadata(GgufWriter& w, const Spec& s) {
  const std::string a = s.gemma4 ? "gemma4" : "gemma3";
  w.SetString("general.architecture", a);
  w.SetU32(a + ".block_count", static_cast<uint32_t>(s.L));
  w.SetU32(a + ".context_length", 4096);
  w.SetU32(a + ".embedding_length", static_cast<uint32_t>(s.H));
  w.SetU32(a + ".attention.head_count", static_cast<uint32_t>(s.heads));
  w.SetU32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.kv));
  w.SetF32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.SetF32(a + ".rope.freq_base", 1e6f);
  w.SetF32(a + ".rope.freq_base_swa", 1e4f);
  w.SetU32(a + ".attention.sliding_window", 8);
  w.SetU32("tokenizer.ggml.bos_token_id", 2);
  w.SetU32("tokenizer.ggml.eos_token_id", 1);
  w.SetU32("tokenizer.ggml.padding_token_id", 0);
  if (s.gemma4) {
    w.SetU32(a + ".attention.key_length", static_cast<uint32_t>(s.full_hd));
    w.SetU32(a + ".attention.value_length", static_cast<uint32_t>(s.full_hd));
    w.SetU32(a + ".attention.key_length_swa", static_cast<uint32_t>(s.hd));
    w.SetU32(a + ".attention.value_length_swa", static_cast<uint32_t>(s.hd));
    w.SetBoolArray(a + ".attention.sliding_window_pattern", s.sliding);
    w.SetU32(a + ".attention.shared_kv_layers", static_cast<uint32_t>(s.shared));
    w.SetU32(a + ".embedding_length_per_layer_input", static_cast<uint32_t>(s.ple));
    std::vector<int32_t> ff;
    for (int64_t i = 0; i < s.L; ++i) ff.push_back(static_cast<int32_t>(s.double_wide && i >= s.L - s.shared ? 2 * s.ff : s.ff));
    w.SetI32Array(a + ".feed_forward_length", ff);
    w.SetF32(a + ".final_logit_softcapping", 30.0f);
    if (s.experts > 0) {
      w.SetU32(a + ".expert_count", static_cast<uint32_t>(s.experts));
      if (s.used > 0) w.SetU32(a + ".expert_used_count", static_cast<uint32_t>(s.used));  // 0: left out
      if (s.expert_ff > 0) w.SetU32(a + ".expert_feed_forward_length", static_cast<uint32_t>(s.expert_ff));
    }
  } else {
    w.SetU32(a + ".attention.key_length", static_cast<uint32_t>(s.hd));
    w.SetU32(a + ".attention.value_length", static_cast<uint32_t>(s.hd));
    w.SetU32(a + ".feed_forward_length", static_cast<uint32_t>(s.ff));
    w.SetString(a + ".rope.scaling.type", "linear");
    w.SetF32(a + ".rope.scaling.factor", 8.0f);
  }
}

std::string Write(const TempDir& dir, const Spec& s, const std::string& file = "m.gguf") {
  GgufWriter w;
  WriteMetadata(w, s);
  if (s.edit) s.edit(&w);
  const int64_t H = s.H;
  AddF32(&w, s, "token_embd.weight", {s.vocab, H});
  AddF32(&w, s, "output_norm.weight", {H});
  if (s.gemma4) {
    std::vector<float> freqs(static_cast<size_t>(s.full_hd / 2), 1e30f);
    for (int64_t i = 0; i < s.full_hd / 8; ++i) freqs[i] = 1.0f;  // partial_rotary_factor 0.25
    if (!s.drop.count("rope_freqs.weight"))
      w.AddTensor("rope_freqs.weight", {s.full_hd / 2}, DType::kF32, [freqs](char* d) {
        std::memcpy(d, freqs.data(), freqs.size() * 4);
        return Status::Ok();
      });
  }
  if (s.ple > 0) {
    AddF32(&w, s, "per_layer_token_embd.weight", {s.vocab, s.L * s.ple});
    AddF32(&w, s, "per_layer_model_proj.weight", {s.L * s.ple, H});
    AddF32(&w, s, "per_layer_proj_norm.weight", {s.ple});
  }
  for (int64_t i = 0; i < s.L; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const bool sl = s.gemma4 ? s.sliding[i] : true;
    const int64_t D = s.gemma4 && !sl ? s.full_hd : s.hd;
    const bool owner = i < s.L - s.shared;
    const int64_t ff = s.double_wide && !owner ? 2 * s.ff : s.ff;
    const int64_t kv = sl ? s.kv : s.kv_full;
    AddF32(&w, s, p + "attn_norm.weight", {H});
    AddF32(&w, s, p + "attn_q.weight", {s.heads * D, H});
    AddF32(&w, s, p + "attn_output.weight", {H, s.heads * D});
    AddF32(&w, s, p + "attn_q_norm.weight", {D});
    if (owner) {
      AddF32(&w, s, p + "attn_k.weight", {kv * D, H});
      if (!(s.k_eq_v && !sl)) AddF32(&w, s, p + "attn_v.weight", {kv * D, H});
      AddF32(&w, s, p + "attn_k_norm.weight", {D});
    }
    AddF32(&w, s, p + "post_attention_norm.weight", {H});
    AddF32(&w, s, p + "ffn_norm.weight", {H});
    AddF32(&w, s, p + "ffn_gate.weight", {ff, H});
    AddF32(&w, s, p + "ffn_up.weight", {ff, H});
    AddF32(&w, s, p + "ffn_down.weight", {H, ff});
    AddF32(&w, s, p + "post_ffw_norm.weight", {H});
    if (s.gemma4) AddF32(&w, s, p + "layer_output_scale.weight", {1});
    if (s.experts > 0) AddExperts(&w, s, p);
    if (s.ple > 0) {
      AddF32(&w, s, p + "inp_gate.weight", {s.ple, H});
      AddF32(&w, s, p + "proj.weight", {H, s.ple});
      AddF32(&w, s, p + "post_norm.weight", {H});
    }
  }
  const std::string path = dir.File(file);
  const Status st = w.Write(path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

StatusOr<std::unique_ptr<LoadedModel>> Load(const std::string& path) { return LoadedModel::Load(path); }

void ExpectError(const Spec& s, const std::string& needle) {
  TempDir dir;
  const std::string path = Write(dir, s);
  StatusOr<std::unique_ptr<LoadedModel>> m = Load(path);
  ASSERT_FALSE(m.ok()) << "loaded, expected an error containing: " << needle;
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find(path), std::string::npos) << m.status().message();
}

TEST(GgufModel, Gemma3MetadataMapsToTheConfig) {
  TempDir dir;
  Spec s;
  s.L = 7;
  s.edit = [](GgufWriter* w) {
    w->SetF32("gemma3.final_logit_softcapping", 6.0f);
    w->SetU32("tokenizer.ggml.eot_token_id", 106 % 64);
  };
  StatusOr<std::unique_ptr<LoadedModel>> m = Load(Write(dir, s));
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ModelConfig& c = m.value()->config();
  EXPECT_EQ(c.model_type, ModelType::kGemma3Text);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 7);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  // No pattern key: llama.cpp's default period 6 (layers 5 and 11, ... full).
  for (int64_t i = 0; i < 7; ++i)
    EXPECT_EQ(c.layer_types[i], i == 5 ? kv::LayerKind::kFull : kv::LayerKind::kSliding) << i;
  EXPECT_EQ(c.rope_full.type, RopeType::kLinear);
  EXPECT_EQ(c.rope_full.factor, 8.0);
  EXPECT_EQ(c.rope_full.theta, 1e6);
  EXPECT_EQ(c.rope_sliding.type, RopeType::kDefault);
  EXPECT_EQ(c.rope_sliding.theta, 1e4);
  EXPECT_EQ(*c.final_logit_softcapping, 6.0);
  EXPECT_DOUBLE_EQ(c.attention_scale, 1.0 / std::sqrt(32.0));  // query_pre_attn_scalar = head_dim
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106 % 64}));
  EXPECT_EQ(m.value()->model().arch().norm_offset, 0.0f);  // the file holds 1 + w
  EXPECT_EQ(m.value()->inferred().size(), 2u);
}

TEST(GgufModel, Gemma3ScaleAndPatternKeysWin) {
  TempDir dir;
  Spec s;
  s.L = 4;
  s.edit = [](GgufWriter* w) {
    w->SetF32("gemma3.attention.scale", 0.125f);
    w->SetU32("gemma3.attention.sliding_window_pattern", 2);
  };
  StatusOr<std::unique_ptr<LoadedModel>> m = Load(Write(dir, s));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m.value()->config().attention_scale, 0.125);
  const std::vector<kv::LayerKind> want = {kv::LayerKind::kSliding, kv::LayerKind::kFull, kv::LayerKind::kSliding,
                                           kv::LayerKind::kFull};
  EXPECT_EQ(m.value()->config().layer_types, want);
  EXPECT_TRUE(m.value()->inferred().empty());
}

TEST(GgufModel, Gemma4PerLayerGeometryKvSharingPleAndKEqV) {
  TempDir dir;
  Spec s;
  s.gemma4 = true;
  s.L = 4;
  s.sliding = {true, false, true, false};
  s.shared = 2;
  s.ple = 32;
  s.k_eq_v = true;
  s.double_wide = true;
  s.kv_full = 1;
  s.edit = [](GgufWriter* w) { w->SetI32Array("gemma4.attention.head_count_kv", {2, 1, 2, 1}); };
  StatusOr<std::unique_ptr<LoadedModel>> m = Load(Write(dir, s));
  ASSERT_TRUE(m.ok()) << m.status().message();
  const ModelConfig& c = m.value()->config();
  EXPECT_EQ(c.model_type, ModelType::kGemma4Text);
  EXPECT_EQ(c.num_kv_shared_layers, 2);
  EXPECT_TRUE(c.use_double_wide_mlp);
  EXPECT_TRUE(c.attention_k_eq_v);
  EXPECT_EQ(c.hidden_size_per_layer_input, 32);
  EXPECT_EQ(c.vocab_size_per_layer_input, 64);
  EXPECT_EQ(c.rope_full.type, RopeType::kProportional);
  EXPECT_EQ(*c.final_logit_softcapping, 30.0);
  const GemmaArch& a = m.value()->model().arch();
  EXPECT_EQ(a.norm_offset, 0.0f);
  for (int64_t i = 0; i < 4; ++i) {
    const LayerArch& l = a.layers[i];
    const bool full = i % 2 == 1;
    EXPECT_EQ(l.head_dim, full ? 64 : 32) << i;
    EXPECT_EQ(l.kv_heads, full ? 1 : 2) << i;
    EXPECT_EQ(l.shared_kv, i >= 2) << i;
    EXPECT_EQ(l.has_v_proj, !full && i < 2) << i;
    EXPECT_EQ(l.intermediate, i >= 2 ? 192 : 96) << i;
    int64_t pairs = 0;
    for (float f : l.inv_freq) pairs += f != 0.0f;
    EXPECT_EQ(pairs, full ? 8 : 16) << i;  // rope_freqs: 8 of 32 pairs rotated
  }
}

TEST(GgufModel, VocabularyFromTheFile) {
  TempDir dir;
  Spec s;
  s.edit = [](GgufWriter* w) {
    w->SetString("tokenizer.ggml.model", "llama");
    std::vector<std::string> tokens;
    for (int i = 0; i < 64; ++i) tokens.push_back("t" + std::to_string(i));
    w->SetStringArray("tokenizer.ggml.tokens", tokens);
    w->SetF32Array("tokenizer.ggml.scores", std::vector<float>(64, 0.0f));
    w->SetBool("tokenizer.ggml.add_space_prefix", false);
  };
  const std::string path = Write(dir, s);
  StatusOr<io::GgufFile> f = io::GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  StatusOr<tokenizer::TokenizerVocab> v = ReadGgufVocab(f.value());
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(v.value().model, "llama");
  EXPECT_EQ(v.value().tokens.size(), 64u);
  EXPECT_EQ(v.value().bos_id, 2);
  EXPECT_EQ(v.value().eos_id, 1);
  EXPECT_FALSE(v.value().add_space_prefix);
}

TEST(GgufModel, RefusesOtherArchitecturesAndFeatures) {
  Spec arch;
  arch.edit = [](GgufWriter* w) { w->SetString("general.architecture", "llama"); };
  ExpectError(arch, "general.architecture = \"llama\" is not supported (gemma3, gemma4)");
  Spec clip;
  clip.edit = [](GgufWriter* w) { w->SetString("general.architecture", "clip"); };
  ExpectError(clip, "(mmproj) file");
  Spec moe;
  moe.edit = [](GgufWriter* w) { w->SetU32("gemma3.expert_count", 8); };
  ExpectError(moe, "gemma3.expert_count = 8: Mixture-of-Experts layers are supported for Gemma 4 only");
  Spec yarn;
  yarn.edit = [](GgufWriter* w) { w->SetString("gemma3.rope.scaling.type", "yarn"); };
  ExpectError(yarn, "gemma3.rope.scaling.type = \"yarn\" is not supported");
  Spec freqs;
  freqs.gemma4 = true;
  freqs.drop = {"rope_freqs.weight"};
  freqs.edit = [](GgufWriter* w) {
    w->AddTensor("rope_freqs.weight", {32}, DType::kF32, [](char* d) {
      std::vector<float> v(32, 2.0f);
      std::memcpy(d, v.data(), 128);
      return Status::Ok();
    });
  };
  ExpectError(freqs, "rope_freqs.weight entry 0");
  Spec last_sliding;
  last_sliding.gemma4 = true;
  last_sliding.sliding = {false, true};
  ExpectError(last_sliding, "marks the last layer sliding");
}

TEST(GgufModel, BadMetadataTypesAndValuesNameTheKey) {
  Spec type;
  type.edit = [](GgufWriter* w) { w->SetString("gemma3.block_count", "two"); };
  ExpectError(type, "gemma3.block_count");
  Spec heads;
  heads.edit = [](GgufWriter* w) { w->SetU32("gemma3.attention.head_count_kv", 3); };
  ExpectError(heads, "(from gemma3.attention.head_count_kv)");
  Spec missing;
  missing.edit = [](GgufWriter* w) { w->SetString("gemma3.attention.layer_norm_rms_epsilon", "x"); };
  ExpectError(missing, "gemma3.attention.layer_norm_rms_epsilon");
}

TEST(GgufModel, MissingExtraAndMisshapenTensorsAreErrors) {
  Spec missing;
  missing.drop = {"blk.1.ffn_up.weight"};
  ExpectError(missing, "tensor blk.1.ffn_up.weight is missing");
  Spec shape;
  shape.shape["blk.0.attn_q.weight"] = {64, 64};
  ExpectError(shape, "tensor blk.0.attn_q.weight in ");
  Spec extra;
  extra.edit = [](GgufWriter* w) { w->AddTensor("blk.2.attn_norm.weight", {64}, DType::kF32, Random("x", 64)); };
  ExpectError(extra, "block_count is 2 but the file holds tensor blk.2.attn_norm.weight");
  Spec fused;
  fused.edit = [](GgufWriter* w) { w->AddTensor("blk.0.attn_qkv.weight", {64}, DType::kF32, Random("x", 64)); };
  ExpectError(fused, "fused QKV");
}

TEST(GgufModel, QuantizedMatrixWithNonFiniteScaleIsRefused) {
  Spec s;
  s.drop = {"blk.0.ffn_gate.weight"};
  s.edit = [](GgufWriter* w) {
    w->AddQuantTensor("blk.0.ffn_gate.weight", {96, 64}, QuantType::kQ8_0, [](char* d) {
      std::vector<float> v(96 * 64, 0.25f);
      QuantizeRow(QuantType::kQ8_0, v.data(), d, 96 * 64);
      BlockQ8_0 b;
      std::memcpy(&b, d + 5 * sizeof(BlockQ8_0), sizeof b);
      b.d = 0x7C00;  // +inf in f16
      std::memcpy(d + 5 * sizeof(BlockQ8_0), &b, sizeof b);
      return Status::Ok();
    });
  };
  ExpectError(s, "blk.0.ffn_gate.weight in");
  TempDir dir;
  StatusOr<std::unique_ptr<LoadedModel>> m = Load(Write(dir, s));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("non-finite block scale in block 5 (row 2)"), std::string::npos)
      << m.status().message();
}

TEST(GgufModel, QuantizedRowsLongerThanTheDecodeKernelTakesAreRefused) {
  Spec s;
  s.L = 1;
  s.ff = ops::kMaxQuantRowDotIn + 32;  // ffn_down's rows
  s.drop = {"blk.0.ffn_down.weight"};
  s.edit = [&s](GgufWriter* w) {
    w->AddQuantTensor("blk.0.ffn_down.weight", {s.H, s.ff}, QuantType::kQ8_0, [&s](char* d) {
      std::memset(d, 0, static_cast<size_t>(s.H * QuantRowBytes(QuantType::kQ8_0, s.ff)));
      return Status::Ok();
    });
  };
  ExpectError(s, "blk.0.ffn_down.weight in");
  ExpectError(s, "quantized rows of up to " + std::to_string(ops::kMaxQuantRowDotIn));
}

TEST(GgufModel, QuantizedWeightsLoadAsStored) {
  TempDir dir;
  Spec s;
  s.drop = {"blk.0.ffn_gate.weight", "token_embd.weight"};
  s.edit = [](GgufWriter* w) {
    for (auto [name, rows] : {std::pair<std::string, int64_t>{"blk.0.ffn_gate.weight", 96}, {"token_embd.weight", 64}})
      w->AddQuantTensor(name, {rows, 64}, QuantType::kQ8_0, [rows](char* d) {
        std::vector<float> v(static_cast<size_t>(rows * 64));
        for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(static_cast<int>(i % 17) - 8);
        QuantizeRow(QuantType::kQ8_0, v.data(), d, rows * 64);
        return Status::Ok();
      });
  };
  StatusOr<std::unique_ptr<LoadedModel>> m = Load(Write(dir, s));
  ASSERT_TRUE(m.ok()) << m.status().message();
  const GemmaWeights& w = m.value()->model().weights();
  EXPECT_EQ(w.layers[0].gate.quant, QuantType::kQ8_0);
  EXPECT_EQ(w.embed.quant, QuantType::kQ8_0);
  EXPECT_EQ(w.lm_head.quant, QuantType::kQ8_0);  // tied
  EXPECT_EQ(w.layers[0].up.quant, QuantType::kNone);
  EXPECT_EQ(w.embed_scale, 8.0f);  // sqrt(64) in f32: a quantized table has no dtype to round to
}

// Last-position logits of a short prompt, then of one decode step.
std::vector<float> PromptLogits(const std::string& path) {
  LoadOptions o;
  o.threads = 1;
  StatusOr<std::unique_ptr<Model>> m = Model::Load(path, o);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return {};
  SessionOptions so;
  so.max_context = 16;
  so.max_chunk = 16;
  StatusOr<std::unique_ptr<Session>> s = m.value()->NewSession(so);
  EXPECT_TRUE(s.ok()) << s.status().message();
  const int64_t V = m.value()->info().vocab;
  std::vector<float> out(static_cast<size_t>(2 * V));
  Prompt prompt;
  prompt.tokens = {2, 7, 31, 63, 5};
  EXPECT_TRUE(s.value()->Prefill({prompt}, out.data()).ok());
  const int32_t next = 11;
  EXPECT_TRUE(s.value()->Decode(&next, nullptr, out.data() + V).ok());
  return out;
}

// Quantized lookup tables (the token embedding and Gemma 4's per-layer table) give exactly the
// logits of the same file with those tables stored dequantized as f32: the lookups dequantize the
// row (the per-layer slices block by block) and nothing else is quantized.
TEST(GgufModel, QuantizedLookupTablesDequantizeTheirRows) {
  TempDir dir;
  Spec s;
  s.gemma4 = true;
  s.L = 2;
  s.ple = 32;
  s.vocab = 64;
  const int64_t rows[] = {64, 64}, cols[] = {64, 2 * 32};
  const char* names[] = {"token_embd.weight", "per_layer_token_embd.weight"};
  auto values = [](int64_t n, int k) {
    std::vector<float> v(static_cast<size_t>(n));
    std::mt19937 rng(k);
    std::normal_distribution<float> d(0.0f, 0.05f);
    for (float& x : v) x = d(rng);
    return v;
  };
  for (bool quant : {true, false}) {
    Spec t = s;
    t.drop = {names[0], names[1]};
    t.edit = [&](GgufWriter* w) {
      w->AddTensor("output.weight", {64, 64}, DType::kF32, Random("output.weight", 64 * 64));  // untied head
      for (int k = 0; k < 2; ++k) {
        const int64_t n = rows[k] * cols[k];
        std::vector<float> v = values(n, k);
        std::vector<char> q(static_cast<size_t>(QuantRowBytes(QuantType::kQ8_0, n)));
        QuantizeRow(QuantType::kQ8_0, v.data(), q.data(), n);
        if (quant) {
          w->AddQuantTensor(names[k], {rows[k], cols[k]}, QuantType::kQ8_0, [q](char* d) {
            std::memcpy(d, q.data(), q.size());
            return Status::Ok();
          });
        } else {
          DequantizeRow(QuantType::kQ8_0, q.data(), v.data(), n);
          w->AddTensor(names[k], {rows[k], cols[k]}, DType::kF32, [v](char* d) {
            std::memcpy(d, v.data(), v.size() * 4);
            return Status::Ok();
          });
        }
      }
    };
    Write(dir, t, quant ? "q.gguf" : "f.gguf");
  }
  const std::vector<float> q = PromptLogits(dir.File("q.gguf")), f = PromptLogits(dir.File("f.gguf"));
  ASSERT_EQ(q.size(), f.size());
  EXPECT_EQ(q, f);
  float largest = 0.0f;
  for (float x : q) largest = std::max(largest, std::abs(x));
  EXPECT_GT(largest, 0.0f);
}

// Gemma 4 MoE: the expert keys become the config's, and every expert's gate, up and down are views
// of their rows of the stacked tensors (f32 and block-quantized: whole rows of blocks).
TEST(GgufModel, Gemma4MoeExpertsAreViewsOfTheirRows) {
  for (QuantType q : {QuantType::kNone, QuantType::kQ8_0, QuantType::kQ4_K}) {
    TempDir dir;
    Spec s;
    s.gemma4 = true;
    s.H = 256;  // a row of Q4_K is 256 values
    s.heads = 2;
    s.experts = 4;
    s.used = 2;
    s.expert_ff = 256;
    s.expert_quant = q;
    StatusOr<std::unique_ptr<LoadedModel>> m = Load(Write(dir, s));
    ASSERT_TRUE(m.ok()) << m.status().message();
    const ModelConfig& c = m.value()->config();
    EXPECT_TRUE(c.has_moe());
    EXPECT_EQ(c.num_experts, 4);
    EXPECT_EQ(c.top_k_experts, 2);
    EXPECT_EQ(c.moe_intermediate_size, 256);
    const int64_t H = s.H, I = s.expert_ff;
    // Element [r, col] of expert e's slice [row0, row0 + out) of a stacked [E, rows, in] tensor.
    auto check = [&](const ops::WeightView& v, int64_t e, int64_t rows, int64_t row0, int64_t out, int64_t in,
                     const std::string& what) {
      ASSERT_EQ(v.out, out) << what;
      ASSERT_EQ(v.in, in) << what;
      EXPECT_EQ(v.quant, q) << what;
      std::vector<float> got(static_cast<size_t>(out * in)), want(got.size());
      if (q == QuantType::kNone) {
        DecodeToF32(v.dtype, v.data, got.data(), out * in);
      } else {
        DequantizeRow(q, v.data, got.data(), out * in);
      }
      for (int64_t i = 0; i < out * in; ++i) want[i] = ExpertValue((e * rows + row0) * in + i);
      if (q != QuantType::kNone) {  // the same rows quantized on their own: the same blocks
        std::vector<char> blocks(static_cast<size_t>(QuantRowBytes(q, out * in)));
        QuantizeRow(q, want.data(), blocks.data(), out * in);
        DequantizeRow(q, blocks.data(), want.data(), out * in);
      }
      EXPECT_EQ(got, want) << what;
    };
    for (const LayerWeights& lw : m.value()->model().weights().layers) {
      ASSERT_EQ(lw.expert_gate.size(), 4u);
      for (int64_t e = 0; e < 4; ++e) {
        check(lw.expert_gate[e], e, 2 * I, 0, I, H, "gate " + std::to_string(e));
        check(lw.expert_up[e], e, 2 * I, I, I, H, "up " + std::to_string(e));
        check(lw.expert_down[e], e, H, 0, H, I, "down " + std::to_string(e));
      }
    }
  }
}

TEST(GgufModel, Gemma4MoeErrorsNameTheKeyOrTensor) {
  Spec base;
  base.gemma4 = true;
  base.experts = 4;
  Spec no_used = base;
  no_used.used = 0;
  ExpectError(no_used, "gemma4.expert_used_count is missing (required with expert_count = 4)");
  Spec no_width = base;
  no_width.expert_ff = 0;
  ExpectError(no_width, "gemma4.expert_feed_forward_length is missing");
  Spec too_many = base;
  too_many.used = 5;
  ExpectError(too_many, "(from gemma4.expert_used_count)");
  Spec shape = base;
  shape.shape["blk.1.ffn_gate_up_exps.weight"] = {4, 32, 64};
  ExpectError(shape, "tensor blk.1.ffn_gate_up_exps.weight in ");
  ExpectError(shape, "has shape [4, 32, 64], expected [4, 64, 64]");
  Spec missing = base;
  missing.drop = {"blk.0.ffn_down_exps.scale"};
  ExpectError(missing, "tensor blk.0.ffn_down_exps.scale is missing");
  // Expert tensors in a file without expert_count would be ignored: refused.
  Spec stray;
  stray.gemma4 = true;
  stray.edit = [](GgufWriter* w) {
    w->AddTensor("blk.0.ffn_down_exps.weight", {4, 64, 32}, DType::kF32, Random("x", 4 * 64 * 32));
  };
  ExpectError(stray, "tensor blk.0.ffn_down_exps.weight belongs to a Mixture-of-Experts block");
  // Separate gate and up stacks (other converters) are not what the binder reads.
  Spec split = base;
  split.edit = [](GgufWriter* w) {
    w->AddTensor("blk.0.ffn_gate_exps.weight", {4, 32, 64}, DType::kF32, Random("x", 4 * 32 * 64));
  };
  ExpectError(split, "tensor blk.0.ffn_gate_exps.weight is of a kind this engine does not run");
  // A non-finite block scale names the expert's slice and its block.
  Spec nan = base;
  nan.expert_quant = QuantType::kQ8_0;
  nan.drop = {"blk.0.ffn_down_exps.weight"};
  nan.edit = [](GgufWriter* w) {
    w->AddQuantTensor("blk.0.ffn_down_exps.weight", {4, 64, 32}, QuantType::kQ8_0, [](char* d) {
      std::vector<float> v(4 * 64 * 32, 0.25f);
      QuantizeRow(QuantType::kQ8_0, v.data(), d, 4 * 64 * 32);
      BlockQ8_0 b;
      const size_t at = (2 * 64 + 3) * sizeof(BlockQ8_0);  // expert 2, row 3 (one block per row)
      std::memcpy(&b, d + at, sizeof b);
      b.d = 0x7E00;  // NaN in f16
      std::memcpy(d + at, &b, sizeof b);
      return Status::Ok();
    });
  };
  ExpectError(nan, "blk.0.ffn_down_exps.weight[2, 0:64] in");
  ExpectError(nan, "non-finite block scale in block 3 (row 3)");
}

}  // namespace
}  // namespace tessera::model
