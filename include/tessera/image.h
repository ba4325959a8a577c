// Images in: decoding image files to 8-bit RGB, and the per-family preprocessing that turns one
// image into what its vision encoder reads (docs/images.md). Layer `image`, below the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::image {

// 8-bit RGB pixels, row-major: rgb is [height, width, 3].
struct Image {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;
};

struct DecodeOptions {
  // Decompression-bomb guard: an image whose header declares more pixels is refused before any
  // pixel is decoded (the default is the Python imaging stack's refusal threshold).
  int64_t max_pixels = 2 * 89478485;
  // Apply the EXIF orientation tag (JPEG APP1, PNG eXIf) as PIL.ImageOps.exif_transpose does, which
  // transformers' load_image runs on every file it opens.
  bool apply_exif_orientation = true;
};

// JPEG or PNG (recognized by content, not name), converted to RGB as PIL's convert("RGB") does:
// grayscale replicated, alpha dropped, palettes looked up. Errors name the file.
StatusOr<Image> LoadImageFile(const std::string& path, const DecodeOptions& options = {});
StatusOr<Image> DecodeImage(const uint8_t* data, size_t size, const std::string& name,
                            const DecodeOptions& options = {});
// Caller's pixels [height, width, channels] uint8, channels 1 (gray), 3 (RGB) or 4 (RGBA).
StatusOr<Image> ImageFromPixels(const uint8_t* data, int64_t height, int64_t width, int64_t channels);

// PIL's antialiased convolution resize of 8-bit RGB (Image.resize with these filters), bit-exact:
// the support widens with the downscale factor, fixed-point weights, a horizontal then a vertical
// pass rounded to uint8 between them. The values are PIL's resample codes.
enum class Resample { kBilinear = 2, kBicubic = 3 };
StatusOr<Image> ResizeImage(const Image& image, int64_t height, int64_t width, Resample filter);
// The same resize in plain double precision (the check of the fast one: within 1 level).
StatusOr<Image> ResizeImageReference(const Image& image, int64_t height, int64_t width, Resample filter);

enum class Family { kGemma3, kGemma4, kGemma4Unified };

// The processor settings of a checkpoint (processor_config.json / preprocessor_config.json), with
// transformers' defaults where a field is absent.
struct ProcessorConfig {
  Family family = Family::kGemma3;
  // Gemma 3: resize to size x size (bilinear), rescale, normalize with mean/std.
  int64_t size = 896;
  float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
  int64_t image_seq_length = 256;  // soft tokens per image (the projector's output)
  // Gemma 4 / Gemma 4 unified: aspect-preserving bicubic resize to a soft-token budget, patchify.
  int64_t patch_size = 16, pooling_kernel_size = 3;
  int64_t max_soft_tokens = 280;  // the default budget: one of 70, 140, 280, 560, 1120
  // The steps transformers' processors switch by flag. Unset optionals take the family's default
  // (Gemma 3 normalizes, Gemma 4 does not). do_convert_rgb is accepted either way: an Image is RGB.
  bool do_resize = true, do_rescale = true, do_convert_rgb = true;
  std::optional<bool> do_normalize;
  double rescale_factor = 1.0 / 255.0;
  std::optional<Resample> resample;  // unset: the family's (Gemma 3 bilinear, Gemma 4 bicubic)
};

struct ImageSize {
  int64_t height = 0, width = 0;
};

// One image ready for the encoder. Rows past valid_rows are padding (zero pixels, positions -1).
struct PixelInput {
  // Gemma 3: [3, size, size], normalized.
  // Gemma 4: [max_soft_tokens * k^2, patch_size^2 * 3] patches in [0, 1], k = pooling_kernel_size.
  // Gemma 4 unified: [max_soft_tokens, (k * patch_size)^2 * 3] merged patches in [0, 1].
  std::vector<float> pixels;
  std::vector<int64_t> shape;
  std::vector<int32_t> positions;  // [shape[0], 2] (x, y) per row, (-1, -1) for padding; Gemma 3: empty
  int64_t valid_rows = 0;
  int64_t soft_tokens = 0;  // soft tokens the encoder makes of it (placeholders in the prompt)
};

class ImageProcessor {
 public:
  // Reads processor_config.json (or preprocessor_config.json) of a checkpoint directory; a
  // directory with neither gets the family's defaults.
  static StatusOr<ImageProcessor> FromCheckpoint(const std::string& dir, Family family);
  static StatusOr<ImageProcessor> FromConfig(const ProcessorConfig& config);
  // The processor settings as JSON text (the "image_processor" object of processor_config.json or
  // the whole preprocessor_config.json); `name` labels errors.
  static StatusOr<ImageProcessor> FromJson(const std::string& json, Family family, const std::string& name);

  const ProcessorConfig& config() const { return config_; }
  // Soft tokens an image of this size becomes. budget 0: the config's; Gemma 4 families accept
  // 70, 140, 280, 560 or 1120, Gemma 3 only its fixed count.
  StatusOr<int64_t> SoftTokens(int64_t height, int64_t width, int64_t budget = 0) const;
  StatusOr<PixelInput> Process(const Image& image, int64_t budget = 0) const;
  // The size an image of this size is resized to (Gemma 4: transformers'
  // get_aspect_ratio_preserving_size, its errors included; Gemma 3: size x size).
  StatusOr<ImageSize> TargetSize(int64_t height, int64_t width, int64_t budget = 0) const;

 private:
  explicit ImageProcessor(const ProcessorConfig& config) : config_(config) {}
  ProcessorConfig config_;
};

}  // namespace tessera::image
