#include "model/gguf_weights.h"

#include <cstdlib>
#include <set>
#include <utility>

namespace tessera::model {
namespace {

// Hugging Face decoder-layer suffix -> llama.cpp's (gguf-py constants.py, MODEL_TENSOR names).
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"layer_scalar", "layer_output_scale.weight"},
    {"per_layer_input_gate.weight", "inp_gate.weight"},
    {"per_layer_projection.weight", "proj.weight"},
    {"post_per_layer_input_norm.weight", "post_norm.weight"},
};

// Gemma 4's MoE block (docs/moe.md). The converter keeps the stacked experts as they are stored
// ([E, 2I, H] with gate rows first, [E, H, I]) and puts the per-expert scale on ffn_down_exps.
constexpr std::pair<const char*, const char*> kExpertNames[] = {
    {"router.proj.weight", "ffn_gate_inp.weight"},
    {"router.scale", "ffn_gate_inp.scale"},
    {"router.per_expert_scale", "ffn_down_exps.scale"},
    {"experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"experts.down_proj", "ffn_down_exps.weight"},
    {"pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"},
    {"post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"},
    {"post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"},
};

constexpr std::pair<const char*, const char*> kGlobalNames[] = {
    {"embed_tokens.weight", "token_embd.weight"},
    {"lm_head.weight", "output.weight"},
    {"norm.weight", "output_norm.weight"},
    {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
    {"per_layer_model_projection.weight", "per_layer_model_proj.weight"},
    {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
};

// Global tensors a Gemma GGUF may hold besides the ones bound (rope_freqs went into the config).
constexpr const char* kKnownExtra[] = {"rope_freqs.weight"};

class GgufSource : public WeightSource {
 public:
  explicit GgufSource(const io::GgufFile& f) : f_(f) {}
  const std::string& path() const override { return f_.path(); }
  bool HasLmHead() const override { return f_.Find("output.weight") != nullptr; }
  StatusOr<StoredTensor> Get(const std::string& name) const override {
    const std::string g = GgufTensorName(name, /*experts=*/true);
    const io::GgufTensor* t = g.empty() ? nullptr : f_.Find(g);
    if (t == nullptr)
      return InvalidArgument("LoadGemmaWeights: tensor " + (g.empty() ? name : g) + " is missing from GGUF '" +
                             f_.path() + "'");
    StoredTensor s;
    s.name = t->name;
    s.data = t->data;
    s.dtype = t->dtype;
    s.quant = t->quant;
    s.shape = t->shape;
    s.nbytes = t->nbytes;
    return s;
  }

 private:
  const io::GgufFile& f_;
};

// The block index of "blk.N.rest" (and rest), or -1.
int64_t BlockIndex(const std::string& name, std::string* rest) {
  if (name.compare(0, 4, "blk.") != 0) return -1;
  const char* digits = name.c_str() + 4;
  char* end = nullptr;
  const long long i = std::strtoll(digits, &end, 10);
  if (end == digits || *end != '.' || i < 0) return -1;
  *rest = end + 1;
  return i;
}

bool IsExpertKind(const std::string& rest) {
  for (const auto& [from, to] : kExpertNames)
    if (rest == to) return true;
  return rest.find("_exps.") != std::string::npos || rest.find("_shexp.") != std::string::npos;
}

}  // namespace

std::string GgufTensorName(const std::string& hf, bool experts) {
  for (const auto& [from, to] : kGlobalNames)
    if (hf == from) return to;
  if (experts && hf.compare(0, 7, "layers.") == 0 && hf.find('.', 7) != std::string::npos) {
    const size_t dot = hf.find('.', 7);
    for (const auto& [from, to] : kExpertNames)
      if (hf.compare(dot + 1, std::string::npos, from) == 0) return "blk." + hf.substr(7, dot - 7) + "." + to;
  }
  if (hf.compare(0, 7, "layers.") != 0) return "";
  const size_t dot = hf.find('.', 7);
  if (dot == std::string::npos) return "";
  const std::string suffix = hf.substr(dot + 1);
  for (const auto& [from, to] : kLayerNames)
    if (suffix == from) return "blk." + hf.substr(7, dot - 7) + "." + to;
  return "";
}

Status CheckGgufTensors(const io::GgufFile& file, const GemmaArch& arch) {
  std::set<std::string> layer_kinds, globals(std::begin(kKnownExtra), std::end(kKnownExtra));
  for (const auto& [from, to] : kLayerNames) layer_kinds.insert(to);
  // Expert tensors in a file without expert_count would be ignored: refused below.
  if (arch.experts > 0)
    for (const auto& [from, to] : kExpertNames) layer_kinds.insert(to);
  for (const auto& [from, to] : kGlobalNames) globals.insert(to);
  for (const io::GgufTensor& t : file.tensors()) {
    std::string rest;
    const int64_t layer = BlockIndex(t.name, &rest);
    if (layer >= arch.num_layers())
      return InvalidArgument("GGUF '" + file.path() + "': block_count is " + std::to_string(arch.num_layers()) +
                             " but the file holds tensor " + t.name.substr(0, 200));
    if (layer >= 0 && arch.experts == 0 && IsExpertKind(rest))
      return InvalidArgument("GGUF '" + file.path() + "': tensor " + t.name.substr(0, 200) +
                             " belongs to a Mixture-of-Experts block but expert_count is absent or 0");
    if (layer >= 0 && !layer_kinds.count(rest))
      return Unimplemented("GGUF '" + file.path() + "': tensor " + t.name.substr(0, 200) +
                           " is of a kind this engine does not run");
    if (layer < 0 && !globals.count(t.name))
      return Unimplemented("GGUF '" + file.path() + "': tensor " + t.name.substr(0, 200) +
                           " is of a kind this engine does not run");
  }
  return Status::Ok();
}

StatusOr<GemmaWeights> LoadGgufWeights(const io::GgufFile& file, const GemmaArch& arch,
                                       const WeightLoadOptions& options) {
  return BindGemmaWeights(GgufSource(file), arch, options);
}

}  // namespace tessera::model
