// A nesting limit for JSON read from user files. nlohmann's parser is iterative, but copying,
// comparing or printing a parsed value recurses once per level, so a document nested a hundred
// thousand deep overflows the stack after a successful parse. Checking the text first keeps such
// a document from ever reaching the parser.
#pragma once

#include <string_view>

#include "tessera/status.h"

namespace tessera::io {

// Far above any real config, safetensors header or index (they nest a few levels).
inline constexpr int kMaxJsonNesting = 64;

// Error naming `what` when arrays/objects in `text` nest deeper than max_depth (brackets inside
// strings do not count). Malformed text is left to the parser.
Status CheckJsonNesting(std::string_view text, std::string_view what, int max_depth = kMaxJsonNesting);

}  // namespace tessera::io
