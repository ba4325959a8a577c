// One safetensors file (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON header, then the data section. Open() maps the file
// read-only and validates the whole header before returning; afterwards every lookup is a
// pointer into the mapping (no copies).
//
// Validation (any failure -> Status naming the file, the tensor and the offending value):
//   - file >= 8 bytes; N <= file size - 8 and N <= kMaxHeaderBytes;
//   - the header is a JSON object; "__metadata__" (optional) maps strings to strings;
//   - every other key is a tensor entry {"dtype", "shape", "data_offsets"}:
//       dtype a safetensors dtype name (unknown names are an error);
//       shape an array of at most kMaxRank non-negative integers whose product, times the element
//         size, does not overflow;
//       data_offsets [begin, end] with begin <= end <= data section size and
//         end - begin == numel * element size;
//       the data is aligned to its element size in the file (current writers guarantee it;
//         kernels read the mapping as float / uint16_t directly);
//   - no two non-empty tensors overlap. Gaps between tensors are tolerated.
// Not detected: a JSON object with a repeated key keeps its last entry (nlohmann), so a repeated
// tensor name resolves to its last definition. A file truncated by another process while mapped
// raises SIGBUS on access, as with any mmap reader.
// Tensors of a known but unsupported dtype (I64, F64, F8_*, ...) are validated like the others
// and listed, but Get() refuses them with kUnimplemented: a checkpoint may carry such buffers in
// towers the engine never loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"
#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"
#include "tessera/status.h"

namespace tessera::io {

// A read-only view of one stored tensor. Valid while the SafetensorsFile (or the checkpoint
// owning it) is alive; moving the owner does not invalidate it.
struct SafetensorsTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major dims; [] is a scalar
  const void* data = nullptr;  // [shape...] dtype, aligned to DTypeSize(dtype); null when nbytes == 0
  size_t nbytes = 0;           // numel() * DTypeSize(dtype)

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB: real headers are < 1 MiB
  static constexpr size_t kMaxRank = 16;

  // Maps and validates `path`.
  static StatusOr<SafetensorsFile> Open(const std::string& path);
  // Validates an in-memory image of a file (copied into aligned storage); `name` is used in
  // messages. For tests and fuzzing.
  static StatusOr<SafetensorsFile> FromBytes(std::string_view bytes, std::string name);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  // The path (or the name given to FromBytes).
  const std::string& name() const { return name_; }
  size_t num_tensors() const { return entries_.size(); }
  // Tensor names in data-offset order.
  std::vector<std::string> TensorNames() const;
  bool Contains(std::string_view tensor) const { return index_.find(tensor) != index_.end(); }
  // The safetensors dtype string of `tensor` ("BF16", "I64", ...), empty if absent.
  std::string_view StoredDTypeName(std::string_view tensor) const;
  // kInvalidArgument when absent, kUnimplemented when its dtype is not F32/BF16/F16.
  StatusOr<SafetensorsTensor> Get(std::string_view tensor) const;
  // An integer tensor (I64 or I32: index buffers such as an assistant's token_ordering), its
  // elements widened to int64 in row-major order; its shape into *shape when given.
  // kInvalidArgument when absent, kUnimplemented for any other dtype.
  StatusOr<std::vector<int64_t>> GetIntegers(std::string_view tensor, std::vector<int64_t>* shape = nullptr) const;
  // The "__metadata__" object (empty if none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Total file size in bytes.
  size_t file_size() const { return size_; }

 private:
  struct Entry {
    std::string name;
    std::string dtype_name;     // as stored
    bool supported = false;     // dtype is F32 / BF16 / F16
    DType dtype = DType::kF32;  // meaningful when supported
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range within the data section
  };

  SafetensorsFile() = default;
  // Parses and validates the image at bytes_/size_ (already owned by *this).
  Status Parse();
  // Parse's steps: the header length and JSON; "__metadata__"; one tensor entry (what: its name
  // for messages); no two tensors overlapping (entries_ sorted by offset).
  Status ParseHeader(const std::string& where, nlohmann::json* header);
  Status ParseMetadata(const std::string& where, const nlohmann::json& value);
  Status ParseEntry(const std::string& what, const nlohmann::json& value, Entry* e) const;
  Status CheckNoOverlap(const std::string& where) const;

  std::string name_;
  MappedFile mapping_;    // owner when opened from a path
  AlignedBuffer buffer_;  // owner when built from bytes
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  uint64_t data_start_ = 0;                           // 8 + header length
  std::vector<Entry> entries_;                        // in data-offset order
  std::map<std::string, size_t, std::less<>> index_;  // name -> entries_ index
  std::map<std::string, std::string> metadata_;
};

}  // namespace tessera::io
