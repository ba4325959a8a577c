#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "io/json_nesting.h"

namespace tessera::io {
namespace {

using Json = nlohmann::json;

// Element sizes of the safetensors dtype names this reader understands structurally. Sub-byte
// types (F4, F6_*) are absent: their byte sizes are not numel * element size.
struct StoredDType {
  const char* name;
  size_t size;
};
constexpr StoredDType kStoredDTypes[] = {
    {"F32", 4},  {"BF16", 2},    {"F16", 2},     {"F64", 8},     {"I64", 8}, {"U64", 8},
    {"I32", 4},  {"U32", 4},     {"I16", 2},     {"U16", 2},     {"I8", 1},  {"U8", 1},
    {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}, {"C64", 8},
};

bool LookupStoredDType(std::string_view name, size_t* size) {
  for (const StoredDType& d : kStoredDTypes)
    if (name == d.name) {
      *size = d.size;
      return true;
    }
  return false;
}

bool SupportedDType(std::string_view name, DType* out) {
  if (name == "F32") {
    *out = DType::kF32;
    return true;
  }
  if (name == "BF16") {
    *out = DType::kBF16;
    return true;
  }
  if (name == "F16") {
    *out = DType::kF16;
    return true;
  }
  return false;
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Quotes a name for messages, truncated so a hostile header cannot produce megabyte messages.
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 200;
  if (s.size() <= kMax) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kMax)) + "...' (" + std::to_string(s.size()) + " chars)";
}

// A scalar's JSON text, or the kind of a compound value (never the text of a hostile string).
std::string Describe(const Json& v) {
  if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
  return std::string("<") + v.type_name() + ">";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  StatusOr<MappedFile> mapped = MappedFile::Open(path);
  if (!mapped.ok()) return Status(mapped.status().code(), "SafetensorsFile::Open: " + mapped.status().message());
  SafetensorsFile file;
  file.name_ = path;
  file.mapping_ = std::move(mapped.value());
  file.bytes_ = file.mapping_.data();
  file.size_ = file.mapping_.size();
  TESSERA_RETURN_IF_ERROR(file.Parse());
  return file;
}

StatusOr<SafetensorsFile> SafetensorsFile::FromBytes(std::string_view bytes, std::string name) {
  SafetensorsFile file;
  file.name_ = std::move(name);
  if (!bytes.empty()) {
    file.buffer_.Resize(bytes.size());
    std::memcpy(file.buffer_.data(), bytes.data(), bytes.size());
  }
  file.bytes_ = file.buffer_.as<uint8_t>();
  file.size_ = bytes.size();
  TESSERA_RETURN_IF_ERROR(file.Parse());
  return file;
}

