// Resampling: the fast PIL-identical resize against the plain double-precision reference over a
// sweep of sizes (within 1 level), and properties any correct resize has. Bit-exactness against
// PIL itself is python/tests/test_image_resize.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "tessera/image.h"

namespace tessera::image {
namespace {

Image RandomImage(int64_t h, int64_t w, uint32_t seed) {
  std::mt19937 rng(seed);
  Image img{h, w, std::vector<uint8_t>(static_cast<size_t>(h * w * 3))};
  for (uint8_t& v : img.rgb) v = static_cast<uint8_t>(rng() & 0xFF);
  return img;
}

// Largest |fast - reference| over the pixels of one resize.
int MaxGap(const Image& in, int64_t th, int64_t tw, Resample f) {
  StatusOr<Image> fast = ResizeImage(in, th, tw, f);
  StatusOr<Image> ref = ResizeImageReference(in, th, tw, f);
  EXPECT_TRUE(fast.ok() && ref.ok());
  EXPECT_EQ(fast.value().rgb.size(), static_cast<size_t>(th * tw * 3));
  EXPECT_EQ(ref.value().rgb.size(), fast.value().rgb.size());
  int gap = 0;
  for (size_t k = 0; k < fast.value().rgb.size(); ++k)
    gap = std::max(gap, std::abs(int(fast.value().rgb[k]) - int(ref.value().rgb[k])));
  return gap;
}

// One pass differs from the double-precision reference only in rounding: at most 1. Two passes
// carry a first-pass 1 through the second; bicubic's weights have negative lobes (magnitudes sum
// above 1), so its two-pass bound is 2, bilinear's stays 1.
TEST(ImageResample, FastMatchesReferenceWithinOneLevel) {
  std::mt19937 rng(42);
  for (Resample f : {Resample::kBilinear, Resample::kBicubic}) {
    for (int i = 0; i < 80; ++i) {
      const int64_t h = 1 + rng() % 90, w = 1 + rng() % 90, th = 1 + rng() % 130, tw = 1 + rng() % 130;
      const Image in = RandomImage(h, w, rng());
      ASSERT_LE(MaxGap(in, h, tw, f), 1) << h << "x" << w << " -> " << h << "x" << tw;
      ASSERT_LE(MaxGap(in, th, w, f), 1) << h << "x" << w << " -> " << th << "x" << w;
      ASSERT_LE(MaxGap(in, th, tw, f), f == Resample::kBicubic ? 2 : 1) << h << "x" << w << " -> " << th << "x" << tw;
    }
  }
}

TEST(ImageResample, ConstantStaysConstant) {
  for (Resample f : {Resample::kBilinear, Resample::kBicubic}) {
    Image in{33, 47, std::vector<uint8_t>(33 * 47 * 3, 0)};
    for (size_t k = 0; k < in.rgb.size(); ++k) in.rgb[k] = static_cast<uint8_t>(k % 3 == 0 ? 200 : k % 3 == 1 ? 7 : 255);
    for (auto [th, tw] : {std::pair<int64_t, int64_t>{5, 300}, {200, 9}, {33, 10}, {1, 1}}) {
      StatusOr<Image> out = ResizeImage(in, th, tw, f);
      ASSERT_TRUE(out.ok());
      for (size_t k = 0; k < out.value().rgb.size(); ++k)
        ASSERT_EQ(out.value().rgb[k], in.rgb[k % 3]) << th << "x" << tw;
    }
  }
}

TEST(ImageResample, SameSizeIsACopy) {
  const Image in = RandomImage(12, 17, 3);
  StatusOr<Image> out = ResizeImage(in, 12, 17, Resample::kBicubic);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out.value().rgb, in.rgb);
}

TEST(ImageResample, BadArgumentsAreErrors) {
  const Image in = RandomImage(4, 4, 1);
  EXPECT_FALSE(ResizeImage(in, 0, 4, Resample::kBilinear).ok());
  EXPECT_FALSE(ResizeImage(in, 4, -1, Resample::kBilinear).ok());
  EXPECT_FALSE(ResizeImage(Image{}, 4, 4, Resample::kBilinear).ok());
  Image wrong = in;
  wrong.rgb.pop_back();
  EXPECT_FALSE(ResizeImageReference(wrong, 4, 4, Resample::kBicubic).ok());
}

}  // namespace
}  // namespace tessera::image
