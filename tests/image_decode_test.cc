// Decoding: round trips through in-memory PNG/JPEG files, refusal of bad input (every truncation,
// garbage, zero size, the pixel limit, non-regular files) with the file named, and the EXIF
// orientation parser and transposes. Bit-exactness against PIL is python/tests/test_image_decode.py.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "image/decoders.h"
#include "image_test_files.h"
#include "temp_dir.h"
#include "tessera/image.h"

namespace tessera::image {
namespace {

using testing::EncodeJpeg;
using testing::EncodePng;
using testing::TestPattern;

StatusOr<Image> Decode(const std::string& bytes, const DecodeOptions& o = {}) {
  return DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.img", o);
}

void ExpectError(const StatusOr<Image>& r, const std::string& fragment) {
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("test.img"), std::string::npos) << r.status().message();
}

TEST(ImageDecode, PngRoundTripIsExact) {
  const std::vector<uint8_t> rgb = TestPattern(37, 11);
  StatusOr<Image> img = Decode(EncodePng(rgb, 37, 11));
  ASSERT_TRUE(img.ok()) << img.status().message();
  EXPECT_EQ(img.value().width, 37);
  EXPECT_EQ(img.value().height, 11);
  EXPECT_EQ(img.value().rgb, rgb);
}

TEST(ImageDecode, JpegRoundTripIsClose) {
  // Smooth gradients only: JPEG keeps them within a few levels (sharp chroma edges it would not).
  const int w = 64, h = 48;
  std::vector<uint8_t> rgb(w * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) rgb[(y * w + x) * 3 + c] = static_cast<uint8_t>(c == 0 ? 4 * x : c == 1 ? 5 * y : 2 * (x + y));
  StatusOr<Image> img = Decode(EncodeJpeg(rgb, w, h, 95));
  ASSERT_TRUE(img.ok()) << img.status().message();
  EXPECT_EQ(img.value().width, w);
  EXPECT_EQ(img.value().height, h);
  ASSERT_EQ(img.value().rgb.size(), rgb.size());
  double total = 0;
  for (size_t i = 0; i < rgb.size(); ++i) total += std::abs(int(img.value().rgb[i]) - int(rgb[i]));
  EXPECT_LT(total / rgb.size(), 3.0);  // lossy, but the same picture
}

TEST(ImageDecode, EveryTruncationIsAnError) {
  const std::vector<uint8_t> rgb = TestPattern(20, 16);
  for (const std::string& file : {EncodePng(rgb, 20, 16), EncodeJpeg(rgb, 20, 16)}) {
    const bool png = file[0] == '\x89';
    // The PNG may lose its IEND (PIL accepts that too); everything shorter must fail cleanly.
    const size_t keep = png ? file.size() - 12 : file.size() - 2;
    for (size_t n = 1; n < keep; ++n) {
      StatusOr<Image> r = Decode(file.substr(0, n));
      ASSERT_FALSE(r.ok()) << "prefix " << n << " of " << file.size();
      EXPECT_NE(r.status().message().find("test.img"), std::string::npos);
    }
  }
}

TEST(ImageDecode, GarbageAndEmptyAreRefused) {
  ExpectError(Decode(""), "is empty");
  ExpectError(Decode("GIF89a......"), "not a JPEG or PNG file");
  ExpectError(Decode(std::string("\xFF\xD8\xFF\xE0", 4) + std::string(64, '\x11')), "corrupt or truncated JPEG");
  ExpectError(Decode(std::string("\x89PNG\r\n\x1A\n", 8) + std::string(64, '\x7F')), "corrupt or truncated PNG");
}

TEST(ImageDecode, ZeroSizeIsRefused) {
  // libpng rejects a zero width in IHDR itself; either way the file is named.
  ExpectError(Decode(EncodePng({}, 0, 0)), "");
  ExpectError(Decode(EncodePng({}, 0, 5)), "");
}

TEST(ImageDecode, PixelLimitCheckedFromTheHeader) {
  // The header declares 30000 x 30000 over a few bytes of data: refused before decoding.
  const std::vector<uint8_t> rgb = TestPattern(2, 2);
  ExpectError(Decode(EncodePng(rgb, 2, 2, 30000, 30000)), "decompression bomb");
  DecodeOptions tight;
  tight.max_pixels = 100;
  ExpectError(Decode(EncodePng(TestPattern(11, 10), 11, 10), tight), "110 pixels, more than the limit of 100");
  ExpectError(Decode(EncodeJpeg(TestPattern(11, 10), 11, 10), tight), "more than the limit of 100");
  EXPECT_TRUE(Decode(EncodePng(TestPattern(10, 10), 10, 10), tight).ok());
}

TEST(ImageDecode, FilesThatAreNotRegularAreRefused) {
  testing::TempDir dir("tessera_image");
  StatusOr<Image> r = LoadImageFile(dir.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a directory"), std::string::npos) << r.status().message();
  const std::string fifo = dir.File("pipe.png");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = LoadImageFile(fifo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("FIFO"), std::string::npos) << r.status().message();
  const std::string good = dir.File("good.png");
  testing::WriteText(good, EncodePng(TestPattern(3, 2), 3, 2));
  r = LoadImageFile(good);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().rgb, TestPattern(3, 2));
}

TEST(ImageDecode, FromPixelsDropsAlphaAndReplicatesGray) {
  const uint8_t rgba[] = {1, 2, 3, 4, 5, 6, 7, 8};
  StatusOr<Image> a = ImageFromPixels(rgba, 1, 2, 4);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.value().rgb, (std::vector<uint8_t>{1, 2, 3, 5, 6, 7}));
  StatusOr<Image> g = ImageFromPixels(rgba, 2, 1, 1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g.value().rgb, (std::vector<uint8_t>{1, 1, 1, 2, 2, 2}));
  EXPECT_FALSE(ImageFromPixels(rgba, 1, 1, 2).ok());
  EXPECT_FALSE(ImageFromPixels(rgba, 0, 1, 3).ok());
}

