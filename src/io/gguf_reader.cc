// GgufFile: mapping and validating the header, metadata and tensor infos (docs/gguf.md).
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "io/gguf_format.h"

namespace tessera::io {
namespace {

using gguf::Quote;

// Reads little-endian fields from the image, never past its end. Each failure names the field.
class Cursor {
 public:
  Cursor(const uint8_t* bytes, uint64_t size, const std::string& where) : b_(bytes), size_(size), where_(where) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  Status Need(uint64_t n, const std::string& what) const {
    if (n <= left()) return Status::Ok();
    return InvalidArgument(where_ + ": " + what + " needs " + std::to_string(n) + " bytes at offset " +
                           std::to_string(pos_) + " but the " + std::to_string(size_) +
                           "-byte file ends there (truncated?)");
  }
  Status U32(uint32_t* v, const std::string& what) {
    TESSERA_RETURN_IF_ERROR(Need(4, what));
    *v = 0;
    for (int i = 3; i >= 0; --i) *v = (*v << 8) | b_[pos_ + i];
    pos_ += 4;
    return Status::Ok();
  }
  Status U64(uint64_t* v, const std::string& what) {
    TESSERA_RETURN_IF_ERROR(Need(8, what));
    *v = 0;
    for (int i = 7; i >= 0; --i) *v = (*v << 8) | b_[pos_ + i];
    pos_ += 8;
    return Status::Ok();
  }
  // A length-prefixed string of at most `limit` bytes.
  Status Str(std::string_view* s, uint64_t limit, const std::string& what) {
    uint64_t n = 0;
    TESSERA_RETURN_IF_ERROR(U64(&n, what + " length"));
    if (n > limit)
      return InvalidArgument(where_ + ": " + what + " length " + std::to_string(n) + " exceeds the limit of " +
                             std::to_string(limit) + " bytes");
    TESSERA_RETURN_IF_ERROR(Need(n, what));
    *s = std::string_view(reinterpret_cast<const char*>(b_ + pos_), n);
    pos_ += n;
    return Status::Ok();
  }
  Status Skip(uint64_t n, const std::string& what) {
    TESSERA_RETURN_IF_ERROR(Need(n, what));
    pos_ += n;
    return Status::Ok();
  }
  const uint8_t* here() const { return b_ + pos_; }
  // Skips a string of at most `limit` bytes when one is there; otherwise stays put (the caller
  // then reads it with Str for the message). Vocabulary arrays hold 10^5 strings: no messages built.
  bool TrySkipString(uint64_t limit) {
    if (left() < 8) return false;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | b_[pos_ + i];
    if (n > limit || n > left() - 8) return false;
    pos_ += 8 + n;
    return true;
  }

 private:
  const uint8_t* b_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& where_;
};

bool ValidValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kF64); }

Status ReadHeader(Cursor& c, const std::string& where, uint32_t* version, uint64_t* n_tensors, uint64_t* n_kv) {
  uint32_t magic = 0;
  TESSERA_RETURN_IF_ERROR(c.U32(&magic, "the magic"));
  if (magic != gguf::kMagic)
    return InvalidArgument(where + ": not a GGUF file (the first four bytes are not 'GGUF')");
  TESSERA_RETURN_IF_ERROR(c.U32(version, "the version"));
  if (*version != 0 && (*version & 0xFFFF) == 0)
    return InvalidArgument(where + ": version field " + std::to_string(*version) +
                           " reads as a byte-swapped small number: a big-endian GGUF, which is not supported");
  if (*version == 1)
    return InvalidArgument(where + ": GGUF version 1 is not supported (only versions 2 and 3; llama.cpp dropped v1 too)");
  if (*version != 2 && *version != 3)
    return InvalidArgument(where + ": unsupported GGUF version " + std::to_string(*version) + " (supported: 2, 3)");
  TESSERA_RETURN_IF_ERROR(c.U64(n_tensors, "the tensor count"));
  TESSERA_RETURN_IF_ERROR(c.U64(n_kv, "the metadata count"));
  if (*n_tensors > gguf::kMaxTensors)
    return InvalidArgument(where + ": tensor count " + std::to_string(*n_tensors) + " exceeds the limit of " +
                           std::to_string(gguf::kMaxTensors));
  if (*n_kv > gguf::kMaxKeys)
    return InvalidArgument(where + ": metadata count " + std::to_string(*n_kv) + " exceeds the limit of " +
                           std::to_string(gguf::kMaxKeys));
  // Each metadata entry takes at least 13 bytes (key length, type, a one-byte value) and each tensor
  // info 25 (a named tensor without dims), so larger counts cannot be right for this file.
  if (*n_kv * 13 + *n_tensors * 25 > c.left())  // counts < 2^21: no overflow
    return InvalidArgument(where + ": " + std::to_string(*n_kv) + " metadata entries and " +
                           std::to_string(*n_tensors) + " tensors cannot fit in the " + std::to_string(c.left()) +
                           " bytes left of the file (truncated?)");
  return Status::Ok();
}

