// Which layers take image blocks, per model variant, and the mask SetLayerMask builds from that.
// The expected visibility is written out independently of the attention code: the rule
// transformers' generation uses (create_masks_for_vision_model for Gemma 4, both of its paths for
// Gemma 3), see docs/attention.md "Which layers see image blocks".
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gemma_arch.h"
#include "tessera/attention.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;

// A small text config of `model_type` with layers [sliding, sliding, full] and window 3.
Json TextConfig(const std::string& model_type, const Json& bidirectional) {
  Json t = {{"model_type", model_type},
            {"hidden_size", 32},
            {"intermediate_size", 64},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 2},
            {"num_key_value_heads", 1},
            {"head_dim", 16},
            {"sliding_window", 3},
            {"vocab_size", 64},
            {"layer_types", {"sliding_attention", "sliding_attention", "full_attention"}}};
  if (model_type != "gemma3_text") {
    t["global_head_dim"] = 16;
    t["use_bidirectional_attention"] = bidirectional;
  }
  return t;
}

GemmaArch Arch(const std::string& top, const std::string& text_type, const Json& bidirectional) {
  Json cfg = {{"model_type", top}, {"text_config", TextConfig(text_type, bidirectional)}};
  StatusOr<ModelConfig> c = ParseModelConfig(cfg.dump());
  EXPECT_TRUE(c.ok()) << c.status().message();
  StatusOr<GemmaArch> a = BuildArch(c.value());
  EXPECT_TRUE(a.ok()) << a.status().message();
  return a.value();
}

std::vector<bool> BlocksPerLayer(const GemmaArch& a) {
  std::vector<bool> out;
  for (const LayerArch& la : a.layers) out.push_back(la.image_blocks);
  return out;
}

TEST(GemmaArchTest, WhichLayersTakeImageBlocks) {
  using V = std::vector<bool>;
  // Gemma 3: every layer.
  EXPECT_EQ(BlocksPerLayer(Arch("gemma3", "gemma3_text", nullptr)), (V{true, true, true}));
  // Gemma 4 "vision" (12B/26B/31B): sliding layers only; global layers causal.
  EXPECT_EQ(BlocksPerLayer(Arch("gemma4", "gemma4_text", "vision")), (V{true, true, false}));
  // Gemma 4 without the flag (E2B/E4B): no layer.
  EXPECT_EQ(BlocksPerLayer(Arch("gemma4", "gemma4_text", nullptr)), (V{false, false, false}));
  // Gemma 4 unified: the same rule as Gemma 4 "vision", not its forward path's blocks on every layer.
  const GemmaArch u = Arch("gemma4_unified", "gemma4_unified_text", "vision");
  EXPECT_EQ(BlocksPerLayer(u), (V{true, true, false}));
  EXPECT_STREQ(MaskRuleName(u.layers[0]), "window & (causal | image)");
  EXPECT_STREQ(MaskRuleName(u.layers[2]), "causal");
}

// transformers' Gemma4Model / Gemma4UnifiedModel embed every placeholder id (image, video, audio)
// under the pad id -- main embedding and PLE identity -- even where no features replace it (a
// placeholder the model generated): Tessera looks such a token up as pad. Gemma 3 and the text-only
// Gemma 4 classes look every id up as itself.
TEST(GemmaArchTest, PlaceholderWithoutEmbeddingIsLookedUpAsPad) {
  for (const char* top : {"gemma4", "gemma4_unified"}) {
    const std::string t = top;
    const GemmaArch a = Arch(t, t == "gemma4" ? "gemma4_text" : "gemma4_unified_text", "vision");
    EXPECT_TRUE(a.placeholder_as_pad) << top;
    ASSERT_EQ(a.image_token_ids.size(), 3u) << top;  // image, video, audio (config defaults)
    for (int32_t id : a.image_token_ids) EXPECT_EQ(a.LookupId(id), a.pad_token_id) << top << " " << id;
    EXPECT_EQ(a.LookupId(5), 5) << top;
  }
  const GemmaArch g3 = Arch("gemma3", "gemma3_text", nullptr);
  EXPECT_FALSE(g3.placeholder_as_pad);
  for (int32_t id : g3.image_token_ids) EXPECT_EQ(g3.LookupId(id), id);
}

// Generation's rule for one layer: sliding AND(q - k < W, causal OR same block); full causal only
// (Gemma 4) or causal OR same block (Gemma 3).
bool Expected(bool sliding, bool blocks_on_full, int64_t W, int q, int k, const std::vector<int32_t>& blk) {
  const bool same = blk[q] >= 0 && blk[q] == blk[k];
  if (sliding) return q - k < W && (k <= q || same);
  return k <= q || (blocks_on_full && same);
}

TEST(GemmaArchTest, LayerMaskIsGenerationsRule) {
  // An image block (ids 0) longer than the window, text around it, a second image (ids 1).
  const std::vector<int32_t> blk = {-1, -1, 0, 0, 0, 0, 0, 0, -1, 1, 1, 1, -1};
  const int S = static_cast<int>(blk.size());
  std::vector<int32_t> pos(S);
  for (int i = 0; i < S; ++i) pos[i] = i;
  for (const char* top : {"gemma3", "gemma4", "gemma4_unified"}) {
    const std::string t = top;
    const std::string text = t == "gemma3" ? "gemma3_text" : (t == "gemma4" ? "gemma4_text" : "gemma4_unified_text");
    const GemmaArch a = Arch(t, text, t == "gemma3" ? Json(nullptr) : Json("vision"));
    for (const LayerArch& la : a.layers) {
      MaskSpec m;
      m.q_pos = m.k_pos = pos.data();
      SetLayerMask(la, /*causal=*/true, blk.data(), blk.data(), &m);
      std::vector<float> bias(S * S);
      ASSERT_TRUE(AttentionBias(m, 1, S, S, -1.0f, bias.data()).ok());
      const bool sliding = la.kind == kv::LayerKind::kSliding;
      for (int q = 0; q < S; ++q)
        for (int k = 0; k < S; ++k)
          EXPECT_EQ(bias[q * S + k] == 0.0f, Expected(sliding, t == "gemma3", la.window, q, k, blk))
              << top << (sliding ? " sliding" : " full") << " q=" << q << " k=" << k;
    }
  }
}

}  // namespace
}  // namespace tessera::model
