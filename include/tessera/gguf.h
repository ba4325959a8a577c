// One GGUF file (the llama.cpp / ggml container): a header, typed key-value metadata, tensor infos,
// then the aligned tensor data. Open() maps the file read-only and validates everything before
// returning (counts, string and array lengths bounded; every tensor's type known, its shape and
// byte size consistent, its data inside the file and aligned); afterwards every lookup is a
// pointer into the mapping. Any failure is a Status naming the file and the key, tensor or field.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/quant.h"
#include "tessera/status.h"

namespace tessera::io {

// GGUF metadata value types (the numbers are the file's).
enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// A stored tensor. Element type: `quant` != kNone for block-quantized data (tessera/quant.h),
// otherwise `dtype` (f32, f16, bf16). Other ggml types are refused at Open with the tensor's name.
struct GgufTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major, outermost first: GGUF's ne[] reversed ([out, in] for a matrix)
  uint32_t ggml_type = 0;      // the file's type id
  DType dtype = DType::kF32;
  QuantType quant = QuantType::kNone;
  const void* data = nullptr;  // into the mapping; null when nbytes == 0
  uint64_t nbytes = 0;
  int64_t numel() const;
};

class GgufFile {
 public:
  struct Impl;  // the parsed file (src/io/gguf_format.h)

  // Maps and validates `path`.
  static StatusOr<GgufFile> Open(const std::string& path);
  // Validates an in-memory image (copied into aligned storage); `name` is used in messages.
  static StatusOr<GgufFile> FromBytes(std::string_view bytes, const std::string& name);
  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;

  // Metadata. Each getter fails with kInvalidArgument naming the file and the key when the key is
  // absent ("has no metadata key"; test with Has), of another type, or an integer out of range.
  bool Has(std::string_view key) const;
  std::vector<std::string> Keys() const;  // in file order
  StatusOr<GgufType> TypeOf(std::string_view key) const;
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<int64_t> GetInt(std::string_view key) const;  // any integer type
  StatusOr<double> GetFloat(std::string_view key) const;  // f32 or f64
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;  // any integer element type
  StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;  // f32 or f64 elements
  StatusOr<std::vector<bool>> GetBoolArray(std::string_view key) const;
  // The element type of an array (kInvalidArgument when the key is not an array).
  StatusOr<GgufType> ArrayTypeOf(std::string_view key) const;
  // Exact readers for values GetInt / GetFloatArray would narrow: any non-negative integer, and
  // arrays of them; f32 or f64 elements as double.
  StatusOr<uint64_t> GetU64(std::string_view key) const;
  StatusOr<std::vector<uint64_t>> GetU64Array(std::string_view key) const;
  StatusOr<std::vector<double>> GetF64Array(std::string_view key) const;

  // Tensors, in file order; Find returns null when absent.
  const std::vector<GgufTensor>& tensors() const;
  const GgufTensor* Find(std::string_view name) const;

 private:
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes a GGUF (version 3) that GgufFile and llama.cpp read. Metadata keeps insertion order
// (setting a key again replaces its value in place). Tensor data is produced at Write time, one
// tensor at a time, by each tensor's fill callback, so a writer never holds the whole model.
class GgufWriter {
 public:
  GgufWriter();
  ~GgufWriter();
  GgufWriter(GgufWriter&&) noexcept;
  GgufWriter& operator=(GgufWriter&&) noexcept;

  void SetString(const std::string& key, const std::string& value);
  void SetU32(const std::string& key, uint32_t value);
  void SetI32(const std::string& key, int32_t value);
  void SetU64(const std::string& key, uint64_t value);
  void SetF32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, const std::vector<std::string>& values);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& values);
  void SetF32Array(const std::string& key, const std::vector<float>& values);
  void SetBoolArray(const std::string& key, const std::vector<bool>& values);
  // The other GGUF value types. `type` (or the array's element type) is any integer type; a value
  // outside its range makes Write fail naming the key.
  void SetInt(const std::string& key, GgufType type, int64_t value);
  void SetF64(const std::string& key, double value);
  void SetIntArray(const std::string& key, GgufType elem_type, const std::vector<int64_t>& values);
  void SetU64Array(const std::string& key, const std::vector<uint64_t>& values);
  void SetF64Array(const std::string& key, const std::vector<double>& values);

  // `fill` writes exactly the tensor's byte size (numel elements of dtype, or QuantRowBytes per
  // row when quant != kNone) into dst; its failure aborts Write with that status.
  using Fill = std::function<Status(char* dst)>;
  void AddTensor(const std::string& name, const std::vector<int64_t>& shape, DType dtype, Fill fill);
  void AddQuantTensor(const std::string& name, const std::vector<int64_t>& shape, QuantType quant, Fill fill);

  // Writes to a temporary file beside `path` and renames it into place; alignment: general.alignment
  // (written as that key when not 32; a general.alignment set by the caller must equal it). The file
  // is laid out as llama.cpp lays it out: tensors in insertion order, each padded to the alignment.
  // Fails (leaving no file) on a bad name, shape or value, a fill failure, or a full disk.
  Status Write(const std::string& path, uint32_t alignment = 32) const;

  struct Entry;   // one metadata value, encoded (src/io/gguf_writer.cc)
  struct Tensor;  // one tensor's name, shape, type and fill

 private:
  // Replaces the entry of the same key in place, or appends it.
  void Set(Entry e);
  // The header: magic, counts, metadata and tensor infos, unpadded; *sizes gets each tensor's bytes.
  StatusOr<std::string> EncodeHeader(uint32_t alignment, std::vector<uint64_t>* sizes) const;

  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
};

}  // namespace tessera::io
