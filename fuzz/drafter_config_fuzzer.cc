// libFuzzer target: a Gemma 4 assistant's config.json (model::ParseDrafterConfig, what
// LoadDrafterConfig runs on the text). Invariants on success: the backbone width is in range, an
// ordered-embeddings head has clusters that divide the vocabulary and a top-k within them, and the
// text stack is a complete gemma4_text config
// without per-layer embeddings whose layers all own their geometry (the drafter marks them shared).
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "model/drafter_config.h"

namespace {

void Check(std::string_view text) {
  tessera::StatusOr<tessera::model::DrafterConfig> r = tessera::model::ParseDrafterConfig(text);
  if (!r.ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error must say what is wrong");
    return;
  }
  const tessera::model::DrafterConfig& c = r.value();
  FUZZ_CHECK(c.backbone_hidden_size >= 1 && c.backbone_hidden_size <= 65536, "backbone_hidden_size");
  FUZZ_CHECK(c.text.is_gemma4() && !c.text.has_ple(), "text_config must be gemma4_text without PLE");
  FUZZ_CHECK(c.text.num_kv_shared_layers == 0, "the parsed text stack owns its K/V geometry");
  if (c.ordered_embeddings) {
    FUZZ_CHECK(c.num_centroids >= 1 && c.text.vocab_size % c.num_centroids == 0, "clusters divide the vocabulary");
    FUZZ_CHECK(c.centroid_top_k >= 1 && c.centroid_top_k <= c.num_centroids, "top-k within the clusters");
  }
  FUZZ_CHECK(static_cast<int64_t>(c.text.layers.size()) == c.text.num_hidden_layers && c.text.num_hidden_layers >= 1,
             "layers");
  for (const tessera::model::LayerConfig& l : c.text.layers)
    FUZZ_CHECK(l.head_dim >= 2 && l.num_kv_heads >= 1 && l.intermediate_size >= 1, "layer geometry");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("ParseDrafterConfig", [&] { Check(text); });
  return 0;
}
