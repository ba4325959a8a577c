// Processors: the Gemma 4 size arithmetic at its edges (values from transformers'
// get_aspect_ratio_preserving_size), budgets, config reading and the output layouts. The pixel
// comparison with transformers is python/tests/test_image_processor.py.
#include <gtest/gtest.h>

#include <string>

#include "temp_dir.h"
#include "tessera/image.h"

namespace tessera::image {
namespace {

ImageProcessor Make(Family f, const std::string& json = "{}") {
  StatusOr<ImageProcessor> p = ImageProcessor::FromJson(json, f, "test.json");
  EXPECT_TRUE(p.ok()) << p.status().message();
  return std::move(p).value();
}

TEST(ImageProcessor, Gemma4TargetSizesMatchTransformers) {
  const ImageProcessor p = Make(Family::kGemma4);
  struct Case {
    int64_t h, w, budget, th, tw;
  };
  // From transformers 5.24's get_aspect_ratio_preserving_size(h, w, 16, budget * 9, 3).
  for (const Case& c : {Case{768, 768, 280, 768, 768}, Case{1, 20000, 70, 48, 3360}, Case{20000, 1, 1120, 53760, 48},
                        Case{480, 640, 280, 672, 912}, Case{1, 1, 70, 384, 384}, Case{47, 4000, 140, 48, 5232},
                        Case{1000, 3, 560, 20736, 48}, Case{224, 224, 1120, 1584, 1584}}) {
    StatusOr<ImageSize> t = p.TargetSize(c.h, c.w, c.budget);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(t.value().height, c.th) << c.h << "x" << c.w << " @" << c.budget;
    EXPECT_EQ(t.value().width, c.tw) << c.h << "x" << c.w << " @" << c.budget;
  }
  StatusOr<int64_t> n = p.SoftTokens(768, 768);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), 256);  // (768 / 48)^2
}

TEST(ImageProcessor, BudgetsAreChecked) {
  const ImageProcessor p = Make(Family::kGemma4Unified);
  for (int64_t b : {70, 140, 280, 560, 1120}) {
    StatusOr<int64_t> n = p.SoftTokens(1000, 1000, b);
    ASSERT_TRUE(n.ok());
    EXPECT_LE(n.value(), b);
  }
  for (int64_t b : {-1, 1, 69, 281, 2240}) {
    StatusOr<int64_t> n = p.SoftTokens(1000, 1000, b);
    ASSERT_FALSE(n.ok());
    EXPECT_NE(n.status().message().find(std::to_string(b)), std::string::npos) << n.status().message();
  }
  const ImageProcessor g3 = Make(Family::kGemma3);
  EXPECT_EQ(g3.SoftTokens(3, 4000).value(), 256);
  EXPECT_FALSE(g3.SoftTokens(3, 4000, 280).ok());
  EXPECT_FALSE(g3.SoftTokens(0, 10).ok());
}

TEST(ImageProcessor, ConfigFieldsAreReadAndChecked) {
  const ImageProcessor p = Make(Family::kGemma4, R"({"image_processor": {"max_soft_tokens": 560, "resample": 2},
                                                     "image_seq_length": 280})");
  EXPECT_EQ(p.config().max_soft_tokens, 560);
  EXPECT_EQ(*p.config().resample, Resample::kBilinear);
  EXPECT_FALSE(*p.config().do_normalize);
  const ImageProcessor g3 = Make(Family::kGemma3, R"({"size": {"height": 448, "width": 448}, "resample": null})");
  EXPECT_EQ(g3.config().size, 448);
  EXPECT_EQ(*g3.config().resample, Resample::kBilinear);
  EXPECT_TRUE(*g3.config().do_normalize);
  for (const char* bad : {R"({"resample": 0})", R"({"max_soft_tokens": 100})", R"({"patch_size": -3})",
                          R"({"image_std": [1, 0, 1]})", R"({"do_resize": "yes"})", R"([1, 2])", R"({"a": )",
                          R"({"image_processor": 3})"}) {
    StatusOr<ImageProcessor> r = ImageProcessor::FromJson(bad, Family::kGemma4, "test.json");
    EXPECT_FALSE(r.ok()) << bad;
  }
  StatusOr<ImageProcessor> pas = ImageProcessor::FromJson(R"({"do_pan_and_scan": true})", Family::kGemma3, "x.json");
  ASSERT_FALSE(pas.ok());
  EXPECT_NE(pas.status().message().find("do_pan_and_scan"), std::string::npos);
}

TEST(ImageProcessor, FromCheckpointPrefersProcessorConfig) {
  testing::TempDir dir("tessera_proc");
  testing::WriteText(dir.File("preprocessor_config.json"), R"({"max_soft_tokens": 70})");
  EXPECT_EQ(ImageProcessor::FromCheckpoint(dir.path(), Family::kGemma4).value().config().max_soft_tokens, 70);
  testing::WriteText(dir.File("processor_config.json"), R"({"image_processor": {"max_soft_tokens": 1120}})");
  EXPECT_EQ(ImageProcessor::FromCheckpoint(dir.path(), Family::kGemma4).value().config().max_soft_tokens, 1120);
  testing::WriteText(dir.File("processor_config.json"), R"({"image_processor": {"max_soft_tokens": 7}})");
  StatusOr<ImageProcessor> bad = ImageProcessor::FromCheckpoint(dir.path(), Family::kGemma4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_soft_tokens 7"), std::string::npos) << bad.status().message();
}

TEST(ImageProcessor, Gemma4LayoutAndPadding) {
  ProcessorConfig c;
  c.family = Family::kGemma4;
  c.do_resize = false;
  const ImageProcessor p = ImageProcessor::FromConfig(c).value();
  Image img{48, 96, std::vector<uint8_t>(48 * 96 * 3)};
  for (size_t k = 0; k < img.rgb.size(); ++k) img.rgb[k] = static_cast<uint8_t>(k * 7);
  StatusOr<PixelInput> out = p.Process(img, 70);
  ASSERT_TRUE(out.ok()) << out.status().message();
  const PixelInput& r = out.value();
  EXPECT_EQ(r.shape, (std::vector<int64_t>{630, 768}));
  EXPECT_EQ(r.valid_rows, 18);  // 3 x 6 patches
  EXPECT_EQ(r.soft_tokens, 2);
  // Row 7 is patch (x 1, y 1); its element (dy 2, dx 3, c 1) is pixel (18, 19), channel 1.
  EXPECT_EQ(r.positions[7 * 2], 1);
  EXPECT_EQ(r.positions[7 * 2 + 1], 1);
  const uint8_t v = img.rgb[(18 * 96 + 19) * 3 + 1];
  EXPECT_EQ(r.pixels[7 * 768 + (2 * 16 + 3) * 3 + 1], static_cast<float>(v * (1.0 / 255.0)));
  EXPECT_EQ(r.positions[18 * 2], -1);
  EXPECT_EQ(r.pixels[18 * 768], 0.0f);
}

TEST(ImageProcessor, Gemma3NormalizesToMinusOneOne) {
  ProcessorConfig c;
  c.size = 8;
  const ImageProcessor p = ImageProcessor::FromConfig(c).value();
  Image img{3, 5, std::vector<uint8_t>(3 * 5 * 3, 255)};
  StatusOr<PixelInput> out = p.Process(img);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out.value().shape, (std::vector<int64_t>{3, 8, 8}));
  for (float v : out.value().pixels) ASSERT_EQ(v, 1.0f);
  EXPECT_FALSE(p.Process(Image{}).ok());
}

}  // namespace
}  // namespace tessera::image
