// Internals shared by the GGUF reader, its metadata getters and the writer: the ggml tensor type
// ids we know, the reader's limits, and the parsed form of a file (GgufFile::Impl).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"
#include "tessera/aligned_buffer.h"
#include "tessera/gguf.h"

namespace tessera::io::gguf {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";

// Limits. Real files stay far below them (a Gemma vocabulary is 262144 strings, a large model a
// few thousand tensors); they bound what a hostile header can make us allocate or walk.
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
constexpr uint64_t kMaxKeys = uint64_t{1} << 20;
constexpr uint64_t kMaxKeyBytes = 65535;                  // keys and tensor names
constexpr uint64_t kMaxStringBytes = uint64_t{64} << 20;  // one metadata string (chat templates)
constexpr uint64_t kMaxArrayElems = uint64_t{1} << 26;    // one array (vocabularies, merges)
constexpr uint64_t kMaxMetadataBytes = uint64_t{1} << 30; // header, metadata and tensor infos
constexpr uint32_t kMaxDims = 4;                          // ggml's GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
// llama.cpp refuses tensor names of 64 bytes or more (GGML_MAX_NAME); the writer keeps to that.
constexpr size_t kGgmlMaxName = 64;

// One ggml tensor type id: its name, and what it maps to when we run it.
struct GgmlType {
  uint32_t id;
  const char* name;       // ggml's spelling ("q4_K")
  bool supported;         // f32, f16, bf16 and the block formats of tessera/quant.h
  DType dtype;            // when supported and quant == kNone
  QuantType quant;        // when supported and block-quantized
};
// The entry for `id`, or null for an id ggml never defined.
const GgmlType* FindGgmlType(uint32_t id);
// The id we write for a plain dtype or a block format.
uint32_t GgmlTypeOf(DType dtype);
uint32_t GgmlTypeOf(QuantType quant);
// Values per block: 1 for f32/f16/bf16, QuantBlockElems for a block format, 0 when unsupported.
int64_t BlockElems(const GgmlType& t);
// Bytes per row of n values; -1 when n is not a multiple of the block or the size overflows.
int64_t RowBytes(const GgmlType& t, int64_t n);

// The byte size of a tensor of `shape` (outermost first, dims >= 0) and supported type `t`: the
// element count (0 when any dimension is 0, whatever the others) and rows * row bytes, refusing a
// row that is not a whole number of blocks and any overflow. `what` starts the messages.
Status TensorBytes(const GgmlType& t, const std::vector<int64_t>& shape, const std::string& what, uint64_t* nbytes);

// "u8", "string", "array", ... for messages; "type <n>" for an unknown id.
std::string TypeName(uint32_t type);
// Bytes of one scalar of `type`; 0 for string and array (variable) and unknown ids.
uint64_t ScalarBytes(uint32_t type);

// Quotes a key or name for messages, truncated so a hostile file cannot produce huge messages.
std::string Quote(std::string_view s);
std::string ShapeString(const std::vector<int64_t>& shape);

// One metadata entry, pointing into the file image.
struct Kv {
  std::string_view key;
  GgufType type = GgufType::kU8;
  GgufType elem_type = GgufType::kU8;  // for arrays
  uint64_t count = 0;                  // elements, for arrays
  const uint8_t* value = nullptr;      // the value's bytes (after the array's type and count)
  uint64_t nbytes = 0;
};

}  // namespace tessera::io::gguf

namespace tessera::io {

struct GgufFile::Impl {
  std::string path;
  MappedFile mapping;    // owner when opened from a path
  AlignedBuffer buffer;  // owner when built from bytes
  const uint8_t* bytes = nullptr;
  uint64_t size = 0;
  uint32_t version = 0;
  uint64_t alignment = gguf::kDefaultAlignment;
  uint64_t data_start = 0;
  std::vector<gguf::Kv> kvs;                             // file order
  std::map<std::string_view, size_t, std::less<>> keys;  // key -> kvs index
  std::vector<GgufTensor> tensors;                       // file order
  std::map<std::string, size_t, std::less<>> names;      // tensor name -> tensors index

  // Parses and validates bytes[0, size).
  Status Parse();
  // "GgufFile 'path'" for messages.
  std::string Where() const;
  // The entry for key, or kNotFound-style InvalidArgument naming the file and key.
  StatusOr<const gguf::Kv*> Lookup(std::string_view key, const char* getter) const;
};

}  // namespace tessera::io
