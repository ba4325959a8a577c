// Minimal .npy reader for the CLI's --image-embeds: a float32 (little-endian '<f4') C-order
// array of rank 1 or 2. Every header field is validated; anything else is refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera::io {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major
};

StatusOr<NpyArray> ReadNpy(const std::string& path);
// Parses an in-memory .npy image (`name` is used in messages).
StatusOr<NpyArray> ParseNpy(const std::string& bytes, const std::string& name);

}  // namespace tessera::io
