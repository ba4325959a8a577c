// The per-family preprocessing, written to give what transformers' PIL-backend processors give:
// Gemma 3 resizes to a square and normalizes ([3, S, S]); Gemma 4 resizes keeping the aspect ratio
// within a soft-token budget and cuts patches; Gemma 4 unified cuts the k x k merged patches.
#include <algorithm>
#include <cmath>
#include <new>
#include <string>

#include "image/patchify.h"
#include "tessera/image.h"

namespace tessera::image {
namespace {

bool IsSupportedBudget(int64_t b) { return b == 70 || b == 140 || b == 280 || b == 560 || b == 1120; }

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

StatusOr<ImageProcessor> ImageProcessor::FromConfig(const ProcessorConfig& config) {
  ProcessorConfig c = config;
  const bool gemma3 = c.family == Family::kGemma3;
  if (!c.do_normalize.has_value()) c.do_normalize = gemma3;
  if (!c.resample.has_value()) c.resample = gemma3 ? Resample::kBilinear : Resample::kBicubic;
  auto bad = [](const std::string& what) { return InvalidArgument("image processor config: " + what); };
  if (gemma3 && (c.size <= 0 || c.size > 8192)) return bad("size " + Str(c.size) + " is not in 1..8192");
  if (gemma3 && c.image_seq_length <= 0) return bad("image_seq_length " + Str(c.image_seq_length) + " is not positive");
  if (!gemma3) {
    if (c.patch_size <= 0 || c.patch_size > 256) return bad("patch_size " + Str(c.patch_size) + " is not in 1..256");
    if (c.pooling_kernel_size <= 0 || c.pooling_kernel_size > 16)
      return bad("pooling_kernel_size " + Str(c.pooling_kernel_size) + " is not in 1..16");
    if (!IsSupportedBudget(c.max_soft_tokens))
      return bad("max_soft_tokens " + Str(c.max_soft_tokens) + " is not one of 70, 140, 280, 560, 1120");
  }
  if (!std::isfinite(c.rescale_factor) || c.rescale_factor <= 0)
    return bad("rescale_factor " + std::to_string(c.rescale_factor) + " is not a positive number");
  for (int i = 0; i < 3; ++i) {
    if (!std::isfinite(c.mean[i]) || !std::isfinite(c.std[i]) || c.std[i] == 0.0f)
      return bad("image_mean/image_std must be finite with a nonzero std");
  }
  return ImageProcessor(c);
}

StatusOr<ImageSize> ImageProcessor::TargetSize(int64_t height, int64_t width, int64_t budget) const {
  const ProcessorConfig& c = config_;
  if (height <= 0 || width <= 0 || height > (int64_t{1} << 24) || width > (int64_t{1} << 24))
    return InvalidArgument("image size " + Str(height) + "x" + Str(width) + " is not positive or is too large");
  if (c.family == Family::kGemma3) {
    if (budget != 0 && budget != c.image_seq_length)
      return InvalidArgument("Gemma 3 images are always " + Str(c.image_seq_length) + " soft tokens; budget " +
                             Str(budget) + " cannot be chosen");
    return c.do_resize ? ImageSize{c.size, c.size} : ImageSize{height, width};
  }
  if (budget == 0) budget = c.max_soft_tokens;
  if (!IsSupportedBudget(budget))
    return InvalidArgument("soft-token budget " + Str(budget) + " is not one of 70, 140, 280, 560, 1120");
  const int64_t k = c.pooling_kernel_size, p = c.patch_size;
  const int64_t max_patches = budget * k * k;
  if (!c.do_resize) return ImageSize{height, width};
  // transformers' get_aspect_ratio_preserving_size, in the same double arithmetic.
  const int64_t target_px = max_patches * p * p;
  const double factor = std::sqrt(static_cast<double>(target_px) / static_cast<double>(height * width));
  const int64_t side = k * p;
  int64_t th = static_cast<int64_t>(std::floor(factor * static_cast<double>(height) / static_cast<double>(side))) * side;
  int64_t tw = static_cast<int64_t>(std::floor(factor * static_cast<double>(width) / static_cast<double>(side))) * side;
  if (th == 0 && tw == 0)
    return InvalidArgument("image " + Str(height) + "x" + Str(width) + " would resize to 0 x 0 (sides must be " +
                           "multiples of pooling_kernel_size * patch_size = " + Str(side) + ")");
  const int64_t max_side = (max_patches / (k * k)) * side;
  if (th == 0) {
    th = side;
    tw = std::min(static_cast<int64_t>(std::floor(static_cast<double>(width) / static_cast<double>(height))) * side,
                  max_side);
  } else if (tw == 0) {
    tw = side;
    th = std::min(static_cast<int64_t>(std::floor(static_cast<double>(height) / static_cast<double>(width))) * side,
                  max_side);
  }
  if (th * tw > target_px)
    return InvalidArgument("resizing " + Str(height) + "x" + Str(width) + " to " + Str(th) + "x" + Str(tw) +
                           " exceeds " + Str(max_patches) + " patches of " + Str(p) + " pixels");
  return ImageSize{th, tw};
}

StatusOr<int64_t> ImageProcessor::SoftTokens(int64_t height, int64_t width, int64_t budget) const {
  StatusOr<ImageSize> t = TargetSize(height, width, budget);
  if (!t.ok()) return t.status();
  if (config_.family == Family::kGemma3) return config_.image_seq_length;
  const int64_t k = config_.pooling_kernel_size, p = config_.patch_size;
  return (t.value().height / p) * (t.value().width / p) / (k * k);
}

StatusOr<PixelInput> ImageProcessor::Process(const Image& image, int64_t budget) const {
  if (image.height <= 0 || image.width <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.height * image.width * 3))
    return InvalidArgument("image is empty or its pixels do not match " + Str(image.height) + "x" + Str(image.width) +
                           "x3");
  StatusOr<ImageSize> target = TargetSize(image.height, image.width, budget);
  if (!target.ok()) return target.status();
  const ImageSize t = target.value();
  if (config_.family == Family::kGemma3 && !config_.do_resize && (t.height != config_.size || t.width != config_.size))
    return InvalidArgument("do_resize is off, so the image must already be " + Str(config_.size) + "x" +
                           Str(config_.size) + "; it is " + Str(image.height) + "x" + Str(image.width));
  try {
    const Image* src = &image;
    StatusOr<Image> resized = Image{};
    if (t.height != image.height || t.width != image.width) {
      resized = ResizeImage(image, t.height, t.width, *config_.resample);
      if (!resized.ok()) return resized.status();
      src = &resized.value();
    }
    if (config_.family == Family::kGemma3) return ToChannelsFirst(*src, config_);
    return ToPatches(*src, config_, budget == 0 ? config_.max_soft_tokens : budget);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("image preprocessing: out of memory");
  }
}

}  // namespace tessera::image
