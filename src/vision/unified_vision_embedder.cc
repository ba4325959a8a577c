#include "vision/unified_vision_embedder.h"

#include <algorithm>

#include "tessera/gemm.h"
#include "vision/gemma4_ops.h"
#include "vision/vision_ops.h"
#include "vision/gemma4_weight_reader.h"
#include "vision/loaders.h"

namespace tessera::vision {
namespace {

constexpr float kLayerNormEps = 1e-5f;  // torch.nn.LayerNorm's default, which the embedder keeps

}  // namespace

StatusOr<std::unique_ptr<VisionEncoder>> LoadUnifiedVisionEmbedder(const model::LoadedModel& model,
                                                                   const VisionOptions& options) {
  StatusOr<UnifiedVisionConfig> config = ReadUnifiedVisionConfig(model.dir());
  if (!config.ok()) return config.status();
  StatusOr<std::unique_ptr<UnifiedVisionEmbedder>> e = UnifiedVisionEmbedder::Create(model, config.value(), options);
  if (!e.ok()) return e.status();
  return std::unique_ptr<VisionEncoder>(std::move(e).value());
}

StatusOr<std::unique_ptr<UnifiedVisionEmbedder>> UnifiedVisionEmbedder::Create(const model::LoadedModel& model,
                                                                               const UnifiedVisionConfig& config,
                                                                               const VisionOptions& options) {
  std::unique_ptr<UnifiedVisionEmbedder> e(new UnifiedVisionEmbedder());
  e->config_ = config;
  e->options_ = options;
  e->text_hidden_ = model.config().hidden_size;
  TESSERA_RETURN_IF_ERROR(e->LoadWeights(model.checkpoint()));
  return e;
}

Status UnifiedVisionEmbedder::LoadWeights(const io::SafetensorsCheckpoint& ckpt) {
  const int64_t P = config_.model_patch_size() * config_.model_patch_size() * 3, E = config_.mm_embed_dim;
  Gemma4WeightReader r(ckpt, options_.matmul_precision);
  // save_pretrained writes the original names (model.vision_embedder.*, model.embed_vision.
  // embedding_projection); a state dict of the module tree has model.embed_vision.* throughout.
  std::string p = "model.vision_embedder.";
  if (!r.Has(p + "patch_dense.weight")) {
    StatusOr<std::string> found = r.FirstPresent(
        {"model.embed_vision.patch_dense.weight", "vision_embedder.patch_dense.weight", "embed_vision.patch_dense.weight"},
        "Gemma 4 unified vision embedder (model.vision_embedder.patch_dense.weight)");
    if (!found.ok()) return found.status();
    p = found.value().substr(0, found.value().size() - std::string("patch_dense.weight").size());
  }
  TESSERA_RETURN_IF_ERROR(r.Matrix(p + "patch_dense.weight", E, P, &patch_dense_));
  for (auto [name, v, d] : {std::tuple{"patch_ln1.weight", &ln1_w_, P}, {"patch_ln1.bias", &ln1_b_, P},
                            {"patch_dense.bias", &dense_b_, E}, {"patch_ln2.weight", &ln2_w_, E},
                            {"patch_ln2.bias", &ln2_b_, E}, {"pos_norm.weight", &pos_norm_w_, E},
                            {"pos_norm.bias", &pos_norm_b_, E}})
    TESSERA_RETURN_IF_ERROR(r.Floats(p + name, {d}, v));
  StatusOr<io::SafetensorsTensor> table = r.Table(p + "pos_embedding", {config_.mm_posemb_size, 2, E});
  if (!table.ok()) return table.status();
  pos_table_ = table.value().data;
  pos_dtype_ = table.value().dtype;
  const std::string root = p.rfind("model.", 0) == 0 ? "model." : "";
  StatusOr<std::string> proj = r.FirstPresent({root + "embed_vision.embedding_projection.weight",
                                               root + "embed_vision.multimodal_embedder.embedding_projection.weight"},
                                              "vision embedding projection");
  if (!proj.ok()) return proj.status();
  TESSERA_RETURN_IF_ERROR(r.Matrix(proj.value(), text_hidden_, E, &embedding_projection_));
  owned_ = r.TakeOwned();
  return Status::Ok();
}

Status UnifiedVisionEmbedder::CheckInput(const image::PixelInput& in, size_t index) const {
  const int64_t P = config_.model_patch_size() * config_.model_patch_size() * 3, S = config_.mm_posemb_size;
  const std::string at = "Gemma 4 unified vision embedder: input " + std::to_string(index) + ": ";
  if (in.shape.size() != 2 || in.shape[1] != P || in.shape[0] < 1)
    return InvalidArgument(at + "pixels have shape " + ShapeString(in.shape) + ", expected [max_soft_tokens, " +
                           std::to_string(P) + "]");
  const int64_t R = in.shape[0];
  if (static_cast<int64_t>(in.pixels.size()) != R * P || static_cast<int64_t>(in.positions.size()) != 2 * R)
    return InvalidArgument(at + "holds " + std::to_string(in.pixels.size()) + " pixel and " +
                           std::to_string(in.positions.size()) + " position values, expected " +
                           std::to_string(R * P) + " and " + std::to_string(2 * R));
  if (in.valid_rows < 0 || in.valid_rows > R)
    return InvalidArgument(at + "valid_rows = " + std::to_string(in.valid_rows) + " is out of range [0, " +
                           std::to_string(R) + "]");
  for (int64_t r = 0; r < R; ++r) {
    const int32_t x = in.positions[2 * r], y = in.positions[2 * r + 1];
    const bool ok = r < in.valid_rows ? (x >= 0 && y >= 0 && x < S && y < S) : (x == -1 && y == -1);
    if (!ok)
      return InvalidArgument(at + "row " + std::to_string(r) + " has position (" + std::to_string(x) + ", " +
                             std::to_string(y) + "): rows before valid_rows = " + std::to_string(in.valid_rows) +
                             " need 0 <= x, y < " + std::to_string(S) + ", padding rows after it (-1, -1)");
  }
  if (in.soft_tokens != in.valid_rows)
    return InvalidArgument(at + "soft_tokens = " + std::to_string(in.soft_tokens) + " must equal valid_rows = " +
                           std::to_string(in.valid_rows) + " (one soft token per merged patch)");
  return Status::Ok();
}

void UnifiedVisionEmbedder::Embed(const image::PixelInput& in, float* x, float* tmp, uint32_t* x_pairs,
                                  ThreadPool& pool) const {
  const int64_t n = in.valid_rows, P = patch_dense_.in, E = config_.mm_embed_dim;
  LayerNorm(in.pixels.data(), ln1_w_.data(), ln1_b_.data(), kLayerNormEps, n, P, tmp, &pool);
  ops::Linear(patch_dense_, tmp, n, P, x, E, &pool, options_.matmul_precision, x_pairs);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < E; ++i) x[r * E + i] += dense_b_[i];
  LayerNorm(x, ln2_w_.data(), ln2_b_.data(), kLayerNormEps, n, E, x, &pool);
  // pos_embedding[x][0] + pos_embedding[y][1], decoded from the stored dtype.
  const size_t es = DTypeSize(pos_dtype_);
  const char* table = static_cast<const char*>(pos_table_);
  float* xe = tmp;
  float* ye = tmp + E;
  for (int64_t r = 0; r < n; ++r) {
    DecodeToF32(pos_dtype_, table + static_cast<size_t>((in.positions[2 * r] * 2) * E) * es, xe, E);
    DecodeToF32(pos_dtype_, table + static_cast<size_t>((in.positions[2 * r + 1] * 2 + 1) * E) * es, ye, E);
    float* xr = x + r * E;
    for (int64_t i = 0; i < E; ++i) xr[i] += xe[i] + ye[i];
  }
  LayerNorm(x, pos_norm_w_.data(), pos_norm_b_.data(), kLayerNormEps, n, E, x, &pool);
  RmsNormRows(x, E, nullptr, static_cast<float>(config_.rms_norm_eps), n, E, x, E, pool);
}

