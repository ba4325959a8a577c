// GgufWriter: metadata and tensor infos encoded in memory, tensor data filled straight into the
// mapped output file one tensor at a time, then renamed into place (docs/gguf.md).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <set>

#include "io/gguf_format.h"

namespace tessera::io {

struct GgufWriter::Entry {
  std::string key;
  GgufType type = GgufType::kU8;
  GgufType elem_type = GgufType::kU8;
  std::string value;  // encoded: for arrays, element type and count first
  std::string error;  // a value that does not fit its type, reported by Write
};

struct GgufWriter::Tensor {
  std::string name;
  std::vector<int64_t> shape;
  uint32_t ggml_type = 0;
  Fill fill;
};

namespace {

using gguf::Quote;

template <typename T>
void Put(std::string* out, T v) {  // little-endian host: the file's byte order
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

// Appends v as an integer of `type`; false when it does not fit (or type is not an integer type).
bool PutInt(std::string* out, GgufType type, int64_t v) {
  auto fits = [v](int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  switch (type) {
    case GgufType::kU8: if (!fits(0, UINT8_MAX)) return false; Put<uint8_t>(out, static_cast<uint8_t>(v)); return true;
    case GgufType::kI8: if (!fits(INT8_MIN, INT8_MAX)) return false; Put<int8_t>(out, static_cast<int8_t>(v)); return true;
    case GgufType::kU16: if (!fits(0, UINT16_MAX)) return false; Put<uint16_t>(out, static_cast<uint16_t>(v)); return true;
    case GgufType::kI16: if (!fits(INT16_MIN, INT16_MAX)) return false; Put<int16_t>(out, static_cast<int16_t>(v)); return true;
    case GgufType::kU32: if (!fits(0, UINT32_MAX)) return false; Put<uint32_t>(out, static_cast<uint32_t>(v)); return true;
    case GgufType::kI32: if (!fits(INT32_MIN, INT32_MAX)) return false; Put<int32_t>(out, static_cast<int32_t>(v)); return true;
    case GgufType::kU64: if (v < 0) return false; Put<uint64_t>(out, static_cast<uint64_t>(v)); return true;
    case GgufType::kI64: Put<int64_t>(out, v); return true;
    default: return false;
  }
}

std::string ArrayHead(GgufType elem, uint64_t count) {
  std::string s;
  Put<uint32_t>(&s, static_cast<uint32_t>(elem));
  Put<uint64_t>(&s, count);
  return s;
}

uint64_t PadTo(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

GgufWriter::GgufWriter() = default;
GgufWriter::~GgufWriter() = default;
GgufWriter::GgufWriter(GgufWriter&&) noexcept = default;
GgufWriter& GgufWriter::operator=(GgufWriter&&) noexcept = default;

void GgufWriter::SetString(const std::string& key, const std::string& value) {
  Entry e{key, GgufType::kString, GgufType::kU8, {}, {}};
  PutString(&e.value, value);
  Set(std::move(e));
}

void GgufWriter::SetU32(const std::string& key, uint32_t value) { SetInt(key, GgufType::kU32, value); }
void GgufWriter::SetI32(const std::string& key, int32_t value) { SetInt(key, GgufType::kI32, value); }

void GgufWriter::SetU64(const std::string& key, uint64_t value) {
  Entry e{key, GgufType::kU64, GgufType::kU8, {}, {}};
  Put<uint64_t>(&e.value, value);
  Set(std::move(e));
}

void GgufWriter::SetF32(const std::string& key, float value) {
  Entry e{key, GgufType::kF32, GgufType::kU8, {}, {}};
  Put<float>(&e.value, value);
  Set(std::move(e));
}

void GgufWriter::SetF64(const std::string& key, double value) {
  Entry e{key, GgufType::kF64, GgufType::kU8, {}, {}};
  Put<double>(&e.value, value);
  Set(std::move(e));
}

void GgufWriter::SetBool(const std::string& key, bool value) {
  Entry e{key, GgufType::kBool, GgufType::kU8, {}, {}};
  Put<uint8_t>(&e.value, value ? 1 : 0);
  Set(std::move(e));
}

void GgufWriter::SetInt(const std::string& key, GgufType type, int64_t value) {
  Entry e{key, type, GgufType::kU8, {}, {}};
  if (!PutInt(&e.value, type, value))
    e.error = "key " + Quote(key) + ": value " + std::to_string(value) + " does not fit " +
              gguf::TypeName(static_cast<uint32_t>(type));
  Set(std::move(e));
}

void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& values) {
  Entry e{key, GgufType::kArray, GgufType::kString, ArrayHead(GgufType::kString, values.size()), {}};
  for (const std::string& v : values) PutString(&e.value, v);
  Set(std::move(e));
}

void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& values) {
  Entry e{key, GgufType::kArray, GgufType::kI32, ArrayHead(GgufType::kI32, values.size()), {}};
  for (int32_t v : values) Put<int32_t>(&e.value, v);
  Set(std::move(e));
}

void GgufWriter::SetIntArray(const std::string& key, GgufType elem_type, const std::vector<int64_t>& values) {
  Entry e{key, GgufType::kArray, elem_type, ArrayHead(elem_type, values.size()), {}};
  for (size_t i = 0; i < values.size() && e.error.empty(); ++i)
    if (!PutInt(&e.value, elem_type, values[i]))
      e.error = "key " + Quote(key) + "[" + std::to_string(i) + "]: value " + std::to_string(values[i]) +
                " does not fit " + gguf::TypeName(static_cast<uint32_t>(elem_type));
  Set(std::move(e));
}

void GgufWriter::SetU64Array(const std::string& key, const std::vector<uint64_t>& values) {
  Entry e{key, GgufType::kArray, GgufType::kU64, ArrayHead(GgufType::kU64, values.size()), {}};
  for (uint64_t v : values) Put<uint64_t>(&e.value, v);
  Set(std::move(e));
}

void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& values) {
  Entry e{key, GgufType::kArray, GgufType::kF32, ArrayHead(GgufType::kF32, values.size()), {}};
  for (float v : values) Put<float>(&e.value, v);
  Set(std::move(e));
}

void GgufWriter::SetF64Array(const std::string& key, const std::vector<double>& values) {
  Entry e{key, GgufType::kArray, GgufType::kF64, ArrayHead(GgufType::kF64, values.size()), {}};
  for (double v : values) Put<double>(&e.value, v);
  Set(std::move(e));
}

void GgufWriter::SetBoolArray(const std::string& key, const std::vector<bool>& values) {
  Entry e{key, GgufType::kArray, GgufType::kBool, ArrayHead(GgufType::kBool, values.size()), {}};
  for (bool v : values) Put<uint8_t>(&e.value, v ? 1 : 0);
  Set(std::move(e));
}

void GgufWriter::Set(Entry e) {
  for (Entry& old : entries_)
    if (old.key == e.key) {
      old = std::move(e);
      return;
    }
  entries_.push_back(std::move(e));
}

void GgufWriter::AddTensor(const std::string& name, const std::vector<int64_t>& shape, DType dtype, Fill fill) {
  tensors_.push_back(Tensor{name, shape, gguf::GgmlTypeOf(dtype), std::move(fill)});
}

void GgufWriter::AddQuantTensor(const std::string& name, const std::vector<int64_t>& shape, QuantType quant,
                                Fill fill) {
  // kNone has no ggml id: an invalid id that Write refuses naming the tensor.
  const uint32_t id = quant == QuantType::kNone ? std::numeric_limits<uint32_t>::max() : gguf::GgmlTypeOf(quant);
  tensors_.push_back(Tensor{name, shape, id, std::move(fill)});
}

StatusOr<std::string> GgufWriter::EncodeHeader(uint32_t alignment, std::vector<uint64_t>* sizes) const {
  const std::string where = "GgufWriter::Write: ";
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > gguf::kMaxAlignment)
    return InvalidArgument(where + "alignment " + std::to_string(alignment) + " is not a power of two up to " +
                           std::to_string(gguf::kMaxAlignment));
  bool has_alignment_key = false;
  for (const Entry& e : entries_) {
    if (!e.error.empty()) return InvalidArgument(where + e.error);
    if (e.key.empty()) return InvalidArgument(where + "a metadata key is empty");
    if (e.key.size() > gguf::kMaxKeyBytes) return InvalidArgument(where + "key " + Quote(e.key) + " is too long");
    if (e.key != gguf::kAlignmentKey) continue;
    uint32_t a = 0;
    if (e.type == GgufType::kU32) std::memcpy(&a, e.value.data(), 4);
    if (e.type != GgufType::kU32 || a != alignment)
      return InvalidArgument(where + std::string(gguf::kAlignmentKey) + " must be the u32 alignment " +
                             std::to_string(alignment) + " passed to Write");
    has_alignment_key = true;
  }
  const bool add_alignment_key = !has_alignment_key && alignment != gguf::kDefaultAlignment;
  std::string h;
  Put<uint32_t>(&h, gguf::kMagic);
  Put<uint32_t>(&h, 3);
  Put<uint64_t>(&h, tensors_.size());
  Put<uint64_t>(&h, entries_.size() + (add_alignment_key ? 1 : 0));
  for (const Entry& e : entries_) {
    PutString(&h, e.key);
    Put<uint32_t>(&h, static_cast<uint32_t>(e.type));
    h += e.value;
  }
  if (add_alignment_key) {
    PutString(&h, gguf::kAlignmentKey);
    Put<uint32_t>(&h, static_cast<uint32_t>(GgufType::kU32));
    Put<uint32_t>(&h, alignment);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  sizes->clear();
  for (const Tensor& t : tensors_) {
    const std::string what = where + "tensor " + Quote(t.name);
    if (t.name.empty()) return InvalidArgument(where + "a tensor name is empty");
    if (t.name.size() >= gguf::kGgmlMaxName)
      return InvalidArgument(what + " name is " + std::to_string(t.name.size()) + " bytes; llama.cpp reads at most " +
                             std::to_string(gguf::kGgmlMaxName - 1));
    if (!names.insert(t.name).second) return InvalidArgument(where + "duplicate tensor name " + Quote(t.name));
    const gguf::GgmlType* type = gguf::FindGgmlType(t.ggml_type);
    if (type == nullptr || !type->supported) return InvalidArgument(what + " has no GGUF type (QuantType::kNone?)");
    if (t.shape.size() > gguf::kMaxDims)
      return InvalidArgument(what + " shape " + gguf::ShapeString(t.shape) + " has more than 4 dimensions");
    for (int64_t d : t.shape)
      if (d < 0) return InvalidArgument(what + " shape " + gguf::ShapeString(t.shape) + " has a negative dimension");
    uint64_t nbytes = 0;
    TESSERA_RETURN_IF_ERROR(gguf::TensorBytes(*type, t.shape, what, &nbytes));
    PutString(&h, t.name);
    Put<uint32_t>(&h, static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) Put<int64_t>(&h, *d);  // ne[0] innermost
    Put<uint32_t>(&h, t.ggml_type);
    Put<uint64_t>(&h, offset);
    sizes->push_back(nbytes);
    // nbytes < 2^63 and alignment <= 2^30, so the padding cannot wrap; the sum can.
    if (__builtin_add_overflow(offset, PadTo(nbytes, alignment), &offset) ||
        offset > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 2)
      return InvalidArgument(what + ": the tensors' total size overflows");
  }
  return h;
}

namespace {

// The temporary output file, removed unless Commit renamed it into place.
class TempFile {
 public:
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  Status Create(const std::string& path) {
    path_ = path;
    std::string tmpl = path + ".tmp.XXXXXX";
    fd_ = ::mkstemp(tmpl.data());
    if (fd_ < 0) return Errno("cannot create a temporary file beside");
    tmp_ = tmpl;
    if (::fchmod(fd_, 0644) != 0) return Errno("cannot set the mode of the temporary file beside");  // mkstemp's 0600
    return Status::Ok();
  }
  // Reserves the blocks up front, so a full disk fails here and never as SIGBUS in a mapped write.
  Status Allocate(uint64_t bytes) {
    if (bytes == 0) return Status::Ok();
    const int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
    if (err != 0) {
      errno = err;
      return Errno(("cannot allocate " + std::to_string(bytes) + " bytes for").c_str());
    }
    return Status::Ok();
  }
  Status WriteAt(const std::string& bytes, uint64_t offset) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Errno("cannot write");
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }
  // Maps [offset, offset + bytes) of the file writable and hands it to fill.
  Status FillAt(uint64_t offset, uint64_t bytes, const GgufWriter::Fill& fill, const std::string& tensor) {
    static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t base = offset / page * page;
    const size_t len = static_cast<size_t>(offset - base + bytes);
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(base));
    if (p == MAP_FAILED) return Errno(("cannot map tensor " + Quote(tensor) + " of").c_str());
    Status s;
    try {
      s = fill(static_cast<char*>(p) + (offset - base));
    } catch (const std::exception& e) {
      s = InvalidArgument(std::string("the fill threw: ") + e.what());
    }
    ::munmap(p, len);
    if (!s.ok()) return Status(s.code(), "GgufWriter::Write: tensor " + Quote(tensor) + ": " + s.message());
    return Status::Ok();
  }
  Status Commit() {
    if (::fsync(fd_) != 0) return Errno("cannot flush");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Errno("cannot close");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) return Errno("cannot rename the temporary file onto");
    tmp_.clear();
    return Status::Ok();
  }

