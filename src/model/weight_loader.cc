#include "model/weight_loader.h"

#include <cmath>
#include <string>
#include <unordered_set>
#include <vector>

#include "io/mapped_file.h"
#include "ops/gemm.h"

namespace tessera::model {
namespace {

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Binder {
 public:
  Binder(const io::SafetensorsCheckpoint& ckpt, const WeightLoadOptions& opt, GemmaWeights& w)
      : ckpt_(ckpt), opt_(opt), w_(w) {}

  StatusOr<io::SafetensorsTensor> Tensor(const std::string& name, const std::vector<int64_t>& shape) {
    StatusOr<io::SafetensorsTensor> t = ckpt_.GetLanguageModelTensor(name);
    if (!t.ok()) return t.status();
    if (t.value().shape != shape)
      return InvalidArgument("LoadGemmaWeights: tensor " + name + " in " + ckpt_.path() + " has shape " +
                             ShapeString(t.value().shape) + ", expected " + ShapeString(shape));
    return t;
  }

  Status Matrix(const std::string& name, int64_t out, int64_t in, ops::WeightView* view) {
    return Bind(Tensor(name, {out, in}), out, in, view);
  }

  // A matrix named by its full key (outside the language-model prefix, e.g. lm_head.weight).
  Status FullNameMatrix(const std::string& key, int64_t out, int64_t in, ops::WeightView* view) {
    StatusOr<io::SafetensorsTensor> t = ckpt_.Get(key);
    if (t.ok() && t.value().shape != std::vector<int64_t>{out, in})
      return InvalidArgument("LoadGemmaWeights: tensor " + key + " in " + ckpt_.path() + " has shape " +
                             ShapeString(t.value().shape) + ", expected " + ShapeString({out, in}));
    return Bind(std::move(t), out, in, view);
  }

  Status Bind(StatusOr<io::SafetensorsTensor> t, int64_t out, int64_t in, ops::WeightView* view) {
    if (!t.ok()) return t.status();
    const io::SafetensorsTensor& v = t.value();
    if (opt_.convert_to && *opt_.convert_to != v.dtype) {
      w_.owned.emplace_back(static_cast<size_t>(out * in) * DTypeSize(*opt_.convert_to));
      ConvertDType(v.dtype, v.data, *opt_.convert_to, w_.owned.back().data(), out * in);
      *view = {w_.owned.back().data(), *opt_.convert_to, out, in};
    } else {
      io::MappedFile::Prefault(v.data, v.nbytes);  // a hint: the weights stay usable either way
      *view = {v.data, v.dtype, out, in};
      mapped_.insert(v.data);
    }
    return Status::Ok();
  }

  // Adds the pair panels of a bound bf16 matrix (WeightLoadOptions::pack_bf16_panels) and releases
  // a mapped original's pages. No-op for other dtypes, CPUs without the dot product, or a view
  // packed already (a tied LM head shares the embedding's view).
  void PackPanels(ops::WeightView* view) {
    if (view->data == nullptr || view->pairs != nullptr || view->dtype != DType::kBF16) return;
    AlignedBuffer panels(static_cast<size_t>(ops::PairPanelWords(view->out, view->in)) * sizeof(uint32_t));
    if (!ops::PackPairPanels(*view, panels.as<uint32_t>())) return;
    view->pairs = panels.as<uint32_t>();
    w_.owned.push_back(std::move(panels));
    if (mapped_.count(view->data))
      io::MappedFile::Release(view->data, static_cast<size_t>(view->out * view->in) * sizeof(uint16_t));
  }

  // A vector of n values as f32 (owned copy).
  Status Vector(const std::string& name, int64_t n, const float** out) {
    StatusOr<io::SafetensorsTensor> t = Tensor(name, {n});
    if (!t.ok()) return t.status();
    w_.owned.emplace_back(n * sizeof(float));
    float* v = w_.owned.back().as<float>();
    DecodeToF32(t.value().dtype, t.value().data, v, n);
    // Converting the checkpoint means converting every weight: round vectors through the target
    // dtype too (kept as f32 values for the f32 compute).
    if (opt_.convert_to && *opt_.convert_to != DType::kF32)
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        EncodeFromF32(*opt_.convert_to, v + i, &h, 1);
        DecodeToF32(*opt_.convert_to, &h, v + i, 1);
      }
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(w_.owned.back().as<float>()[i]))
        return InvalidArgument("LoadGemmaWeights: tensor " + name + " has a non-finite value at " + std::to_string(i));
    *out = w_.owned.back().as<float>();
    return Status::Ok();
  }

