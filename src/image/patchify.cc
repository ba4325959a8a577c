#include "image/patchify.h"

#include <string>

namespace tessera::image {
namespace {

// The float each of the 256 byte values becomes in channel c; a table, as the same 256 values
// recur across every pixel.
struct ValueTable {
  float v[3][256];
  explicit ValueTable(const ProcessorConfig& c) {
    for (int ch = 0; ch < 3; ++ch) {
      for (int b = 0; b < 256; ++b) {
        float x = c.do_rescale ? static_cast<float>(static_cast<double>(b) * c.rescale_factor) : static_cast<float>(b);
        if (c.do_normalize.value_or(false)) x = (x - c.mean[ch]) / c.std[ch];
        v[ch][b] = x;
      }
    }
  }
};

}  // namespace

PixelInput ToChannelsFirst(const Image& image, const ProcessorConfig& config) {
  const ValueTable table(config);
  PixelInput out;
  const int64_t n = image.height * image.width;
  out.shape = {3, image.height, image.width};
  out.pixels.resize(static_cast<size_t>(3 * n));
  for (int ch = 0; ch < 3; ++ch) {
    float* dst = &out.pixels[ch * n];
    for (int64_t i = 0; i < n; ++i) dst[i] = table.v[ch][image.rgb[i * 3 + ch]];
  }
  out.valid_rows = 3;
  out.soft_tokens = config.image_seq_length;
  return out;
}

StatusOr<PixelInput> ToPatches(const Image& image, const ProcessorConfig& config, int64_t budget) {
  const int64_t k = config.pooling_kernel_size;
  const bool merged = config.family == Family::kGemma4Unified;
  const int64_t p = merged ? k * config.patch_size : config.patch_size;
  const int64_t max_rows = merged ? budget : budget * k * k;
  if (image.height % p != 0 || image.width % p != 0)
    return InvalidArgument("image " + std::to_string(image.height) + "x" + std::to_string(image.width) +
                           " is not a whole number of " + std::to_string(p) + "-pixel patches (do_resize is off)");
  const int64_t grid_w = image.width / p, grid_h = image.height / p;
  const int64_t rows = grid_w * grid_h;
  if (rows > max_rows || (!merged && rows % (k * k) != 0))
    return InvalidArgument("image " + std::to_string(image.height) + "x" + std::to_string(image.width) + " makes " +
                           std::to_string(rows) + " patches, which do not fit " + std::to_string(max_rows) +
                           " rows in whole pooling groups (do_resize is off)");
  const ValueTable table(config);
  const int64_t row_len = p * p * 3;
  PixelInput out;
  out.shape = {max_rows, row_len};
  out.pixels.assign(static_cast<size_t>(max_rows * row_len), 0.0f);
  out.positions.assign(static_cast<size_t>(max_rows * 2), -1);
  for (int64_t gy = 0; gy < grid_h; ++gy) {
    for (int64_t gx = 0; gx < grid_w; ++gx) {
      const int64_t r = gy * grid_w + gx;
      float* dst = &out.pixels[r * row_len];
      for (int64_t dy = 0; dy < p; ++dy) {
        const uint8_t* src = &image.rgb[((gy * p + dy) * image.width + gx * p) * 3];
        for (int64_t i = 0; i < p * 3; ++i) dst[dy * p * 3 + i] = table.v[i % 3][src[i]];
      }
      out.positions[r * 2] = static_cast<int32_t>(gx);
      out.positions[r * 2 + 1] = static_cast<int32_t>(gy);
    }
  }
  out.valid_rows = rows;
  out.soft_tokens = merged ? rows : rows / (k * k);
  return out;
}

}  // namespace tessera::image
