#include "vision/gemma4_vision_encoder.h"

#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"
#include "tessera/gemm.h"
#include "vision/gemma4_ops.h"
#include "vision/gemma4_weight_reader.h"
#include "vision/loaders.h"
#include "vision/vision_ops.h"

namespace tessera::vision {
namespace {

std::string Layer(const std::string& tower, size_t i) { return tower + "encoder.layers." + std::to_string(i) + "."; }

// The soft-token slot of a patch at (x, y) when the image's patches span max_x columns
// (Gemma4VisionPooler._avg_pool_by_positions).
int64_t Slot(int64_t x, int64_t y, int64_t k, int64_t max_x) { return x / k + (max_x / k) * (y / k); }

// max(x) + 1 over the rows, padding counting as x = 0 (it is clamped before the max).
int64_t MaxX(const image::PixelInput& in) {
  int64_t m = 0;
  for (int64_t r = 0; r < in.valid_rows; ++r) m = std::max<int64_t>(m, in.positions[2 * r]);
  return m + 1;
}

}  // namespace

StatusOr<std::unique_ptr<VisionEncoder>> LoadGemma4VisionEncoder(const model::LoadedModel& model,
                                                                 const VisionOptions& options) {
  StatusOr<Gemma4VisionConfig> config = ReadGemma4VisionConfig(model.dir());
  if (!config.ok()) return config.status();
  StatusOr<std::unique_ptr<Gemma4VisionEncoder>> e = Gemma4VisionEncoder::Create(model, config.value(), options);
  if (!e.ok()) return e.status();
  return std::unique_ptr<VisionEncoder>(std::move(e).value());
}

StatusOr<std::unique_ptr<Gemma4VisionEncoder>> Gemma4VisionEncoder::Create(const model::LoadedModel& model,
                                                                           const Gemma4VisionConfig& config,
                                                                           const VisionOptions& options) {
  std::unique_ptr<Gemma4VisionEncoder> e(new Gemma4VisionEncoder());
  e->config_ = config;
  e->options_ = options;
  e->text_hidden_ = model.config().hidden_size;
  e->inv_freq_ = AxialInvFreq(config.head_dim, config.rope_theta);
  const io::SafetensorsCheckpoint& ckpt = model.checkpoint();
  // Saved by Gemma4ForConditionalGeneration ("model." prefix) or by a bare Gemma4Model.
  std::string tower = "model.vision_tower.", embed = "model.embed_vision.";
  if (!ckpt.Contains(tower + "patch_embedder.input_proj.weight") &&
      ckpt.Contains("vision_tower.patch_embedder.input_proj.weight")) {
    tower = "vision_tower.";
    embed = "embed_vision.";
  }
  TESSERA_RETURN_IF_ERROR(e->LoadWeights(ckpt, tower, embed));
  return e;
}

Status Gemma4VisionEncoder::LoadLayer(Gemma4WeightReader& r, const std::string& p, Gemma4VisionLayerWeights* l) {
  const Gemma4VisionConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t qw = c.num_attention_heads * D, kvw = c.num_key_value_heads * D;
  struct Proj {
    const char* name;
    ClippedLinear* l;
    int64_t out, in;
  };
  for (const Proj& pr : {Proj{"self_attn.q_proj", &l->q_proj, qw, H}, Proj{"self_attn.k_proj", &l->k_proj, kvw, H},
                         Proj{"self_attn.v_proj", &l->v_proj, kvw, H}, Proj{"self_attn.o_proj", &l->o_proj, H, qw},
                         Proj{"mlp.gate_proj", &l->gate_proj, I, H}, Proj{"mlp.up_proj", &l->up_proj, I, H},
                         Proj{"mlp.down_proj", &l->down_proj, H, I}}) {
    const std::string base = p + pr.name + ".";
    TESSERA_RETURN_IF_ERROR(r.Matrix(base + "linear.weight", pr.out, pr.in, &pr.l->w));
    pr.l->clip = c.use_clipped_linears;
    if (!c.use_clipped_linears) continue;
    // Bounds the checkpoint lacks keep transformers' initial +-inf (no clamp on that side).
    for (auto [suffix, v] : {std::pair{"input_min", &pr.l->in_min}, {"input_max", &pr.l->in_max},
                             {"output_min", &pr.l->out_min}, {"output_max", &pr.l->out_max}})
      if (r.Has(base + suffix)) TESSERA_RETURN_IF_ERROR(r.Scalar(base + suffix, v));
  }
  for (auto [name, v, d] : {std::tuple{"input_layernorm.weight", &l->input_ln, H},
                            {"post_attention_layernorm.weight", &l->post_attention_ln, H},
                            {"pre_feedforward_layernorm.weight", &l->pre_feedforward_ln, H},
                            {"post_feedforward_layernorm.weight", &l->post_feedforward_ln, H},
                            {"self_attn.q_norm.weight", &l->q_norm, D}, {"self_attn.k_norm.weight", &l->k_norm, D}})
    TESSERA_RETURN_IF_ERROR(r.Floats(p + name, {d}, v));
  return Status::Ok();
}

Status Gemma4VisionEncoder::LoadWeights(const io::SafetensorsCheckpoint& ckpt, const std::string& tower,
                                        const std::string& embed) {
  const Gemma4VisionConfig& c = config_;
  const int64_t H = c.hidden_size, P = c.patch_size * c.patch_size * 3;
  Gemma4WeightReader r(ckpt, options_.matmul_precision);
  if (!r.Has(tower + "patch_embedder.input_proj.weight"))
    return InvalidArgument(ckpt.path() + ": no Gemma 4 vision tower (" + tower +
                           "patch_embedder.input_proj.weight is missing)");
  TESSERA_RETURN_IF_ERROR(r.Matrix(tower + "patch_embedder.input_proj.weight", H, P, &input_proj_));
  StatusOr<io::SafetensorsTensor> table =
      r.Table(tower + "patch_embedder.position_embedding_table", {2, c.position_embedding_size, H});
  if (!table.ok()) return table.status();
  position_table_ = table.value().data;
  position_dtype_ = table.value().dtype;
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (size_t i = 0; i < layers_.size(); ++i) TESSERA_RETURN_IF_ERROR(LoadLayer(r, Layer(tower, i), &layers_[i]));
  if (c.standardize) {
    // Absent buffers keep transformers' initial values (bias 0, scale 1).
    std_bias_.assign(static_cast<size_t>(H), 0.0f);
    std_scale_.assign(static_cast<size_t>(H), 1.0f);
    if (r.Has(tower + "std_bias")) TESSERA_RETURN_IF_ERROR(r.Floats(tower + "std_bias", {H}, &std_bias_));
    if (r.Has(tower + "std_scale")) TESSERA_RETURN_IF_ERROR(r.Floats(tower + "std_scale", {H}, &std_scale_));
  }
  TESSERA_RETURN_IF_ERROR(r.Matrix(embed + "embedding_projection.weight", text_hidden_, H, &embedding_projection_));
  owned_ = r.TakeOwned();
  return Status::Ok();
}

Status Gemma4VisionEncoder::CheckInput(const image::PixelInput& in, size_t index) const {
  const Gemma4VisionConfig& c = config_;
  const int64_t k = c.pooling_kernel_size, P = c.patch_size * c.patch_size * 3;
  const std::string at = "Gemma 4 vision encoder: input " + std::to_string(index) + ": ";
  if (in.shape.size() != 2 || in.shape[1] != P || in.shape[0] < k * k || in.shape[0] % (k * k) != 0)
    return InvalidArgument(at + "pixels have shape " + ShapeString(in.shape) + ", expected [max_soft_tokens * " +
                           std::to_string(k * k) + ", " + std::to_string(P) + "]");
  const int64_t R = in.shape[0], length = R / (k * k);
  if (static_cast<int64_t>(in.pixels.size()) != R * P)
    return InvalidArgument(at + "holds " + std::to_string(in.pixels.size()) + " pixel values, shape says " +
                           std::to_string(R * P));
  if (static_cast<int64_t>(in.positions.size()) != 2 * R)
    return InvalidArgument(at + "holds " + std::to_string(in.positions.size()) + " position values, expected " +
                           std::to_string(2 * R));
  if (in.valid_rows < 1 || in.valid_rows > R)
    return InvalidArgument(at + "valid_rows = " + std::to_string(in.valid_rows) + " is out of range [1, " +
                           std::to_string(R) + "]");
  for (int64_t r = 0; r < R; ++r) {
    const int32_t x = in.positions[2 * r], y = in.positions[2 * r + 1];
    const bool ok = r < in.valid_rows ? (x >= 0 && y >= 0 && x < c.position_embedding_size &&
                                         y < c.position_embedding_size)
                                      : (x == -1 && y == -1);
    if (!ok)
      return InvalidArgument(at + "row " + std::to_string(r) + " has position (" + std::to_string(x) + ", " +
                             std::to_string(y) + "): rows before valid_rows = " + std::to_string(in.valid_rows) +
                             " need 0 <= x, y < " + std::to_string(c.position_embedding_size) +
                             ", padding rows after it (-1, -1)");
  }
  // k = 1: no pooling, the valid rows are the soft tokens (Gemma4VisionPooler skips the average).
  if (k == 1) {
    if (in.soft_tokens != in.valid_rows)
      return InvalidArgument(at + "soft_tokens = " + std::to_string(in.soft_tokens) + " must equal valid_rows = " +
                             std::to_string(in.valid_rows) + " (pooling_kernel_size 1)");
    return Status::Ok();
  }
  // The soft tokens the pooler keeps: the slots any row falls in (padding counts as (0, 0)).
  std::vector<uint8_t> hit(static_cast<size_t>(length), 0);
  if (in.valid_rows < R) hit[0] = 1;
  const int64_t max_x = MaxX(in);
  for (int64_t r = 0; r < in.valid_rows; ++r) {
    const int64_t slot = Slot(in.positions[2 * r], in.positions[2 * r + 1], k, max_x);
    if (slot >= length)
      return InvalidArgument(at + "row " + std::to_string(r) + " pools into soft token " + std::to_string(slot) +
                             ", past the " + std::to_string(length) + " the input holds");
    hit[slot] = 1;
  }
  const int64_t kept = std::count(hit.begin(), hit.end(), uint8_t{1});
  if (kept != in.soft_tokens)
    return InvalidArgument(at + "soft_tokens = " + std::to_string(in.soft_tokens) + " but its positions pool into " +
                           std::to_string(kept) + " soft tokens");
  return Status::Ok();
}

void Gemma4VisionEncoder::EmbedPatches(const image::PixelInput& in, float* h, float* tmp, uint32_t* x_pairs,
                                       ThreadPool& pool) const {
  const int64_t H = config_.hidden_size, P = input_proj_.in, n = in.valid_rows, S = config_.position_embedding_size;
  for (int64_t i = 0; i < n * P; ++i) tmp[i] = 2.0f * (in.pixels[i] - 0.5f);
  ops::Linear(input_proj_, tmp, n, P, h, H, &pool, options_.matmul_precision, x_pairs);
  // The x and y rows of the position table, decoded from the stored dtype into tmp.
  const size_t es = DTypeSize(position_dtype_);
  const char* table = static_cast<const char*>(position_table_);
  float* xe = tmp;
  float* ye = tmp + H;
  for (int64_t r = 0; r < n; ++r) {
    DecodeToF32(position_dtype_, table + static_cast<size_t>(in.positions[2 * r] * H) * es, xe, H);
    DecodeToF32(position_dtype_, table + static_cast<size_t>((S + in.positions[2 * r + 1]) * H) * es, ye, H);
    float* hr = h + r * H;
    for (int64_t i = 0; i < H; ++i) hr[i] += xe[i] + ye[i];
  }
}

int64_t Gemma4VisionEncoder::Pool(const image::PixelInput& in, const float* h, float* pooled) const {
  const int64_t H = config_.hidden_size, k = config_.pooling_kernel_size, length = in.shape[0] / (k * k);
  const float root = static_cast<float>(std::sqrt(static_cast<double>(H)));
  if (k == 1) {
    for (int64_t i = 0; i < in.valid_rows * H; ++i) pooled[i] = h[i] * root;
    Standardize(pooled, in.valid_rows);
    return in.valid_rows;
  }
  const int64_t max_x = MaxX(in);
  // Output index of each kept slot, in slot order (CheckInput verified the count).
  std::vector<int64_t> index(static_cast<size_t>(length), -1);
  if (in.valid_rows < in.shape[0]) index[0] = 0;
  for (int64_t r = 0; r < in.valid_rows; ++r) index[Slot(in.positions[2 * r], in.positions[2 * r + 1], k, max_x)] = 0;
  int64_t kept = 0;
  for (int64_t& i : index)
    if (i >= 0) i = kept++;
  std::fill(pooled, pooled + kept * H, 0.0f);
  const float w = 1.0f / static_cast<float>(k * k);
  for (int64_t r = 0; r < in.valid_rows; ++r) {
    float* o = pooled + index[Slot(in.positions[2 * r], in.positions[2 * r + 1], k, max_x)] * H;
    const float* hr = h + r * H;
    for (int64_t i = 0; i < H; ++i) o[i] += hr[i] * w;
  }
  for (int64_t i = 0; i < kept * H; ++i) pooled[i] *= root;
  Standardize(pooled, kept);
  return kept;
}

void Gemma4VisionEncoder::Standardize(float* x, int64_t rows) const {
  if (!config_.standardize) return;
  const int64_t H = config_.hidden_size;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < H; ++i) x[t * H + i] = (x[t * H + i] - std_bias_[i]) * std_scale_[i];
}

