// The codec back ends of DecodeImage: each reads its header first (so the pixel limit is checked
// before any allocation), then decodes to 8-bit RGB as PIL's open().convert("RGB") would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/image.h"

namespace tessera::image {

// What the decoder found besides pixels: the EXIF block (TIFF bytes, no "Exif\0\0"), if any.
struct DecodedExtras {
  std::vector<uint8_t> exif;
};

StatusOr<Image> DecodeJpeg(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options,
                           DecodedExtras* extras);
StatusOr<Image> DecodePng(const uint8_t* data, size_t size, const std::string& name, const DecodeOptions& options,
                          DecodedExtras* extras);

// The pixel-limit check both decoders make once their header gives the size.
Status CheckDeclaredSize(int64_t width, int64_t height, const std::string& name, const DecodeOptions& options);

// The EXIF orientation (1..8) of a TIFF-structured EXIF block, 1 when absent or unreadable.
int ExifOrientation(const std::vector<uint8_t>& tiff);
// The image turned upright for `orientation` as PIL.ImageOps.exif_transpose does.
Image ApplyOrientation(const Image& image, int orientation);

}  // namespace tessera::image
