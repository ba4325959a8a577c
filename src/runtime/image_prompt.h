// Prompt layout for images: where each image's soft tokens go among the text tokens, with the
// markers around them that the family's processor writes (docs/images.md, "Prompt layout").
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/status.h"

namespace tessera::runtime {

struct ImageLayoutIds {
  int32_t marker = 0;      // what a caller writes where an image goes
  int32_t boi = 0, eoi = 0, soft = 0;
  std::optional<int32_t> bos;
  std::optional<int32_t> double_newline;  // Gemma 3 writes "\n\n" on both sides of an image
};

struct ImageLayout {
  std::vector<int32_t> tokens;
  std::vector<int32_t> token_types;  // 1 on soft tokens, 0 elsewhere
};

// Expands one marker per image into boi, soft x tokens_per_image[i], eoi (framed by the double
// newline when given). No marker: the images go first (after a leading bos). Tokens already
// holding exactly sum(tokens_per_image) soft ids are kept as laid out.
StatusOr<ImageLayout> LayoutImages(const std::vector<int32_t>& tokens, const std::vector<int64_t>& tokens_per_image,
                                   const ImageLayoutIds& ids);

}  // namespace tessera::runtime