// Reads one value of `type` (not an array); what names it for messages.
Status SkipScalar(Cursor& c, uint32_t type, const std::string& what) {
  if (type == static_cast<uint32_t>(GgufType::kString)) {
    std::string_view s;
    return c.Str(&s, gguf::kMaxStringBytes, what);
  }
  return c.Skip(gguf::ScalarBytes(type), what);
}

Status ReadValue(Cursor& c, const std::string& where, gguf::Kv* kv) {
  const std::string what = "value of " + Quote(kv->key);
  uint32_t type = 0;
  TESSERA_RETURN_IF_ERROR(c.U32(&type, "type of " + Quote(kv->key)));
  if (!ValidValueType(type))
    return InvalidArgument(where + ": key " + Quote(kv->key) + " has unknown value type " + std::to_string(type));
  kv->type = static_cast<GgufType>(type);
  if (kv->type != GgufType::kArray) {
    kv->value = c.here();
    const uint64_t start = c.pos();
    TESSERA_RETURN_IF_ERROR(SkipScalar(c, type, what));
    kv->nbytes = c.pos() - start;
    return Status::Ok();
  }
  uint32_t elem = 0;
  TESSERA_RETURN_IF_ERROR(c.U32(&elem, "element type of " + Quote(kv->key)));
  if (!ValidValueType(elem))
    return InvalidArgument(where + ": array " + Quote(kv->key) + " has unknown element type " + std::to_string(elem));
  if (elem == static_cast<uint32_t>(GgufType::kArray))
    return InvalidArgument(where + ": array " + Quote(kv->key) +
                           " holds arrays; nested arrays are not supported (llama.cpp refuses them too)");
  kv->elem_type = static_cast<GgufType>(elem);
  TESSERA_RETURN_IF_ERROR(c.U64(&kv->count, "length of " + Quote(kv->key)));
  if (kv->count > gguf::kMaxArrayElems)
    return InvalidArgument(where + ": array " + Quote(kv->key) + " length " + std::to_string(kv->count) +
                           " exceeds the limit of " + std::to_string(gguf::kMaxArrayElems));
  kv->value = c.here();
  const uint64_t start = c.pos();
  if (kv->elem_type == GgufType::kString) {
    TESSERA_RETURN_IF_ERROR(c.Need(kv->count * 8, what));  // each string has an 8-byte length
    for (uint64_t i = 0; i < kv->count; ++i)
      if (!c.TrySkipString(gguf::kMaxStringBytes))
        TESSERA_RETURN_IF_ERROR(SkipScalar(c, elem, what + "[" + std::to_string(i) + "]"));
  } else {
    TESSERA_RETURN_IF_ERROR(c.Skip(kv->count * gguf::ScalarBytes(elem), what));  // count < 2^26: no overflow
  }
  kv->nbytes = c.pos() - start;
  return Status::Ok();
}

Status CheckMetadataSize(const Cursor& c, const std::string& where) {
  if (c.pos() <= gguf::kMaxMetadataBytes) return Status::Ok();
  return InvalidArgument(where + ": the header, metadata and tensor infos exceed the limit of " +
                         std::to_string(gguf::kMaxMetadataBytes) + " bytes");
}

}  // namespace

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string GgufFile::Impl::Where() const { return "GgufFile " + Quote(path); }

