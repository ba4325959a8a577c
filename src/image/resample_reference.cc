// The plain resize: every weight from the filter in double, over the whole input line, summed in
// double and rounded once per pass. No fixed point, no precomputed windows.
#include <algorithm>
#include <cmath>
#include <vector>

#include "image/resample_filters.h"
#include "tessera/image.h"

namespace tessera::image {

namespace {

uint8_t RoundClip(double v) {
  const double r = std::floor(v + 0.5);
  return static_cast<uint8_t>(r < 0 ? 0 : r > 255 ? 255 : r);
}

// One pass along an axis of `n_in` samples to `n_out`; `at(i, c)` reads input sample i, channel c
// of the current line, `put(o, c, v)` writes the output.
template <typename At, typename Put>
void ResampleLine(int64_t n_in, int64_t n_out, Resample filter, At at, Put put) {
  const double scale = static_cast<double>(n_in) / static_cast<double>(n_out);
  const double stretch = std::max(scale, 1.0);
  for (int64_t o = 0; o < n_out; ++o) {
    const double center = (o + 0.5) * scale;
    double acc[3] = {0, 0, 0}, total = 0;
    for (int64_t i = 0; i < n_in; ++i) {
      const double w = FilterWeight(filter, (i + 0.5 - center) / stretch);
      if (w == 0.0) continue;
      total += w;
      for (int c = 0; c < 3; ++c) acc[c] += w * at(i, c);
    }
    for (int c = 0; c < 3; ++c) put(o, c, RoundClip(total != 0.0 ? acc[c] / total : acc[c]));
  }
}

Image ResizeWidth(const Image& in, int64_t width, Resample filter) {
  if (width == in.width) return in;
  Image out{in.height, width, std::vector<uint8_t>(static_cast<size_t>(in.height * width * 3))};
  for (int64_t y = 0; y < in.height; ++y) {
    const uint8_t* src = &in.rgb[y * in.width * 3];
    uint8_t* dst = &out.rgb[y * width * 3];
    ResampleLine(
        in.width, width, filter, [&](int64_t i, int c) { return src[i * 3 + c]; },
        [&](int64_t o, int c, uint8_t v) { dst[o * 3 + c] = v; });
  }
  return out;
}

Image ResizeHeight(const Image& in, int64_t height, Resample filter) {
  if (height == in.height) return in;
  Image out{height, in.width, std::vector<uint8_t>(static_cast<size_t>(height * in.width * 3))};
  for (int64_t x = 0; x < in.width; ++x) {
    ResampleLine(
        in.height, height, filter, [&](int64_t i, int c) { return in.rgb[(i * in.width + x) * 3 + c]; },
        [&](int64_t o, int c, uint8_t v) { out.rgb[(o * in.width + x) * 3 + c] = v; });
  }
  return out;
}

}  // namespace

StatusOr<Image> ResizeImageReference(const Image& image, int64_t height, int64_t width, Resample filter) {
  TESSERA_RETURN_IF_ERROR(CheckResizeArguments(image, height, width));
  if (VerticalPassFirst(image, height, width)) return ResizeWidth(ResizeHeight(image, height, filter), width, filter);
  return ResizeHeight(ResizeWidth(image, width, filter), height, filter);
}

}  // namespace tessera::image
