// The layouts an encoder reads, made from the resized 8-bit image: the pixel values are rescaled
// and normalized in the float arithmetic transformers uses (numpy float64 rescale cast to float32,
// then float32 (x - mean) / std).
#pragma once

#include "tessera/image.h"

namespace tessera::image {

// Gemma 3: [3, H, W].
PixelInput ToChannelsFirst(const Image& image, const ProcessorConfig& config);
// Gemma 4: patch_size patches, padded to budget * k^2 rows; Gemma 4 unified: (k * patch_size)
// patches (the k x k merge), padded to budget rows. Rows in row-major grid order, each patch in
// (y, x, channel) order, positions (x, y).
StatusOr<PixelInput> ToPatches(const Image& image, const ProcessorConfig& config, int64_t budget);

}  // namespace tessera::image
