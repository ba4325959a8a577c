// A whole file mapped read-only into memory (POSIX mmap, MAP_PRIVATE). Checkpoint tensors are
// views into this mapping, so weights are never copied (the loader prefaults the ones it uses).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/status.h"

namespace tessera::io {

class MappedFile {
 public:
  // Maps `path` (a regular file). An empty file maps to data() == nullptr, size() == 0.
  static StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  // Page-aligned start of the mapping; stable for the object's lifetime (and across moves).
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Maps the pages of [p, p + bytes), a range inside some MappedFile, into the page table now
  // (reading them in if needed), so the first forward pass over the weights takes no page faults
  // (bench/results/kernel_choices.md, "Prefaulting the weights"). A hint: false where the kernel
  // lacks MADV_POPULATE_READ (before Linux 5.14) or refused; nothing else changes.
  static bool Prefault(const void* p, size_t bytes);
  // Drops the whole pages inside [p, p + bytes), a range inside some MappedFile, from this
  // process's memory (MADV_DONTNEED): the data stays readable, its pages are read back from the
  // file (or page cache) if touched again. For weights repacked into a copy. Only for ranges of a
  // MappedFile: on anonymous memory it would zero the pages. False where refused.
  static bool Release(const void* p, size_t bytes);

 private:
  void Reset();

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace tessera::io
