// The two resampling kernels of PIL's convolution resize and the geometry they share: where each
// output pixel's window lies in the input and how far it reaches.
#pragma once

#include <cmath>

#include "tessera/image.h"

namespace tessera::image {

inline double BilinearWeight(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic with a = -0.5, the coefficient PIL uses for BICUBIC.
inline double BicubicWeight(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

inline double FilterWeight(Resample filter, double x) {
  return filter == Resample::kBicubic ? BicubicWeight(x) : BilinearWeight(x);
}
inline double FilterSupport(Resample filter) { return filter == Resample::kBicubic ? 2.0 : 1.0; }

// Which pass runs first changes the uint8 rounding between them, so it must be PIL's choice. Pillow
// 13 runs the vertical pass first when the height shrinks by more than twice as many pixels as the
// width does (a pixel count, not a ratio; the width may grow), the horizontal pass first otherwise.
// python/tests/test_image_resize.py pins this on both sides of the boundary.
inline bool VerticalPassFirst(const Image& in, int64_t height, int64_t width) {
  return height < in.height && (in.height - height) > 2 * (in.width - width);
}

// The checks both resizes make of their arguments.
Status CheckResizeArguments(const Image& image, int64_t height, int64_t width);

}  // namespace tessera::image