 private:
  const io::SafetensorsCheckpoint& ckpt_;
  const WeightLoadOptions& opt_;
  GemmaWeights& w_;
  std::unordered_set<const void*> mapped_;  // matrices viewed in place in the checkpoint's mapping
};

// sqrt(n) rounded to `dtype`, as transformers casts the embedding scale to the weight dtype.
float ScaleInDType(int64_t n, DType dtype) {
  const float s = std::sqrt(static_cast<float>(n));
  if (dtype == DType::kBF16) return Bf16ToF32(F32ToBf16(s));
  if (dtype == DType::kF16) return F16ToF32(F32ToF16(s));
  return s;
}

}  // namespace

StatusOr<GemmaWeights> LoadGemmaWeights(const io::SafetensorsCheckpoint& ckpt, const GemmaArch& a,
                                        const WeightLoadOptions& opt) {
  GemmaWeights w;
  Binder bind(ckpt, opt, w);
  const int64_t H = a.hidden, L = a.num_layers();
  TESSERA_RETURN_IF_ERROR(bind.Matrix("embed_tokens.weight", a.vocab, H, &w.embed));
  w.embed_scale = ScaleInDType(H, w.embed.dtype);
  if (std::optional<std::string> head = ckpt.LmHeadName()) {
    TESSERA_RETURN_IF_ERROR(bind.FullNameMatrix(*head, a.vocab, H, &w.lm_head));
  } else {
    w.lm_head = w.embed;
  }
  TESSERA_RETURN_IF_ERROR(bind.Vector("norm.weight", H, &w.final_norm));
  if (a.ple_dim > 0) {
    const int64_t LP = L * a.ple_dim;
    TESSERA_RETURN_IF_ERROR(bind.Matrix("embed_tokens_per_layer.weight", a.ple_vocab, LP, &w.ple_embed));
    w.ple_embed_scale = ScaleInDType(a.ple_dim, w.ple_embed.dtype);
    TESSERA_RETURN_IF_ERROR(bind.Matrix("per_layer_model_projection.weight", LP, H, &w.ple_model_proj));
    TESSERA_RETURN_IF_ERROR(bind.Vector("per_layer_projection_norm.weight", a.ple_dim, &w.ple_proj_norm));
  }
  w.layers.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const LayerArch& la = a.layers[l];
    LayerWeights& lw = w.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    const int64_t D = la.head_dim;
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "self_attn.q_proj.weight", a.q_heads * D, H, &lw.q_proj));
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "self_attn.o_proj.weight", H, a.q_heads * D, &lw.o_proj));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "self_attn.q_norm.weight", D, &lw.q_norm));
    if (!la.shared_kv) {
      TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "self_attn.k_proj.weight", la.kv_heads * D, H, &lw.k_proj));
      if (la.has_v_proj)
        TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "self_attn.v_proj.weight", la.kv_heads * D, H, &lw.v_proj));
      TESSERA_RETURN_IF_ERROR(bind.Vector(p + "self_attn.k_norm.weight", D, &lw.k_norm));
    }
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "mlp.gate_proj.weight", la.intermediate, H, &lw.gate));
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "mlp.up_proj.weight", la.intermediate, H, &lw.up));
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "mlp.down_proj.weight", H, la.intermediate, &lw.down));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "input_layernorm.weight", H, &lw.input_norm));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "post_attention_layernorm.weight", H, &lw.post_attn_norm));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "pre_feedforward_layernorm.weight", H, &lw.pre_ffw_norm));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "post_feedforward_layernorm.weight", H, &lw.post_ffw_norm));
    if (a.family == Family::kGemma4) {
      const float* scalar = nullptr;
      TESSERA_RETURN_IF_ERROR(bind.Vector(p + "layer_scalar", 1, &scalar));
      lw.layer_scalar = *scalar;
    }
    if (a.ple_dim > 0) {
      TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "per_layer_input_gate.weight", a.ple_dim, H, &lw.ple_gate));
      TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "per_layer_projection.weight", H, a.ple_dim, &lw.ple_proj));
      TESSERA_RETURN_IF_ERROR(bind.Vector(p + "post_per_layer_input_norm.weight", H, &lw.ple_post_norm));
    }
  }
  if (opt.pack_bf16_panels) {  // every matrix a Linear reads (the embeddings are looked up by row)
    bind.PackPanels(&w.lm_head);
    bind.PackPanels(&w.ple_model_proj);
    for (LayerWeights& lw : w.layers)
      for (ops::WeightView* v : {&lw.q_proj, &lw.k_proj, &lw.v_proj, &lw.o_proj, &lw.gate, &lw.up, &lw.down,
                                 &lw.ple_gate, &lw.ple_proj})
        bind.PackPanels(v);
  }
  return w;
}

}  // namespace tessera::model