Status UnifiedVisionEmbedder::Encode(const std::vector<const image::PixelInput*>& inputs, float* out,
                                     ThreadPool& pool, EncodeScratch& scratch) const {
  int64_t longest = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr)
      return InvalidArgument("Gemma 4 unified vision embedder: input " + std::to_string(i) + " is null");
    TESSERA_RETURN_IF_ERROR(CheckInput(*inputs[i], i));
    longest = std::max(longest, inputs[i]->valid_rows);
  }
  if (longest == 0) return Status::Ok();
  const int64_t P = patch_dense_.in, E = config_.mm_embed_dim;
  // Scratch for the longest image, reused by each: LayerNorm output / position rows, hidden, GEMM pairs.
  const bool bf16 = options_.matmul_precision == ops::MatmulPrecision::kBf16;
  const int64_t tmp_floats = (std::max(longest * P, 2 * E) + 15) / 16 * 16, x_floats = (longest * E + 15) / 16 * 16;
  const int64_t pair_words = bf16 ? ops::GemmScratchWords(longest, std::max(P, E)) : 0;
  float* tmp = scratch.Floats(static_cast<size_t>(tmp_floats + x_floats + pair_words));
  float* x = tmp + tmp_floats;
  uint32_t* pairs = bf16 ? reinterpret_cast<uint32_t*>(x + x_floats) : nullptr;
  int64_t at = 0;
  for (const image::PixelInput* in : inputs) {
    if (in->valid_rows == 0) continue;
    Embed(*in, x, tmp, pairs, pool);
    ops::Linear(embedding_projection_, x, in->valid_rows, E, out + at * text_hidden_, text_hidden_, &pool,
                options_.matmul_precision, pairs);
    at += in->valid_rows;
  }
  return Status::Ok();
}

}  // namespace tessera::vision
