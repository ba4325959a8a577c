// libFuzzer target: a GGUF file image read as a model (model::GgufToModelConfig on what
// io::GgufFile::FromBytes accepts, and the tokenizer vocabulary, model::ReadGgufVocab). Invariants
// on success: the config is complete and within ParseModelConfig's limits (one entry per layer,
// heads dividing, widths positive, 1 <= experts used <= experts), every layer's RoPE frequencies
// are finite, and the vocabulary's ids index its token list. Seeds: fuzz/corpus/gguf_model (the
// converter's files of the tiny checkpoints, written by fuzz/make_corpus.py when the converter is
// installed); dictionary: fuzz/gguf_model.dict.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "model/gguf_config.h"
#include "model/gguf_vocab.h"
#include "model/rope_config.h"
#include "tessera/gguf.h"

namespace {

void CheckConfig(const tessera::model::ModelConfig& c) {
  FUZZ_CHECK(c.num_hidden_layers >= 1 && static_cast<int64_t>(c.layers.size()) == c.num_hidden_layers, "layers");
  FUZZ_CHECK(c.hidden_size >= 1 && c.vocab_size >= 1 && c.num_attention_heads >= 1, "sizes");
  FUZZ_CHECK(std::isfinite(c.attention_scale) && c.attention_scale > 0, "attention scale");
  FUZZ_CHECK(!c.has_moe() || (c.top_k_experts >= 1 && c.top_k_experts <= c.num_experts &&
                              c.moe_intermediate_size >= 1),
             "experts");
  for (const tessera::model::LayerConfig& l : c.layers) {
    FUZZ_CHECK(l.head_dim >= 2 && l.head_dim % 2 == 0 && l.num_kv_heads >= 1, "head geometry");
    FUZZ_CHECK(c.num_attention_heads % l.num_kv_heads == 0, "heads not divisible");
    FUZZ_CHECK(l.intermediate_size >= 1, "intermediate_size");
    for (float f : tessera::model::RopeInverseFrequencies(l.rope, l.head_dim))
      FUZZ_CHECK(std::isfinite(f) && f >= 0.0f, "non-finite RoPE frequency");
  }
}

void Check(std::string_view bytes) {
  tessera::StatusOr<tessera::io::GgufFile> f = tessera::io::GgufFile::FromBytes(bytes, "fuzz.gguf");
  if (!f.ok()) return;
  tessera::StatusOr<tessera::model::GgufModelConfig> c = tessera::model::GgufToModelConfig(f.value());
  if (c.ok()) {
    CheckConfig(c.value().config);
  } else {
    FUZZ_CHECK(!c.status().message().empty(), "an error must say what is wrong");
  }
  tessera::StatusOr<tessera::tokenizer::TokenizerVocab> v = tessera::model::ReadGgufVocab(f.value());
  if (!v.ok()) return;
  const int64_t n = static_cast<int64_t>(v.value().tokens.size());
  for (int32_t id : {v.value().bos_id, v.value().eos_id, v.value().unk_id, v.value().pad_id})
    FUZZ_CHECK(id >= -1 && id < n, "a special id outside the token list");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("GgufToModelConfig", [&] { Check(bytes); });
  return 0;
}