 private:
  Status Errno(const char* what) const {
    const int err = errno;
    const std::string msg = std::string("GgufWriter::Write: ") + what + " '" + path_ + "': " + std::strerror(err);
    if (err == ENOSPC || err == EDQUOT || err == EFBIG || err == ENOMEM) return ResourceExhausted(msg);
    return InvalidArgument(msg);
  }

  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace

Status GgufWriter::Write(const std::string& path, uint32_t alignment) const {
  std::vector<uint64_t> sizes;
  StatusOr<std::string> header = EncodeHeader(alignment, &sizes);
  if (!header.ok()) return header.status();
  const uint64_t data_start = PadTo(header.value().size(), alignment);
  uint64_t total = data_start;
  for (uint64_t n : sizes) total += PadTo(n, alignment);
  TempFile out;
  TESSERA_RETURN_IF_ERROR(out.Create(path));
  TESSERA_RETURN_IF_ERROR(out.Allocate(total));  // zero-filled: the padding needs no writes
  TESSERA_RETURN_IF_ERROR(out.WriteAt(header.value(), 0));
  uint64_t offset = data_start;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (sizes[i] > 0) {
      if (!tensors_[i].fill)
        return InvalidArgument("GgufWriter::Write: tensor " + Quote(tensors_[i].name) + " has no fill function");
      TESSERA_RETURN_IF_ERROR(out.FillAt(offset, sizes[i], tensors_[i].fill, tensors_[i].name));
    }
    offset += PadTo(sizes[i], alignment);
  }
  return out.Commit();
}

}  // namespace tessera::io