Status Gemma4VisionEncoder::Encode(const std::vector<const image::PixelInput*>& inputs, float* out,
                                   ThreadPool& pool, EncodeScratch& scratch) const {
  const Gemma4VisionConfig& c = config_;
  std::vector<ImageRows> images;
  int64_t tokens = 0, longest = 0, soft = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) return InvalidArgument("Gemma 4 vision encoder: input " + std::to_string(i) + " is null");
    TESSERA_RETURN_IF_ERROR(CheckInput(*inputs[i], i));
    images.push_back({tokens, inputs[i]->valid_rows});
    tokens += inputs[i]->valid_rows;
    longest = std::max(longest, inputs[i]->valid_rows);
    soft += inputs[i]->soft_tokens;
  }
  if (tokens == 0) return Status::Ok();
  const int64_t H = c.hidden_size;
  // Every activation of this call in one block of the scratch, sized here from the inputs.
  const Gemma4LayerSizes z = Gemma4LayerSizes::For(c, tokens);
  const bool bf16 = options_.matmul_precision == ops::MatmulPrecision::kBf16;
  const int64_t widest_in = std::max({input_proj_.in, c.intermediate_size, c.num_attention_heads * c.head_dim, H});
  const int64_t pair_floats = bf16 ? ops::GemmScratchWords(std::max(tokens, soft), widest_in) + 16 : 0;
  const int64_t kv16_floats = bf16 ? z.kv : 0;  // K and V as bf16: two halves of z.kv floats
  const int64_t floats =
      tokens * H + z.x + 2 * z.q + 2 * z.kv + 2 * z.gate + z.clip + soft * H + pair_floats + kv16_floats;
  float* next = scratch.Floats(static_cast<size_t>(floats) + 16 * 13);
  auto take = [&](int64_t n) {
    float* p = next;
    next += (n + 15) / 16 * 16;  // keep every buffer 64-byte aligned
    return p;
  };
  float* h = take(tokens * H);
  Gemma4LayerScratch s;
  s.x = take(z.x), s.q = take(z.q), s.attn = take(z.q), s.k = take(z.kv), s.v = take(z.kv);
  s.gate = take(z.gate), s.up = take(z.gate), s.clip = z.clip ? take(z.clip) : nullptr;
  float* pooled = take(soft * H);
  s.x_pairs = bf16 ? reinterpret_cast<uint32_t*>(take(pair_floats)) : nullptr;
  s.kv_bf16 = bf16 ? reinterpret_cast<uint16_t*>(take(kv16_floats)) : nullptr;
  int32_t* xpos = scratch.Ints(static_cast<size_t>(2 * tokens + longest));
  int32_t* ypos = xpos + tokens;
  int32_t* iota = ypos + tokens;
  for (int64_t i = 0; i < longest; ++i) iota[i] = static_cast<int32_t>(i);
  for (size_t i = 0; i < inputs.size(); ++i)
    for (int64_t r = 0; r < images[i].rows; ++r) {
      xpos[images[i].row0 + r] = inputs[i]->positions[2 * r];
      ypos[images[i].row0 + r] = inputs[i]->positions[2 * r + 1];
    }
  s.xpos = xpos, s.ypos = ypos, s.iota = iota;
  const int32_t longest32 = static_cast<int32_t>(longest);
  AttentionParams sizing = ImageAttentionParams(nullptr, nullptr, nullptr, nullptr, longest, c.num_attention_heads,
                                                c.num_key_value_heads, c.head_dim, iota, &longest32);
  if (bf16) UseBf16KeysValues(sizing, nullptr, nullptr);
  scratch.attention().Reserve(AttentionScratchBytes(sizing, pool.num_threads()));
  s.attn_arena = &scratch.attention();

  for (size_t i = 0; i < inputs.size(); ++i) EmbedPatches(*inputs[i], h + images[i].row0 * H, s.x, s.x_pairs, pool);
  for (const Gemma4VisionLayerWeights& l : layers_)
    TESSERA_RETURN_IF_ERROR(RunGemma4VisionLayer(c, l, inv_freq_, images, tokens, options_.matmul_precision, s, h, pool));
  int64_t at = 0;
  for (size_t i = 0; i < inputs.size(); ++i) at += Pool(*inputs[i], h + images[i].row0 * H, pooled + at * H);
  // embed_vision: RMSNorm without scale, then the projection to the text width.
  RmsNormRows(pooled, H, nullptr, static_cast<float>(c.rms_norm_eps), soft, H, pooled, H, pool);
  ops::Linear(embedding_projection_, pooled, soft, H, out, text_hidden_, &pool, options_.matmul_precision, s.x_pairs);
  return Status::Ok();
}

}  // namespace tessera::vision
