// The decoding entry points: the file is read with the io layer's guarded reader (nothing but a
// regular file is opened), the format is told by its magic bytes, and the EXIF orientation is
// applied after decoding as transformers' load_image does.
#include <algorithm>
#include <new>
#include <string>

#include "image/decoders.h"
#include "io/input_file.h"

namespace tessera::image {
namespace {

// Larger than any image the pixel limit lets through at a plausible compression ratio.
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 31;

bool StartsWith(const uint8_t* data, size_t size, const char* magic, size_t n) {
  return size >= n && std::equal(data, data + n, reinterpret_cast<const uint8_t*>(magic));
}

}  // namespace

Status CheckDeclaredSize(int64_t width, int64_t height, const std::string& name, const DecodeOptions& options) {
  if (width <= 0 || height <= 0)
    return InvalidArgument("image '" + name + "' has zero size (" + std::to_string(width) + "x" +
                           std::to_string(height) + ")");
  if (width * height > options.max_pixels)
    return InvalidArgument("image '" + name + "' is " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                           std::to_string(width * height) + " pixels, more than the limit of " +
                           std::to_string(options.max_pixels) + " (a possible decompression bomb)");
  return Status::Ok();
}

StatusOr<Image> DecodeImage(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options) {
  if (size == 0 || data == nullptr) return InvalidArgument("image '" + name + "' is empty (0 bytes)");
  DecodedExtras extras;
  StatusOr<Image> decoded = InvalidArgument("image '" + name + "': not a JPEG or PNG file");
  if (StartsWith(data, size, "\xFF\xD8\xFF", 3)) {
    decoded = DecodeJpeg(data, size, name, options, &extras);
  } else if (StartsWith(data, size, "\x89PNG\r\n\x1A\n", 8)) {
    decoded = DecodePng(data, size, name, options, &extras);
  }
  if (!decoded.ok() || !options.apply_exif_orientation || extras.exif.empty()) return decoded;
  const int orientation = ExifOrientation(extras.exif);
  if (orientation <= 1) return decoded;
  try {
    return ApplyOrientation(decoded.value(), orientation);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("image '" + name + "': out of memory turning it upright");
  }
}

StatusOr<Image> LoadImageFile(const std::string& path, const DecodeOptions& options) {
  StatusOr<std::string> bytes = io::ReadInputFile(path, "image", kMaxFileBytes);
  if (!bytes.ok()) return bytes.status();
  const std::string& b = bytes.value();
  return DecodeImage(reinterpret_cast<const uint8_t*>(b.data()), b.size(), path, options);
}

StatusOr<Image> ImageFromPixels(const uint8_t* data, int64_t height, int64_t width, int64_t channels) {
  if (height <= 0 || width <= 0 || height > (int64_t{1} << 24) || width > (int64_t{1} << 24))
    return InvalidArgument("pixels: size " + std::to_string(height) + "x" + std::to_string(width) +
                           " is not positive or is too large");
  if (channels != 1 && channels != 3 && channels != 4)
    return InvalidArgument("pixels: " + std::to_string(channels) + " channels; expected 1 (gray), 3 (RGB) or 4 (RGBA)");
  if (data == nullptr) return InvalidArgument("pixels: no data");
  Image img;
  img.height = height;
  img.width = width;
  try {
    img.rgb.resize(static_cast<size_t>(height * width * 3));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("pixels: out of memory for " + std::to_string(height) + "x" + std::to_string(width));
  }
  const int64_t n = height * width;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = data + i * channels;
    for (int c = 0; c < 3; ++c) img.rgb[i * 3 + c] = channels == 1 ? p[0] : p[c];  // alpha dropped, as PIL
  }
  return img;
}

}  // namespace tessera::image
