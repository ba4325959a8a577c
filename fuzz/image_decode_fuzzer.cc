// libFuzzer target: image decoding (image::DecodeImage: JPEG through libjpeg-turbo, PNG through
// libpng, EXIF orientation). Invariants on success: a positive size within the pixel limit and
// exactly height * width * 3 bytes; the decoded image then resizes without error, fast and
// reference within 2 levels (bicubic's two passes; tests/image_resample_test.cc explains). A
// failure must say what is wrong and name the input.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_check.h"
#include "tessera/image.h"

namespace {

using tessera::image::Image;

// Small enough that libFuzzer's memory limit is never the finding.
constexpr int64_t kMaxPixels = int64_t{1} << 20;

void CheckResize(const Image& img) {
  const int64_t h = std::min<int64_t>(img.height, 24) + 1, w = std::max<int64_t>(img.width / 3, 1);
  tessera::StatusOr<Image> fast = tessera::image::ResizeImage(img, h, w, tessera::image::Resample::kBicubic);
  FUZZ_CHECK(fast.ok(), "resizing a decoded image");
  if (img.height * img.width > 4096) return;  // the reference is quadratic per line
  tessera::StatusOr<Image> ref = tessera::image::ResizeImageReference(img, h, w, tessera::image::Resample::kBicubic);
  FUZZ_CHECK(ref.ok(), "reference resize");
  for (size_t i = 0; i < fast.value().rgb.size(); ++i)
    FUZZ_CHECK(std::abs(int(fast.value().rgb[i]) - int(ref.value().rgb[i])) <= 2, "fast vs reference resize");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::NoEscape("DecodeImage", [&] {
    tessera::image::DecodeOptions options;
    options.max_pixels = kMaxPixels;
    tessera::StatusOr<Image> r = tessera::image::DecodeImage(data, size, "fuzz.img", options);
    if (!r.ok()) {
      FUZZ_CHECK(r.status().message().find("fuzz.img") != std::string::npos, "an error must name the input");
      return;
    }
    const Image& img = r.value();
    FUZZ_CHECK(img.height > 0 && img.width > 0 && img.height * img.width <= kMaxPixels, "size");
    FUZZ_CHECK(img.rgb.size() == static_cast<size_t>(img.height * img.width * 3), "pixel count");
    CheckResize(img);
  });
  return 0;
}
