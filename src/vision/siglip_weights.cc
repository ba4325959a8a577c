#include "vision/siglip_weights.h"

#include <cstring>

#include "vision/weight_panels.h"

namespace tessera::vision {
namespace {

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Binder {
 public:
  Binder(const io::SafetensorsCheckpoint& ckpt, ops::MatmulPrecision precision, SiglipWeights& w)
      : ckpt_(ckpt), precision_(precision), w_(w) {}

  // The first of `prefixes` under which `anchor` exists.
  StatusOr<std::string> Prefix(const std::vector<std::string>& prefixes, const std::string& anchor,
                               const std::string& what) const {
    for (const std::string& p : prefixes)
      if (ckpt_.Contains(p + anchor)) return p;
    return InvalidArgument(ckpt_.path() + " has no " + what + " (looked for " + prefixes.front() + anchor + " and " +
                           std::to_string(prefixes.size() - 1) + " other prefixes): it has no Gemma 3 vision weights");
  }

  StatusOr<io::SafetensorsTensor> Tensor(const std::string& name, const std::vector<int64_t>& shape) const {
    StatusOr<io::SafetensorsTensor> t = ckpt_.Get(name);
    if (!t.ok()) return t.status();
    if (t.value().shape != shape)
      return InvalidArgument("vision weights: tensor " + name + " in " + ckpt_.path() + " has shape " +
                             ShapeString(t.value().shape) + ", expected " + ShapeString(shape));
    // A NaN or inf weight would turn every soft token of every image into NaN: refused by name.
    const int64_t bad = FirstNonFinite(t.value().dtype, t.value().data, t.value().numel());
    if (bad >= 0)
      return InvalidArgument("vision weights: tensor " + name + " in " + ckpt_.path() +
                             " has a non-finite value at flat index " + std::to_string(bad));
    return t;
  }

  // A matrix [out, in] (or any tensor of that many elements and `shape`) as a view.
  Status Matrix(const std::string& name, const std::vector<int64_t>& shape, int64_t out, int64_t in,
                ops::WeightView* view) {
    StatusOr<io::SafetensorsTensor> t = Tensor(name, shape);
    if (!t.ok()) return t.status();
    *view = {t.value().data, t.value().dtype, out, in};
    ToBf16IfNeeded(view);
    PackPanelsForEncode(precision_, view, &w_.owned, t.value().data, t.value().nbytes);
    return Status::Ok();
  }

  Status Vector(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) const {
    StatusOr<io::SafetensorsTensor> t = Tensor(name, shape);
    if (!t.ok()) return t.status();
    out->resize(static_cast<size_t>(t.value().numel()));
    DecodeToF32(t.value().dtype, t.value().data, out->data(), out->size());
    return Status::Ok();
  }

  // mm_input_projection_weight is stored [in, out] (a torch.matmul operand): transposed once here
  // into Linear's [out, in], keeping its dtype.
  Status Transposed(const std::string& name, int64_t in, int64_t out, ops::WeightView* view) {
    StatusOr<io::SafetensorsTensor> t = Tensor(name, {in, out});
    if (!t.ok()) return t.status();
    const size_t es = DTypeSize(t.value().dtype);
    w_.owned.emplace_back(static_cast<size_t>(in * out) * es);
    char* dst = static_cast<char*>(w_.owned.back().data());
    const char* src = static_cast<const char*>(t.value().data);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) std::memcpy(dst + (o * in + i) * es, src + (i * out + o) * es, es);
    *view = {dst, t.value().dtype, out, in};
    ToBf16IfNeeded(view);
    PackPanelsForEncode(precision_, view, &w_.owned);
    return Status::Ok();
  }

 private:
  // Precision bf16 reads bf16 matrices (Linear's requirement); one stored otherwise gets a bf16
  // copy, the weights a bf16 model of the same checkpoint has (rounded to nearest even).
  void ToBf16IfNeeded(ops::WeightView* view) {
    if (precision_ != ops::MatmulPrecision::kBf16 || view->dtype == DType::kBF16) return;
    const size_t n = static_cast<size_t>(view->out * view->in);
    w_.owned.emplace_back(n * DTypeSize(DType::kBF16));
    ConvertDType(view->dtype, view->data, DType::kBF16, w_.owned.back().data(), n);
    view->data = w_.owned.back().data();
    view->dtype = DType::kBF16;
  }

