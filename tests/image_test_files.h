// Image files made in memory for the image tests: a PNG written by hand (stored deflate blocks, so
// no compressor is needed) and a JPEG through libjpeg's encoder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::testing {

// An 8-bit RGB (colour type 2) PNG of `rgb` [height, width, 3]; `declared_*` override the IHDR
// size (0: the real one) to build a header that lies.
std::string EncodePng(const std::vector<uint8_t>& rgb, uint32_t width, uint32_t height, uint32_t declared_width = 0,
                      uint32_t declared_height = 0);
// A baseline JPEG of `rgb` at `quality`.
std::string EncodeJpeg(const std::vector<uint8_t>& rgb, int width, int height, int quality = 90);
// Smooth colour gradients with some texture, [height, width, 3].
std::vector<uint8_t> TestPattern(int width, int height);

}  // namespace tessera::testing