namespace {

Status ReadAlignment(GgufFile::Impl& f, const std::string& where) {
  auto it = f.keys.find(std::string_view(gguf::kAlignmentKey));
  if (it == f.keys.end()) return Status::Ok();
  const gguf::Kv& kv = f.kvs[it->second];
  if (kv.type != GgufType::kU32)
    return InvalidArgument(where + ": " + gguf::kAlignmentKey + " must be u32, got " +
                           gguf::TypeName(static_cast<uint32_t>(kv.type)));
  uint32_t a = 0;
  for (int i = 3; i >= 0; --i) a = (a << 8) | kv.value[i];
  if (a == 0 || (a & (a - 1)) != 0 || a > gguf::kMaxAlignment)
    return InvalidArgument(where + ": " + gguf::kAlignmentKey + " = " + std::to_string(a) +
                           " is not a power of two up to " + std::to_string(gguf::kMaxAlignment));
  f.alignment = a;
  return Status::Ok();
}

// The tensor info at the cursor: name, dims (reversed into shape), type, offset; checks what it
// can without the data section's position.
Status ReadTensorInfo(Cursor& c, const std::string& where, uint64_t index, GgufTensor* t, uint64_t* offset) {
  std::string_view name;
  TESSERA_RETURN_IF_ERROR(c.Str(&name, gguf::kMaxKeyBytes, "name of tensor " + std::to_string(index)));
  if (name.empty()) return InvalidArgument(where + ": tensor " + std::to_string(index) + " has an empty name");
  t->name = std::string(name);
  const std::string what = where + ": tensor " + Quote(name);
  uint32_t n_dims = 0;
  TESSERA_RETURN_IF_ERROR(c.U32(&n_dims, "dimension count of " + Quote(name)));
  if (n_dims > gguf::kMaxDims)
    return InvalidArgument(what + " has " + std::to_string(n_dims) + " dimensions (at most " +
                           std::to_string(gguf::kMaxDims) + ")");
  std::vector<int64_t> ne(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t v = 0;
    TESSERA_RETURN_IF_ERROR(c.U64(&v, "dimension " + std::to_string(d) + " of " + Quote(name)));
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return InvalidArgument(what + " has negative dimension ne[" + std::to_string(d) + "] = " +
                             std::to_string(static_cast<int64_t>(v)));
    ne[d] = static_cast<int64_t>(v);
  }
  t->shape.assign(ne.rbegin(), ne.rend());
  TESSERA_RETURN_IF_ERROR(c.U32(&t->ggml_type, "type of " + Quote(name)));
  TESSERA_RETURN_IF_ERROR(c.U64(offset, "data offset of " + Quote(name)));

  const gguf::GgmlType* type = gguf::FindGgmlType(t->ggml_type);
  if (type == nullptr)
    return InvalidArgument(what + " has unknown ggml type id " + std::to_string(t->ggml_type));
  if (!type->supported)
    return Unimplemented(what + " has ggml type " + type->name + " (id " + std::to_string(t->ggml_type) +
                         "), which Tessera does not run (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, "
                         "q8_0, q4_K, q5_K, q6_K)");
  t->dtype = type->dtype;
  t->quant = type->quant;
  return gguf::TensorBytes(*type, t->shape, what, &t->nbytes);
}

// The data of each tensor: aligned, inside the file, and not overlapping another.
Status PlaceTensors(GgufFile::Impl& f, const std::vector<uint64_t>& offsets, const std::string& where) {
  std::vector<size_t> order(f.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const uint64_t data_size = f.size - f.data_start;
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    GgufTensor& t = f.tensors[i];
    const uint64_t off = offsets[i];
    const std::string what = where + ": tensor " + Quote(t.name);
    if (off % f.alignment != 0)
      return InvalidArgument(what + " data offset " + std::to_string(off) + " is not a multiple of the alignment " +
                             std::to_string(f.alignment));
    if (off > data_size || t.nbytes > data_size - off)
      return InvalidArgument(what + " data [" + std::to_string(off) + ", +" + std::to_string(t.nbytes) +
                             ") runs past the " + std::to_string(data_size) + "-byte data section (truncated?)");
    // Kernels read f32 as float and every other type through 16-bit fields.
    const uint64_t elem_align = t.quant == QuantType::kNone && t.dtype == DType::kF32 ? 4 : 2;
    if ((f.data_start + off) % elem_align != 0)
      return InvalidArgument(what + " data at file offset " + std::to_string(f.data_start + off) +
                             " is not aligned to " + std::to_string(elem_align) + " bytes");
    t.data = t.nbytes == 0 ? nullptr : f.bytes + f.data_start + off;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
  const GgufTensor* prev = nullptr;  // the non-empty tensor reaching furthest so far
  uint64_t prev_end = 0;
  for (size_t i : order) {
    const GgufTensor& t = f.tensors[i];
    if (t.nbytes == 0) continue;
    if (prev != nullptr && offsets[i] < prev_end)
      return InvalidArgument(where + ": tensors " + Quote(prev->name) + " and " + Quote(t.name) +
                             " overlap in the data section (" + Quote(t.name) + " starts at " +
                             std::to_string(offsets[i]) + ", before " + std::to_string(prev_end) + ")");
    if (prev == nullptr || offsets[i] + t.nbytes > prev_end) prev = &t, prev_end = offsets[i] + t.nbytes;
  }
  return Status::Ok();
}

}  // namespace

Status GgufFile::Impl::Parse() {
  const std::string where = Where();
  Cursor c(bytes, size, where);
  uint64_t n_tensors = 0, n_kv = 0;
  TESSERA_RETURN_IF_ERROR(ReadHeader(c, where, &version, &n_tensors, &n_kv));
  kvs.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    gguf::Kv kv;
    TESSERA_RETURN_IF_ERROR(c.Str(&kv.key, gguf::kMaxKeyBytes, "key of metadata entry " + std::to_string(i)));
    if (kv.key.empty()) return InvalidArgument(where + ": metadata entry " + std::to_string(i) + " has an empty key");
    if (keys.count(kv.key)) return InvalidArgument(where + ": duplicate metadata key " + Quote(kv.key));
    TESSERA_RETURN_IF_ERROR(ReadValue(c, where, &kv));
    TESSERA_RETURN_IF_ERROR(CheckMetadataSize(c, where));
    keys.emplace(kv.key, kvs.size());
    kvs.push_back(kv);
  }
  TESSERA_RETURN_IF_ERROR(ReadAlignment(*this, where));
  tensors.reserve(n_tensors);
  std::vector<uint64_t> offsets;
  offsets.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    uint64_t offset = 0;
    TESSERA_RETURN_IF_ERROR(ReadTensorInfo(c, where, i, &t, &offset));
    TESSERA_RETURN_IF_ERROR(CheckMetadataSize(c, where));
    if (names.count(t.name)) return InvalidArgument(where + ": duplicate tensor name " + Quote(t.name));
    names.emplace(t.name, tensors.size());
    tensors.push_back(std::move(t));
    offsets.push_back(offset);
  }
  // The data section starts at the next multiple of the alignment (none is needed without tensors).
  data_start = c.pos();
  if (n_tensors > 0) {
    data_start = (c.pos() + alignment - 1) / alignment * alignment;  // pos < 2^30 + 1: no overflow
    if (data_start > size)
      return InvalidArgument(where + ": the data section would start at offset " + std::to_string(data_start) +
                             ", past the end of the " + std::to_string(size) + "-byte file (truncated?)");
  }
  return PlaceTensors(*this, offsets, where);
}

StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  StatusOr<MappedFile> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return Status(mapped.status().code(), "GgufFile::Open: " + mapped.status().message());
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mapping = std::move(mapped.value());
  impl->bytes = impl->mapping.data();
  impl->size = impl->mapping.size();
  TESSERA_RETURN_IF_ERROR(impl->Parse());
  return GgufFile(std::move(impl));
}

StatusOr<GgufFile> GgufFile::FromBytes(std::string_view bytes, const std::string& name) {
  auto impl = std::make_unique<Impl>();
  impl->path = name;
  if (!bytes.empty()) {
    impl->buffer.Resize(bytes.size());
    std::memcpy(impl->buffer.data(), bytes.data(), bytes.size());
  }
  impl->bytes = impl->buffer.as<uint8_t>();
  impl->size = bytes.size();
  TESSERA_RETURN_IF_ERROR(impl->Parse());
  return GgufFile(std::move(impl));
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

const std::string& GgufFile::path() const { return impl_->path; }
uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
const std::vector<GgufTensor>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensor* GgufFile::Find(std::string_view name) const {
  auto it = impl_->names.find(name);
  return it == impl_->names.end() ? nullptr : &impl_->tensors[it->second];
}

}  // namespace tessera::io