Status SafetensorsFile::ParseHeader(const std::string& where, Json* header) {
  if (size_ < 8)
    return InvalidArgument(where + ": file is " + std::to_string(size_) +
                           " bytes, shorter than the 8-byte header length");
  const uint64_t header_len = ReadLe64(bytes_);
  if (header_len > kMaxHeaderBytes)
    return InvalidArgument(where + ": header length " + std::to_string(header_len) + " exceeds the limit of " +
                           std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > size_ - 8)
    return InvalidArgument(where + ": header length " + std::to_string(header_len) + " runs past the end of the " +
                           std::to_string(size_) + "-byte file (truncated?)");
  data_start_ = 8 + header_len;
  const char* hb = reinterpret_cast<const char*>(bytes_ + 8);
  TESSERA_RETURN_IF_ERROR(CheckJsonNesting(std::string_view(hb, header_len), where));
  try {
    *header = Json::parse(hb, hb + header_len, /*cb=*/nullptr, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {  // parse does not throw with allow_exceptions=false; belt and braces
    return InvalidArgument(where + ": header is not valid JSON: " + e.what());
  }
  if (header->is_discarded()) return InvalidArgument(where + ": header is not valid JSON");
  if (!header->is_object())
    return InvalidArgument(where + ": header must be a JSON object, got " + std::string(header->type_name()));
  return Status::Ok();
}

Status SafetensorsFile::ParseMetadata(const std::string& where, const Json& value) {
  if (!value.is_object())
    return InvalidArgument(where + ": __metadata__ must be an object, got " + std::string(value.type_name()));
  for (auto m = value.begin(); m != value.end(); ++m) {
    if (!m.value().is_string())
      return InvalidArgument(where + ": __metadata__ value of " + Quote(m.key()) + " must be a string, got " +
                             std::string(m.value().type_name()));
    metadata_[m.key()] = m.value().get_ref<const std::string&>();
  }
  return Status::Ok();
}

namespace {

// The entry's shape into *shape and its byte count (elem bytes per element) into *nbytes.
Status ParseShape(const std::string& what, const Json& value, const std::string& dtype_name, size_t elem,
                  std::vector<int64_t>* shape, uint64_t* nbytes) {
  auto sh = value.find("shape");
  if (sh == value.end() || !sh->is_array()) return InvalidArgument(what + ": missing or non-array \"shape\"");
  constexpr size_t kMaxRank = SafetensorsFile::kMaxRank;
  if (sh->size() > kMaxRank)
    return InvalidArgument(what + ": rank " + std::to_string(sh->size()) + " exceeds " + std::to_string(kMaxRank));
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t d = 0; d < sh->size(); ++d) {
    const Json& dim = (*sh)[d];
    if (!dim.is_number_unsigned())
      return InvalidArgument(what + ": shape[" + std::to_string(d) + "] = " + Describe(dim) +
                             " is not a non-negative integer");
    const uint64_t v = dim.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return InvalidArgument(what + ": shape[" + std::to_string(d) + "] = " + std::to_string(v) + " is too large");
    shape->push_back(static_cast<int64_t>(v));
    overflow = overflow || __builtin_mul_overflow(numel, v, &numel);
  }
  // A zero dimension makes the product 0 whatever overflowed before it.
  if (std::find(shape->begin(), shape->end(), 0) != shape->end()) numel = 0, overflow = false;
  if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(elem), nbytes) ||
      *nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return InvalidArgument(what + ": shape " + ShapeString(*shape) + " of " + dtype_name +
                           " overflows the byte count");
  return Status::Ok();
}

}  // namespace

Status SafetensorsFile::ParseEntry(const std::string& what, const Json& value, Entry* e) const {
  if (!value.is_object())
    return InvalidArgument(what + ": entry must be an object, got " + std::string(value.type_name()));
  auto dt = value.find("dtype");
  if (dt == value.end() || !dt->is_string()) return InvalidArgument(what + ": missing or non-string \"dtype\"");
  e->dtype_name = dt->get_ref<const std::string&>();
  size_t elem = 0;
  if (!LookupStoredDType(e->dtype_name, &elem))
    return InvalidArgument(what + ": unsupported dtype " + Quote(e->dtype_name) + " (supported: F32, BF16, F16)");
  e->supported = SupportedDType(e->dtype_name, &e->dtype);
  uint64_t nbytes = 0;
  TESSERA_RETURN_IF_ERROR(ParseShape(what, value, e->dtype_name, elem, &e->shape, &nbytes));
  auto off = value.find("data_offsets");
  if (off == value.end() || !off->is_array() || off->size() != 2)
    return InvalidArgument(what + ": \"data_offsets\" must be an array [begin, end]");
  if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
    return InvalidArgument(what + ": data_offsets [" + Describe((*off)[0]) + ", " + Describe((*off)[1]) +
                           "] must be non-negative integers");
  e->begin = (*off)[0].get<uint64_t>();
  e->end = (*off)[1].get<uint64_t>();
  const uint64_t data_size = size_ - data_start_;
  const std::string range = "data_offsets [" + std::to_string(e->begin) + ", " + std::to_string(e->end) + "]";
  if (e->begin > e->end) return InvalidArgument(what + ": " + range + " has begin > end");
  if (e->end > data_size)
    return InvalidArgument(what + ": " + range + " runs past the " + std::to_string(data_size) +
                           "-byte data section (truncated file?)");
  if (e->end - e->begin != nbytes)
    return InvalidArgument(what + ": " + range + " spans " + std::to_string(e->end - e->begin) + " bytes but shape " +
                           ShapeString(e->shape) + " of " + e->dtype_name + " needs " + std::to_string(nbytes));
  if (nbytes > 0 && (data_start_ + e->begin) % elem != 0)
    return InvalidArgument(what + ": data at file offset " + std::to_string(data_start_ + e->begin) +
                           " is not aligned to its " + std::to_string(elem) +
                           "-byte element size (rewrite the file with a current safetensors writer)");
  return Status::Ok();
}