// A little-endian EXIF block with one IFD0 entry: orientation (SHORT) = `value`.
std::vector<uint8_t> ExifWithOrientation(uint16_t value, bool big_endian = false) {
  std::vector<uint8_t> le = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0,
                             static_cast<uint8_t>(value), 0, 0, 0, 0, 0, 0, 0};
  if (!big_endian) return le;
  return {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, static_cast<uint8_t>(value), 0, 0, 0,
          0, 0, 0};
}

TEST(ImageExif, OrientationTagIsRead) {
  for (int v = 1; v <= 8; ++v) {
    EXPECT_EQ(ExifOrientation(ExifWithOrientation(v)), v);
    EXPECT_EQ(ExifOrientation(ExifWithOrientation(v, true)), v);
  }
  EXPECT_EQ(ExifOrientation(ExifWithOrientation(9)), 1);
  EXPECT_EQ(ExifOrientation({}), 1);
  std::vector<uint8_t> bad = ExifWithOrientation(6);
  bad[4] = 0xF0;  // IFD offset past the end
  EXPECT_EQ(ExifOrientation(bad), 1);
  bad = ExifWithOrientation(6);
  bad[8] = 0xFF;  // 255 entries claimed, one present
  EXPECT_EQ(ExifOrientation(bad), 6);
  bad.resize(12);
  EXPECT_EQ(ExifOrientation(bad), 1);
}

TEST(ImageExif, TransposesMoveTheCorners) {
  // 2 x 3 image whose pixel values are their index: a b c / d e f.
  Image in{2, 3, {}};
  for (uint8_t i = 0; i < 6; ++i) in.rgb.insert(in.rgb.end(), {i, i, i});
  auto firsts = [](const Image& img) {
    std::vector<int> v;
    for (size_t i = 0; i < img.rgb.size(); i += 3) v.push_back(img.rgb[i]);
    return v;
  };
  EXPECT_EQ(firsts(ApplyOrientation(in, 2)), (std::vector<int>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(firsts(ApplyOrientation(in, 3)), (std::vector<int>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(firsts(ApplyOrientation(in, 4)), (std::vector<int>{3, 4, 5, 0, 1, 2}));
  EXPECT_EQ(firsts(ApplyOrientation(in, 5)), (std::vector<int>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(firsts(ApplyOrientation(in, 6)), (std::vector<int>{3, 0, 4, 1, 5, 2}));  // clockwise
  EXPECT_EQ(firsts(ApplyOrientation(in, 7)), (std::vector<int>{5, 2, 4, 1, 3, 0}));
  EXPECT_EQ(firsts(ApplyOrientation(in, 8)), (std::vector<int>{2, 5, 1, 4, 0, 3}));  // counter-clockwise
  EXPECT_EQ(ApplyOrientation(in, 6).width, 2);
  EXPECT_EQ(ApplyOrientation(in, 6).height, 3);
}

}  // namespace
}  // namespace tessera::image