  const io::SafetensorsCheckpoint& ckpt_;
  ops::MatmulPrecision precision_;
  SiglipWeights& w_;
};

Status LoadLayer(Binder& b, const std::string& p, const SiglipConfig& c, SiglipLayerWeights& L) {
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  TESSERA_RETURN_IF_ERROR(b.Vector(p + "layer_norm1.weight", {D}, &L.ln1_w));
  TESSERA_RETURN_IF_ERROR(b.Vector(p + "layer_norm1.bias", {D}, &L.ln1_b));
  TESSERA_RETURN_IF_ERROR(b.Vector(p + "layer_norm2.weight", {D}, &L.ln2_w));
  TESSERA_RETURN_IF_ERROR(b.Vector(p + "layer_norm2.bias", {D}, &L.ln2_b));
  const std::pair<const char*, std::pair<ops::WeightView*, std::vector<float>*>> attn[] = {
      {"q_proj", {&L.q, &L.q_b}}, {"k_proj", {&L.k, &L.k_b}}, {"v_proj", {&L.v, &L.v_b}}, {"out_proj", {&L.o, &L.o_b}}};
  for (const auto& [name, dst] : attn) {
    const std::string n = p + "self_attn." + name;
    TESSERA_RETURN_IF_ERROR(b.Matrix(n + ".weight", {D, D}, D, D, dst.first));
    TESSERA_RETURN_IF_ERROR(b.Vector(n + ".bias", {D}, dst.second));
  }
  TESSERA_RETURN_IF_ERROR(b.Matrix(p + "mlp.fc1.weight", {I, D}, I, D, &L.fc1));
  TESSERA_RETURN_IF_ERROR(b.Vector(p + "mlp.fc1.bias", {I}, &L.fc1_b));
  TESSERA_RETURN_IF_ERROR(b.Matrix(p + "mlp.fc2.weight", {D, I}, D, I, &L.fc2));
  TESSERA_RETURN_IF_ERROR(b.Vector(p + "mlp.fc2.bias", {D}, &L.fc2_b));
  return Status::Ok();
}

}  // namespace

StatusOr<SiglipWeights> LoadSiglipWeights(const io::SafetensorsCheckpoint& ckpt, const SiglipConfig& c,
                                          int64_t text_hidden, ops::MatmulPrecision precision) {
  SiglipWeights w;
  Binder b(ckpt, precision, w);
  const std::string anchor = "embeddings.patch_embedding.weight";
  StatusOr<std::string> tower = b.Prefix({"model.vision_tower.vision_model.", "model.vision_tower.",
                                          "vision_tower.vision_model.", "vision_tower."},
                                         anchor, "vision tower");
  if (!tower.ok()) return tower.status();
  StatusOr<std::string> proj =
      b.Prefix({"model.multi_modal_projector.", "multi_modal_projector."}, "mm_input_projection_weight",
               "multimodal projector");
  if (!proj.ok()) return proj.status();
  const std::string& t = tower.value();
  const int64_t D = c.hidden_size, P = c.patch_size;
  TESSERA_RETURN_IF_ERROR(b.Matrix(t + anchor, {D, c.num_channels, P, P}, D, c.patch_features(), &w.patch));
  TESSERA_RETURN_IF_ERROR(b.Vector(t + "embeddings.patch_embedding.bias", {D}, &w.patch_b));
  TESSERA_RETURN_IF_ERROR(b.Vector(t + "embeddings.position_embedding.weight", {c.num_patches(), D}, &w.position));
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    TESSERA_RETURN_IF_ERROR(LoadLayer(b, t + "encoder.layers." + std::to_string(l) + ".", c, w.layers[l]));
  TESSERA_RETURN_IF_ERROR(b.Vector(t + "post_layernorm.weight", {D}, &w.post_w));
  TESSERA_RETURN_IF_ERROR(b.Vector(t + "post_layernorm.bias", {D}, &w.post_b));
  TESSERA_RETURN_IF_ERROR(b.Vector(proj.value() + "mm_soft_emb_norm.weight", {D}, &w.mm_norm_w));
  TESSERA_RETURN_IF_ERROR(b.Transposed(proj.value() + "mm_input_projection_weight", D, text_hidden, &w.mm_proj));
  return w;
}

}  // namespace tessera::vision