Status SafetensorsFile::CheckNoOverlap(const std::string& where) const {
  const Entry* prev = nullptr;  // the non-empty tensor reaching furthest so far
  for (const Entry& e : entries_) {
    if (e.begin == e.end) continue;
    if (prev != nullptr && e.begin < prev->end)
      return InvalidArgument(where + ": tensors " + Quote(prev->name) + " [" + std::to_string(prev->begin) + ", " +
                             std::to_string(prev->end) + "] and " + Quote(e.name) + " [" + std::to_string(e.begin) +
                             ", " + std::to_string(e.end) + "] overlap");
    if (prev == nullptr || e.end > prev->end) prev = &e;
  }
  return Status::Ok();
}

Status SafetensorsFile::Parse() {
  const std::string where = "SafetensorsFile: " + Quote(name_);
  Json header;
  TESSERA_RETURN_IF_ERROR(ParseHeader(where, &header));
  entries_.clear();
  entries_.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      TESSERA_RETURN_IF_ERROR(ParseMetadata(where, it.value()));
      continue;
    }
    Entry e;
    e.name = it.key();
    TESSERA_RETURN_IF_ERROR(ParseEntry(where + ": tensor " + Quote(it.key()), it.value(), &e));
    entries_.push_back(std::move(e));
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  TESSERA_RETURN_IF_ERROR(CheckNoOverlap(where));
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].name, i);
  return Status::Ok();
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const Entry& e : entries_) names.push_back(e.name);
  return names;
}

std::string_view SafetensorsFile::StoredDTypeName(std::string_view tensor) const {
  auto it = index_.find(tensor);
  return it == index_.end() ? std::string_view() : std::string_view(entries_[it->second].dtype_name);
}

StatusOr<SafetensorsTensor> SafetensorsFile::Get(std::string_view tensor) const {
  auto it = index_.find(tensor);
  if (it == index_.end())
    return InvalidArgument("SafetensorsFile::Get: no tensor " + Quote(tensor) + " in " + Quote(name_) + " (" +
                           std::to_string(entries_.size()) + " tensors)");
  const Entry& e = entries_[it->second];
  if (!e.supported)
    return Unimplemented("SafetensorsFile::Get: tensor " + Quote(tensor) + " in " + Quote(name_) +
                         " has unsupported dtype " + e.dtype_name + " (supported: F32, BF16, F16)");
  SafetensorsTensor t;
  t.dtype = e.dtype;
  t.shape = e.shape;
  t.nbytes = static_cast<size_t>(e.end - e.begin);
  t.data = t.nbytes ? bytes_ + data_start_ + e.begin : nullptr;
  return t;
}

StatusOr<std::vector<int64_t>> SafetensorsFile::GetIntegers(std::string_view tensor, std::vector<int64_t>* shape) const {
  auto it = index_.find(tensor);
  if (it == index_.end())
    return InvalidArgument("SafetensorsFile::GetIntegers: no tensor " + Quote(tensor) + " in " + Quote(name_));
  const Entry& e = entries_[it->second];
  const size_t width = e.dtype_name == "I64" ? 8 : e.dtype_name == "I32" ? 4 : 0;
  if (width == 0)
    return Unimplemented("SafetensorsFile::GetIntegers: tensor " + Quote(tensor) + " in " + Quote(name_) +
                         " has dtype " + e.dtype_name + " (integers: I64, I32)");
  // Parse checked end - begin == numel * width.
  const size_t n = static_cast<size_t>(e.end - e.begin) / width;
  std::vector<int64_t> out(n);
  const uint8_t* p = bytes_ + data_start_ + e.begin;
  for (size_t i = 0; i < n; ++i) {
    if (width == 8) {
      std::memcpy(&out[i], p + 8 * i, 8);
    } else {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
    }
  }
  if (shape) *shape = e.shape;
  return out;
}

}  // namespace tessera::io
