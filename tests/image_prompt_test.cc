// Prompt layout for images (runtime/image_prompt.h): the expansion each family's processor writes.
#include <gtest/gtest.h>

#include "runtime/image_prompt.h"

namespace tessera::runtime {
namespace {

// Ids as in a Gemma 4 config: image 9 is both the marker and the soft token.
ImageLayoutIds Gemma4Ids() {
  ImageLayoutIds ids;
  ids.marker = ids.soft = 9;
  ids.boi = 7;
  ids.eoi = 8;
  ids.bos = 2;
  return ids;
}

// Gemma 3: the marker is begin-of-image; "\n\n" (id 5) frames each image.
ImageLayoutIds Gemma3Ids() {
  ImageLayoutIds ids;
  ids.marker = ids.boi = 7;
  ids.eoi = 8;
  ids.soft = 9;
  ids.bos = 2;
  ids.double_newline = 5;
  return ids;
}

TEST(ImagePrompt, MarkersExpandInOrder) {
  StatusOr<ImageLayout> l = LayoutImages({2, 10, 9, 11, 9, 12}, {2, 3}, Gemma4Ids());
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l.value().tokens, (std::vector<int32_t>{2, 10, 7, 9, 9, 8, 11, 7, 9, 9, 9, 8, 12}));
  EXPECT_EQ(l.value().token_types, (std::vector<int32_t>{0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0}));
}

TEST(ImagePrompt, Gemma3FramesWithDoubleNewlines) {
  StatusOr<ImageLayout> l = LayoutImages({2, 10, 7, 11}, {2}, Gemma3Ids());
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l.value().tokens, (std::vector<int32_t>{2, 10, 5, 7, 9, 9, 8, 5, 11}));
  EXPECT_EQ(l.value().token_types, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 0, 0, 0}));
}

TEST(ImagePrompt, NoMarkersPutsImagesAfterBos) {
  StatusOr<ImageLayout> l = LayoutImages({2, 10, 11}, {1, 2}, Gemma4Ids());
  ASSERT_TRUE(l.ok()) << l.status().message();
  EXPECT_EQ(l.value().tokens, (std::vector<int32_t>{2, 7, 9, 8, 7, 9, 9, 8, 10, 11}));
  StatusOr<ImageLayout> nobos = LayoutImages({10, 11}, {1}, Gemma4Ids());
  ASSERT_TRUE(nobos.ok());
  EXPECT_EQ(nobos.value().tokens, (std::vector<int32_t>{7, 9, 8, 10, 11}));
}

TEST(ImagePrompt, LaidOutPromptsAreKept) {
  const std::vector<int32_t> laid = {2, 7, 9, 9, 9, 8, 10};
  StatusOr<ImageLayout> l = LayoutImages(laid, {3}, Gemma4Ids());
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l.value().tokens, laid);
  EXPECT_EQ(l.value().token_types, (std::vector<int32_t>{0, 0, 1, 1, 1, 0, 0}));
  StatusOr<ImageLayout> g3 = LayoutImages({2, 7, 9, 9, 8}, {2}, Gemma3Ids());
  ASSERT_TRUE(g3.ok());
  EXPECT_EQ(g3.value().tokens, (std::vector<int32_t>{2, 7, 9, 9, 8}));
}

TEST(ImagePrompt, CountMismatchesAreNamed) {
  StatusOr<ImageLayout> two_markers = LayoutImages({2, 7, 10, 7}, {4}, Gemma3Ids());
  ASSERT_FALSE(two_markers.ok());
  EXPECT_NE(two_markers.status().message().find("2 image markers"), std::string::npos);
  EXPECT_NE(two_markers.status().message().find("1 images"), std::string::npos);
  StatusOr<ImageLayout> short_run = LayoutImages({2, 7, 9, 9, 8}, {3}, Gemma3Ids());
  ASSERT_FALSE(short_run.ok());
  EXPECT_NE(short_run.status().message().find("2 image soft tokens"), std::string::npos);
}

}  // namespace
}  // namespace tessera::runtime
