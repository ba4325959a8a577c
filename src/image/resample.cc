// The fast, PIL-identical resize: per output column (row) the window start, its length and its
// fixed-point weights are computed once, then each pass is integer multiply-adds.
#include <cmath>
#include <new>
#include <string>
#include <vector>

#include "image/resample_filters.h"
#include "tessera/image.h"

namespace tessera::image {
namespace {

// PIL keeps 8 bits of pixel, 2 of headroom and 22 of weight fraction in an int32 accumulator.
constexpr int kPrecisionBits = 32 - 8 - 2;

struct Windows {
  int ksize = 0;
  std::vector<int> start, length;  // per output pixel
  std::vector<int32_t> weights;    // [out][ksize], fixed point
};

// PIL's precompute_coeffs + normalize_coeffs_8bpc, written from the algorithm: the window of output
// pixel i is centred at (i + 0.5) * scale, reaches support * max(scale, 1) and is normalized to 1
// in double before being rounded (away from zero) to fixed point.
Windows ComputeWindows(int64_t in_size, int64_t out_size, Resample filter) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = scale < 1.0 ? 1.0 : scale;
  const double support = FilterSupport(filter) * filter_scale;
  Windows w;
  w.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  w.start.resize(out_size);
  w.length.resize(out_size);
  w.weights.assign(static_cast<size_t>(out_size) * w.ksize, 0);
  std::vector<double> k(w.ksize);
  const double inv = 1.0 / filter_scale;
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    int lo = static_cast<int>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = static_cast<int>(center + support + 0.5);
    if (hi > in_size) hi = static_cast<int>(in_size);
    const int n = hi - lo;
    double total = 0.0;
    for (int j = 0; j < n; ++j) {
      k[j] = FilterWeight(filter, (j + lo - center + 0.5) * inv);
      total += k[j];
    }
    int32_t* out = &w.weights[static_cast<size_t>(i) * w.ksize];
    for (int j = 0; j < n; ++j) {
      const double v = total != 0.0 ? k[j] / total : k[j];
      out[j] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    w.start[i] = lo;
    w.length[i] = n;
  }
  return w;
}

inline uint8_t Clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// Rows [row0, row0 + rows) of `in` resampled along x into `out` (rows x out_w).
void Horizontal(const uint8_t* in, int64_t in_w, int64_t row0, int64_t rows, const Windows& w, int64_t out_w,
                uint8_t* out) {
  constexpr int32_t half = 1 << (kPrecisionBits - 1);
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in + (row0 + y) * in_w * 3;
    uint8_t* dst = out + y * out_w * 3;
    for (int64_t x = 0; x < out_w; ++x) {
      const int32_t* k = &w.weights[static_cast<size_t>(x) * w.ksize];
      const uint8_t* p = src + static_cast<int64_t>(w.start[x]) * 3;
      int32_t r = half, g = half, b = half;
      for (int j = 0; j < w.length[x]; ++j, p += 3) {
        r += p[0] * k[j];
        g += p[1] * k[j];
        b += p[2] * k[j];
      }
      dst[x * 3 + 0] = Clip8(r);
      dst[x * 3 + 1] = Clip8(g);
      dst[x * 3 + 2] = Clip8(b);
    }
  }
}

// `in` (any rows, width `width`) resampled along y; window starts are relative to `row0`.
void Vertical(const uint8_t* in, int64_t width, int64_t row0, const Windows& w, int64_t out_h, uint8_t* out) {
  constexpr int32_t half = 1 << (kPrecisionBits - 1);
  const int64_t stride = width * 3;
  for (int64_t y = 0; y < out_h; ++y) {
    const int32_t* k = &w.weights[static_cast<size_t>(y) * w.ksize];
    const uint8_t* top = in + (w.start[y] - row0) * stride;
    uint8_t* dst = out + y * stride;
    for (int64_t c = 0; c < stride; ++c) {
      int32_t s = half;
      const uint8_t* p = top + c;
      for (int j = 0; j < w.length[y]; ++j, p += stride) s += *p * k[j];
      dst[c] = Clip8(s);
    }
  }
}

}  // namespace

Status CheckResizeArguments(const Image& image, int64_t height, int64_t width) {
  if (image.height <= 0 || image.width <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.height * image.width * 3))
    return InvalidArgument("resize: the image is empty or its pixels do not match " + std::to_string(image.height) +
                           "x" + std::to_string(image.width) + "x3");
  if (height <= 0 || width <= 0 || height > (1 << 24) || width > (1 << 24))
    return InvalidArgument("resize: target size " + std::to_string(height) + "x" + std::to_string(width) +
                           " is not positive or is too large");
  return Status::Ok();
}

StatusOr<Image> ResizeImage(const Image& image, int64_t height, int64_t width, Resample filter) {
  TESSERA_RETURN_IF_ERROR(CheckResizeArguments(image, height, width));
  if (height == image.height && width == image.width) return image;  // PIL returns a copy
  try {
    const bool horizontal = width != image.width, vertical = height != image.height;
    Windows wx, wy;
    if (horizontal) wx = ComputeWindows(image.width, width, filter);
    if (vertical) wy = ComputeWindows(image.height, height, filter);
    Image out;
    out.height = height;
    out.width = width;
    out.rgb.resize(static_cast<size_t>(height * width * 3));
    if (!vertical) {
      Horizontal(image.rgb.data(), image.width, 0, height, wx, width, out.rgb.data());
      return out;
    }
    if (!horizontal) {
      Vertical(image.rgb.data(), width, 0, wy, height, out.rgb.data());
      return out;
    }
    std::vector<uint8_t> temp;
    if (VerticalPassFirst(image, height, width)) {
      temp.resize(static_cast<size_t>(height * image.width * 3));
      Vertical(image.rgb.data(), image.width, 0, wy, height, temp.data());
      Horizontal(temp.data(), image.width, 0, height, wx, width, out.rgb.data());
      return out;
    }
    // Only the input rows some output row reads go through the horizontal pass.
    const int64_t row0 = wy.start.front(), rows = wy.start.back() + wy.length.back() - row0;
    temp.resize(static_cast<size_t>(rows * width * 3));
    Horizontal(image.rgb.data(), image.width, row0, rows, wx, width, temp.data());
    Vertical(temp.data(), width, row0, wy, height, out.rgb.data());
    return out;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("resize to " + std::to_string(height) + "x" + std::to_string(width) +
                             ": out of memory");
  }
}

}  // namespace tessera::image
