// Placeholder until the image layer lands (replaced by decode/resample/processor sources).
#include "tessera/image.h"

namespace tessera::image {
StatusOr<Image> LoadImageFile(const std::string& path, const DecodeOptions&) {
  return Unimplemented("image decoding: " + path);
}
StatusOr<Image> DecodeImage(const uint8_t*, size_t, const std::string& name, const DecodeOptions&) {
  return Unimplemented("image decoding: " + name);
}
StatusOr<Image> ImageFromPixels(const uint8_t*, int64_t, int64_t, int64_t) { return Unimplemented("images"); }
StatusOr<ImageProcessor> ImageProcessor::FromCheckpoint(const std::string&, Family family) {
  ProcessorConfig c;
  c.family = family;
  return ImageProcessor(c);
}
StatusOr<ImageProcessor> ImageProcessor::FromConfig(const ProcessorConfig& config) { return ImageProcessor(config); }
StatusOr<int64_t> ImageProcessor::SoftTokens(int64_t, int64_t, int64_t) const { return Unimplemented("images"); }
StatusOr<PixelInput> ImageProcessor::Process(const Image&, int64_t) const { return Unimplemented("images"); }
}  // namespace tessera::image
