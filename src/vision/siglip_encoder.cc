#include "vision/siglip_encoder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "ops/elementwise.h"
#include "tessera/gemm.h"
#include "vision/loaders.h"
#include "vision/vision_ops.h"

namespace tessera::vision {
namespace {

// Patches per group: at least this many rows per Linear call keeps the GEMM compute-bound, and a
// real-shaped image (4096 patches) is then encoded alone, bounding scratch to one image's states.
constexpr int64_t kTargetGroupPatches = 4096;

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

// Every buffer of one Encode call, carved from the EncodeScratch before any work.
struct SiglipEncoder::Scratch {
  float *patches = nullptr, *h = nullptr, *x = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *a = nullptr,
        *m = nullptr, *pooled = nullptr;
  int32_t *positions = nullptr, *valid = nullptr;
  uint32_t* pairs = nullptr;  // the GEMM's rounded-x scratch at precision bf16, else null
  Arena* attention = nullptr;
  BidirectionalAttention attn;
};

int64_t SiglipEncoder::ImagesPerGroup(int64_t count) const {
  return std::clamp<int64_t>(kTargetGroupPatches / config_.num_patches(), 1, std::max<int64_t>(count, 1));
}

StatusOr<std::unique_ptr<SiglipEncoder>> SiglipEncoder::Create(const io::SafetensorsCheckpoint& ckpt,
                                                               const SiglipConfig& config, int64_t text_hidden,
                                                               const VisionOptions& options) {
  if (text_hidden < 1) return InvalidArgument("SiglipEncoder: text hidden size " + std::to_string(text_hidden));
  StatusOr<SiglipWeights> w = LoadSiglipWeights(ckpt, config, text_hidden, options.matmul_precision);
  if (!w.ok()) return w.status();
  return std::unique_ptr<SiglipEncoder>(new SiglipEncoder(config, text_hidden, options, std::move(w.value())));
}

Status SiglipEncoder::CheckInput(const image::PixelInput* in, size_t index) const {
  const std::string at = "SiglipEncoder::Encode: input " + std::to_string(index);
  if (in == nullptr) return InvalidArgument(at + " is null");
  const int64_t C = config_.num_channels, S = config_.image_size;
  const std::vector<int64_t> want = {C, S, S};
  if (in->shape != want)
    return InvalidArgument(at + " has shape " + ShapeString(in->shape) + ", the Gemma 3 vision tower reads " +
                           ShapeString(want));
  if (static_cast<int64_t>(in->pixels.size()) != C * S * S)
    return InvalidArgument(at + " has " + std::to_string(in->pixels.size()) + " pixel values for shape " +
                           ShapeString(in->shape));
  const int64_t bad = FirstNonFinite(DType::kF32, in->pixels.data(), C * S * S);
  if (bad >= 0)
    return InvalidArgument(at + " has a non-finite pixel value at [" + std::to_string(bad / (S * S)) + ", " +
                           std::to_string(bad / S % S) + ", " + std::to_string(bad % S) + "]");
  if (in->soft_tokens != config_.mm_tokens_per_image)
    return InvalidArgument(at + " declares " + std::to_string(in->soft_tokens) + " soft tokens, the projector makes " +
                           std::to_string(config_.mm_tokens_per_image));
  return Status::Ok();
}

// Patch (py, px) of each image as a row in the conv weight's (c, ky, kx) order, so the patch
// embedding is one Linear over the rows.
void SiglipEncoder::Patchify(const image::PixelInput* const* inputs, int64_t count, float* patches) const {
  const int64_t C = config_.num_channels, S = config_.image_size, p = config_.patch_size;
  const int64_t side = config_.patches_per_side(), F = config_.patch_features();
  for (int64_t i = 0; i < count; ++i) {
    const float* px = inputs[i]->pixels.data();
    for (int64_t py = 0; py < side; ++py)
      for (int64_t pxi = 0; pxi < side; ++pxi) {
        float* row = patches + ((i * side + py) * side + pxi) * F;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ky = 0; ky < p; ++ky) {
            const float* src = px + (c * S + py * p + ky) * S + pxi * p;
            std::copy(src, src + p, row + (c * p + ky) * p);
          }
      }
  }
}

Status SiglipEncoder::Layer(const SiglipLayerWeights& L, int64_t count, Scratch& s, ThreadPool& pool) const {
  const int64_t n = count * config_.num_patches(), D = config_.hidden_size, I = config_.intermediate_size;
  const ops::MatmulPrecision mp = options_.matmul_precision;
  LayerNorm(s.h, L.ln1_w.data(), L.ln1_b.data(), config_.layer_norm_eps, n, D, s.x, &pool);
  const std::pair<const ops::WeightView*, std::pair<const std::vector<float>*, float*>> qkv[] = {
      {&L.q, {&L.q_b, s.q}}, {&L.k, {&L.k_b, s.k}}, {&L.v, {&L.v_b, s.v}}};
  for (const auto& [w, dst] : qkv) {
    ops::Linear(*w, s.x, n, D, dst.second, D, &pool, mp, s.pairs);
    AddBias(dst.second, dst.first->data(), n, D, &pool);
  }
  s.attn.images = count;
  TESSERA_RETURN_IF_ERROR(s.attn.Run(s.q, s.k, s.v, s.a, &pool, *s.attention));
  ops::Linear(L.o, s.a, n, D, s.x, D, &pool, mp, s.pairs);
  AddBiasResidual(s.x, L.o_b.data(), s.h, n, D, &pool);
  std::swap(s.h, s.x);  // the residual stream moves to the freshly written buffer
  LayerNorm(s.h, L.ln2_w.data(), L.ln2_b.data(), config_.layer_norm_eps, n, D, s.x, &pool);
  ops::Linear(L.fc1, s.x, n, D, s.m, I, &pool, mp, s.pairs);
  AddBias(s.m, L.fc1_b.data(), n, I, &pool);
  ops::GeluTanh(s.m, n * I, &pool);
  ops::Linear(L.fc2, s.m, n, I, s.x, D, &pool, mp, s.pairs);
  AddBiasResidual(s.x, L.fc2_b.data(), s.h, n, D, &pool);
  std::swap(s.h, s.x);
  return Status::Ok();
}

StatusOr<float*> SiglipEncoder::Tower(const image::PixelInput* const* inputs, int64_t count, Scratch& s,
                                      ThreadPool& pool) const {
  const int64_t P = config_.num_patches(), n = count * P, D = config_.hidden_size;
  Patchify(inputs, count, s.patches);
  ops::Linear(weights_.patch, s.patches, n, config_.patch_features(), s.h, D, &pool, options_.matmul_precision,
              s.pairs);
  // Conv output (with its bias), then the learned position embedding of each patch.
  for (int64_t i = 0; i < count; ++i)
    AddBiasResidual(s.h + i * P * D, weights_.patch_b.data(), weights_.position.data(), P, D, &pool);
  for (const SiglipLayerWeights& L : weights_.layers) TESSERA_RETURN_IF_ERROR(Layer(L, count, s, pool));
  LayerNorm(s.h, weights_.post_w.data(), weights_.post_b.data(), config_.layer_norm_eps, n, D, s.x, &pool);
  return s.x;
}

// Gemma3MultiModalProjector: k x k average pooling of each image's patch grid, RMSNorm (1 + w),
// then the projection to the text width.
void SiglipEncoder::Project(const float* states, int64_t count, Scratch& s, float* out, ThreadPool& pool) const {
  const int64_t D = config_.hidden_size, side = config_.patches_per_side(), k = config_.pool_kernel();
  const int64_t tside = config_.tokens_per_side(), T = config_.mm_tokens_per_image;
  const float inv = 1.0f / static_cast<float>(k * k);
  pool.ParallelFor(count * T, [&](int64_t item, int) {
    const int64_t i = item / T, ty = (item % T) / tside, tx = item % tside;
    float* dst = s.pooled + item * D;
    std::fill(dst, dst + D, 0.0f);
    for (int64_t dy = 0; dy < k; ++dy)
      for (int64_t dx = 0; dx < k; ++dx) {
        const float* src = states + ((i * side + ty * k + dy) * side + tx * k + dx) * D;
        for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
      }
    for (int64_t d = 0; d < D; ++d) dst[d] *= inv;
  });
  ops::RmsNorm(s.pooled, D, weights_.mm_norm_w.data(), 1.0f, config_.layer_norm_eps, count * T, D, s.pooled, D);
  ops::Linear(weights_.mm_proj, s.pooled, count * T, D, out, text_hidden_, &pool, options_.matmul_precision,
              s.pairs);
}

Status SiglipEncoder::Encode(const std::vector<const image::PixelInput*>& inputs, float* out,
                             ThreadPool& pool, EncodeScratch& scratch) const {
  for (size_t i = 0; i < inputs.size(); ++i) TESSERA_RETURN_IF_ERROR(CheckInput(inputs[i], i));
  if (inputs.empty()) return Status::Ok();
  if (out == nullptr) return InvalidArgument("SiglipEncoder::Encode: out is null");
  const int64_t count = static_cast<int64_t>(inputs.size()), G = ImagesPerGroup(count);
  const int64_t P = config_.num_patches(), n = G * P, D = config_.hidden_size, I = config_.intermediate_size;
  const int64_t F = config_.patch_features(), T = config_.mm_tokens_per_image;
  Scratch s;
  const bool bf16 = options_.matmul_precision == ops::MatmulPrecision::kBf16;
  // At matmul precision bf16, K and V also go to bf16 copies (n * D floats hold both) for attention
  // at precision bf16, as the tower computes in transformers at bf16.
  float *kv16 = nullptr, *pairs = nullptr;
  const int64_t pair_words = bf16 ? ops::GemmScratchWords(n, std::max({F, D, I})) : 0;
  const int64_t sizes[] = {n * F, n * D, n * D, n * D, n * D, n * D, n * D, n * I, G * T * D, bf16 ? n * D : 0,
                           pair_words};
  float** slots[] = {&s.patches, &s.h, &s.x, &s.q, &s.k, &s.v, &s.a, &s.m, &s.pooled, &kv16, &pairs};
  int64_t total = 0;
  for (int64_t sz : sizes) total += (sz + 15) / 16 * 16;  // each slot 64-byte aligned
  float* base = scratch.Floats(static_cast<size_t>(total));
  int64_t at = 0;
  for (size_t j = 0; j < std::size(slots); ++j) {
    *slots[j] = base + at;
    at += (sizes[j] + 15) / 16 * 16;
  }
  s.pairs = bf16 ? reinterpret_cast<uint32_t*>(pairs) : nullptr;
  s.positions = scratch.Ints(static_cast<size_t>(n + G));
  s.valid = s.positions + n;
  std::fill(s.valid, s.valid + G, static_cast<int32_t>(P));  // Gemma 3 images have no padding patches
  s.attn = {G, P, config_.num_attention_heads, config_.head_dim(),
            1.0f / std::sqrt(static_cast<float>(config_.head_dim())), s.valid, s.positions,
            bf16 ? reinterpret_cast<uint16_t*>(kv16) : nullptr};
  s.attention = &scratch.attention();
  s.attention->Reserve(s.attn.ScratchBytes(pool.num_threads()));
  for (int64_t g0 = 0; g0 < count; g0 += G) {
    const int64_t g = std::min(G, count - g0);
    StatusOr<float*> states = Tower(inputs.data() + g0, g, s, pool);
    if (!states.ok()) return states.status();
    Project(states.value(), g, s, out + g0 * T * text_hidden_, pool);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<VisionEncoder>> LoadSiglipEncoder(const model::LoadedModel& model,
                                                           const VisionOptions& options) {
  StatusOr<SiglipConfig> config = LoadSiglipConfig(model.dir());
  if (!config.ok()) return Status(config.status().code(), "LoadSiglipEncoder: " + config.status().message());
  StatusOr<std::unique_ptr<SiglipEncoder>> enc =
      SiglipEncoder::Create(model.checkpoint(), config.value(), model.config().hidden_size, options);
  if (!enc.ok()) return Status(enc.status().code(), "LoadSiglipEncoder: " + enc.status().message());
  return std::unique_ptr<VisionEncoder>(std::move(enc.value()));
}

}  // namespace tessera::vision
