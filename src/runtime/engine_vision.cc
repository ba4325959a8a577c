// Model's image entry points (tessera/engine.h): processor, encoder, prompt layout.
#include <mutex>
#include <new>
#include <numeric>
#include <string>

#include "model/loaded_model.h"
#include "runtime/image_prompt.h"
#include "runtime/model_vision.h"

namespace tessera {
namespace {

StatusOr<image::Family> FamilyOf(const model::LoadedModel& m) {
  switch (m.config().model_type) {
    case model::ModelType::kGemma3: return image::Family::kGemma3;
    case model::ModelType::kGemma4: return image::Family::kGemma4;
    case model::ModelType::kGemma4Unified: return image::Family::kGemma4Unified;
    default:
      return InvalidArgument(m.dir() + ": model_type " + model::ModelTypeName(m.config().model_type) +
                             " is text-only: it takes no images");
  }
}

}  // namespace

StatusOr<const image::ImageProcessor*> Model::ImageProcessor() const {
  std::lock_guard<std::mutex> lock(vision_->mu);
  if (!vision_->processor) {
    StatusOr<image::Family> family = FamilyOf(*loaded_);
    vision_->processor = family.ok() ? image::ImageProcessor::FromCheckpoint(loaded_->dir(), family.value())
                                     : StatusOr<image::ImageProcessor>(family.status());
    // Gemma 3's token count is the projector's (config.json mm_tokens_per_image), whatever the
    // processor config says: the encoder makes exactly that many.
    const std::optional<int64_t> mm = loaded_->config().mm_tokens_per_image;
    if (vision_->processor->ok() && family.value() == image::Family::kGemma3 && mm &&
        vision_->processor->value().config().image_seq_length != *mm) {
      image::ProcessorConfig c = vision_->processor->value().config();
      c.image_seq_length = *mm;
      vision_->processor = image::ImageProcessor::FromConfig(c);
    }
  }
  if (!vision_->processor->ok()) return vision_->processor->status();
  return &vision_->processor->value();
}

StatusOr<ImageFeatures> Model::EncodePixels(const std::vector<image::PixelInput>& inputs,
                                            const EncodeOptions& options) const {
  // The towers' weights are never block-quantized: int8 encodes as f32.
  const ops::MatmulPrecision mp = ops::ForFloatWeights(options.matmul_precision);
  const int precision = mp == ops::MatmulPrecision::kBf16 ? 1 : 0;
  const vision::VisionEncoder* encoder = nullptr;
  {
    std::lock_guard<std::mutex> lock(vision_->mu);
    if (!vision_->encoders[precision] && !vision_->encoder_error[precision]) {
      StatusOr<std::unique_ptr<vision::VisionEncoder>> e =
          vision::VisionEncoder::Load(*loaded_, vision::VisionOptions{mp});
      if (e.ok()) vision_->encoders[precision] = std::move(e.value());
      else vision_->encoder_error[precision] = e.status();
    }
    if (vision_->encoder_error[precision]) return *vision_->encoder_error[precision];
    encoder = vision_->encoders[precision].get();
  }
  ImageFeatures f;
  f.hidden = encoder->output_width();
  std::vector<const image::PixelInput*> ptrs;
  for (const image::PixelInput& in : inputs) {
    if (in.soft_tokens <= 0)
      return InvalidArgument("image " + std::to_string(ptrs.size()) + ": soft_tokens must be > 0");
    f.tokens_per_image.push_back(in.soft_tokens);
    ptrs.push_back(&in);
  }
  const int64_t rows = std::accumulate(f.tokens_per_image.begin(), f.tokens_per_image.end(), int64_t{0});
  try {
    f.rows.resize(static_cast<size_t>(rows * f.hidden));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("image features: " + std::to_string(rows) + " x " + std::to_string(f.hidden) + " floats");
  }
  std::unique_lock<std::mutex> held(vision_->scratch_mu[precision], std::try_to_lock);
  vision::EncodeScratch fresh;
  vision::EncodeScratch& scratch = held.owns_lock() ? vision_->scratch[precision] : fresh;
  try {
    if (Status st = encoder->Encode(ptrs, f.rows.data(), *pool_, scratch); !st.ok()) return st;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("image encoder: out of memory for the activations of " + std::to_string(inputs.size()) +
                             " image(s)");
  }
  return f;
}

StatusOr<ImageFeatures> Model::EncodeImages(const std::vector<image::Image>& images,
                                            const EncodeOptions& options) const {
  StatusOr<const image::ImageProcessor*> processor = ImageProcessor();
  if (!processor.ok()) return processor.status();
  std::vector<image::PixelInput> inputs;
  inputs.reserve(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    StatusOr<image::PixelInput> in = processor.value()->Process(images[i], options.image_tokens);
    if (!in.ok()) return Status(in.status().code(), "image " + std::to_string(i) + ": " + in.status().message());
    inputs.push_back(std::move(in).value());
  }
  return EncodePixels(inputs, options);
}

StatusOr<Prompt> Model::LayoutImagePrompt(const std::vector<int32_t>& tokens, const ImageFeatures& features,
                                          std::optional<int32_t> double_newline_id) const {
  StatusOr<image::Family> family = FamilyOf(*loaded_);
  if (!family.ok()) return family.status();
  const ModelInfo& i = info_;
  if (!i.image_token_id || !i.boi_token_id || !i.eoi_token_id)
    return InvalidArgument(loaded_->dir() + "/config.json: image_token_id, boi_token_id and eoi_token_id are needed "
                           "to lay out images");
  runtime::ImageLayoutIds ids;
  const bool gemma3 = family.value() == image::Family::kGemma3;
  ids.marker = gemma3 ? *i.boi_token_id : *i.image_token_id;
  ids.boi = *i.boi_token_id;
  ids.eoi = *i.eoi_token_id;
  ids.soft = *i.image_token_id;
  ids.bos = i.bos_token_id;
  if (gemma3) ids.double_newline = double_newline_id;
  StatusOr<runtime::ImageLayout> layout = runtime::LayoutImages(tokens, features.tokens_per_image, ids);
  if (!layout.ok()) return layout.status();
  Prompt p;
  p.tokens = std::move(layout.value().tokens);
  p.token_types = std::move(layout.value().token_types);
  p.image_embeds = features.rows.empty() ? nullptr : features.rows.data();
  p.image_rows = static_cast<int64_t>(features.rows.size()) / std::max<int64_t>(features.hidden, 1);
  return p;
}

}  // namespace tessera
