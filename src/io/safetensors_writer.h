// Writes F32 / BF16 / F16 tensors as a safetensors file the way the reference writer does:
// "__metadata__" first, header padded with spaces to a multiple of 8, tensors laid out by
// descending element size then name, so every tensor is aligned to its element size. Used by
// tests and tools to build checkpoints; not on any hot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/status.h"

namespace tessera::io {

class SafetensorsWriter {
 public:
  // Copies `nbytes` bytes of `data` ([shape...] of `dtype`, row-major). Fails on a duplicate or
  // empty name, the reserved name "__metadata__", a negative dim, or a size mismatch.
  Status Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data, size_t nbytes);
  // Encodes `values` (numel of them) into `dtype`, rounding to nearest even.
  Status AddF32(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                const std::vector<float>& values);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  size_t num_tensors() const { return tensors_.size(); }
  // The complete file image.
  StatusOr<std::string> Serialize() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct Pending {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tessera::io
