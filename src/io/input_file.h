// Opening files a user names (config.json, checkpoint shards and indexes, tokenizer.model, .npy)
// so that nothing but a regular file is ever read: a FIFO, device, socket or directory in their
// place gets an immediate error saying what it is, instead of blocking forever in open()/read()
// or being reported as missing or as an absurd size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/status.h"

namespace tessera::io {

// What `path` is when it is not a readable regular file, as a predicate for messages: "does not
// exist", "is a directory", "is a FIFO (named pipe)", "is a character device", "is a symbolic
// link loop", "is a dangling symbolic link", ... Empty for a regular file (symlinks followed).
std::string DescribeNonRegular(const std::string& path);

// Opens `path` read-only, refusing anything but a regular file; the stat comes first so a device
// is never opened at all, and the open itself is non-blocking so a FIFO swapped in after the
// stat cannot block either. Returns the descriptor (the caller closes it). Errors read
// "cannot open <what> '<path>': it is a FIFO (named pipe), not a regular file".
StatusOr<int> OpenInputFile(const std::string& path, std::string_view what);

// The whole content of the regular file `path`, refused beyond max_bytes (before reading).
StatusOr<std::string> ReadInputFile(const std::string& path, std::string_view what, uint64_t max_bytes);

}  // namespace tessera::io
