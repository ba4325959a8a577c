// GgufFile's metadata getters: typed reads of values that Parse already bounded and located.
#include <cstring>
#include <limits>

#include "io/gguf_format.h"

namespace tessera::io {
namespace {

using gguf::Kv;
using gguf::Quote;

template <typename T>
T Load(const uint8_t* p) {  // little-endian host (x86-64, aarch64): the file's byte order
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool IsInt(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16:
    case GgufType::kU32: case GgufType::kI32: case GgufType::kU64: case GgufType::kI64:
      return true;
    default:
      return false;
  }
}
bool IsFloat(GgufType t) { return t == GgufType::kF32 || t == GgufType::kF64; }

// An integer element as its sign and magnitude bits: *neg set for negative signed values.
uint64_t LoadInt(GgufType t, const uint8_t* p, bool* neg) {
  int64_t s = 0;
  switch (t) {
    case GgufType::kU8: *neg = false; return Load<uint8_t>(p);
    case GgufType::kU16: *neg = false; return Load<uint16_t>(p);
    case GgufType::kU32: *neg = false; return Load<uint32_t>(p);
    case GgufType::kU64: *neg = false; return Load<uint64_t>(p);
    case GgufType::kI8: s = Load<int8_t>(p); break;
    case GgufType::kI16: s = Load<int16_t>(p); break;
    case GgufType::kI32: s = Load<int32_t>(p); break;
    default: s = Load<int64_t>(p); break;
  }
  *neg = s < 0;
  return static_cast<uint64_t>(s);
}

double LoadFloat(GgufType t, const uint8_t* p) {
  return t == GgufType::kF32 ? static_cast<double>(Load<float>(p)) : Load<double>(p);
}

std::string_view LoadString(const uint8_t** p) {  // advances past the string
  const uint64_t n = Load<uint64_t>(*p);
  std::string_view s(reinterpret_cast<const char*>(*p + 8), n);
  *p += 8 + n;
  return s;
}

std::string Name(GgufType t) { return gguf::TypeName(static_cast<uint32_t>(t)); }

}  // namespace

StatusOr<const Kv*> GgufFile::Impl::Lookup(std::string_view key, const char* getter) const {
  auto it = keys.find(key);
  if (it == keys.end()) return InvalidArgument(Where() + ": " + getter + ": has no metadata key " + Quote(key));
  return &kvs[it->second];
}

namespace {

// The entry for key, checked to be a scalar accepted by `ok` (wanted names the types for messages).
template <typename Pred>
StatusOr<const Kv*> Scalar(const GgufFile::Impl& f, std::string_view key, const char* getter, Pred ok,
                           const char* wanted) {
  StatusOr<const Kv*> kv = f.Lookup(key, getter);
  if (!kv.ok()) return kv.status();
  const Kv& e = *kv.value();
  if (e.type == GgufType::kArray || !ok(e.type))
    return InvalidArgument(f.Where() + ": " + getter + ": key " + Quote(key) + " is " +
                           (e.type == GgufType::kArray ? "an array of " + Name(e.elem_type) : Name(e.type)) +
                           ", not " + wanted);
  return &e;
}

template <typename Pred>
StatusOr<const Kv*> Array(const GgufFile::Impl& f, std::string_view key, const char* getter, Pred ok,
                          const char* wanted) {
  StatusOr<const Kv*> kv = f.Lookup(key, getter);
  if (!kv.ok()) return kv.status();
  const Kv& e = *kv.value();
  if (e.type != GgufType::kArray || !ok(e.elem_type))
    return InvalidArgument(f.Where() + ": " + getter + ": key " + Quote(key) + " is " +
                           (e.type == GgufType::kArray ? "an array of " + Name(e.elem_type) : Name(e.type)) +
                           ", not an array of " + wanted);
  return &e;
}

std::string Index(uint64_t i) { return "[" + std::to_string(i) + "]"; }

}  // namespace

bool GgufFile::Has(std::string_view key) const { return impl_->keys.count(key) != 0; }

std::vector<std::string> GgufFile::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(impl_->kvs.size());
  for (const Kv& kv : impl_->kvs) keys.emplace_back(kv.key);
  return keys;
}

StatusOr<GgufType> GgufFile::TypeOf(std::string_view key) const {
  StatusOr<const Kv*> kv = impl_->Lookup(key, "TypeOf");
  if (!kv.ok()) return kv.status();
  return kv.value()->type;
}

StatusOr<GgufType> GgufFile::ArrayTypeOf(std::string_view key) const {
  StatusOr<const Kv*> kv = Array(*impl_, key, "ArrayTypeOf", [](GgufType) { return true; }, "any type");
  if (!kv.ok()) return kv.status();
  return kv.value()->elem_type;
}

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  StatusOr<const Kv*> kv = Scalar(*impl_, key, "GetString", [](GgufType t) { return t == GgufType::kString; },
                                  "a string");
  if (!kv.ok()) return kv.status();
  const uint8_t* p = kv.value()->value;
  return std::string(LoadString(&p));
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  StatusOr<const Kv*> kv = Scalar(*impl_, key, "GetInt", IsInt, "an integer");
  if (!kv.ok()) return kv.status();
  bool neg = false;
  const uint64_t v = LoadInt(kv.value()->type, kv.value()->value, &neg);
  if (!neg && v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return InvalidArgument(impl_->Where() + ": GetInt: key " + Quote(key) + " = " + std::to_string(v) +
                           " is out of the int64 range");
  return static_cast<int64_t>(v);
}

StatusOr<uint64_t> GgufFile::GetU64(std::string_view key) const {
  StatusOr<const Kv*> kv = Scalar(*impl_, key, "GetU64", IsInt, "an integer");
  if (!kv.ok()) return kv.status();
  bool neg = false;
  const uint64_t v = LoadInt(kv.value()->type, kv.value()->value, &neg);
  if (neg)
    return InvalidArgument(impl_->Where() + ": GetU64: key " + Quote(key) + " = " +
                           std::to_string(static_cast<int64_t>(v)) + " is negative");
  return v;
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  StatusOr<const Kv*> kv = Scalar(*impl_, key, "GetFloat", IsFloat, "f32 or f64");
  if (!kv.ok()) return kv.status();
  return LoadFloat(kv.value()->type, kv.value()->value);
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  StatusOr<const Kv*> kv = Scalar(*impl_, key, "GetBool", [](GgufType t) { return t == GgufType::kBool; }, "bool");
  if (!kv.ok()) return kv.status();
  return *kv.value()->value != 0;  // any nonzero byte is true, as llama.cpp reads it
}

StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  StatusOr<const Kv*> kv =
      Array(*impl_, key, "GetStringArray", [](GgufType t) { return t == GgufType::kString; }, "string");
  if (!kv.ok()) return kv.status();
  std::vector<std::string> out;
  out.reserve(kv.value()->count);
  const uint8_t* p = kv.value()->value;
  for (uint64_t i = 0; i < kv.value()->count; ++i) out.emplace_back(LoadString(&p));
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  StatusOr<const Kv*> kv = Array(*impl_, key, "GetIntArray", IsInt, "integers");
  if (!kv.ok()) return kv.status();
  const Kv& e = *kv.value();
  const uint64_t size = gguf::ScalarBytes(static_cast<uint32_t>(e.elem_type));
  std::vector<int64_t> out(e.count);
  for (uint64_t i = 0; i < e.count; ++i) {
    bool neg = false;
    const uint64_t v = LoadInt(e.elem_type, e.value + i * size, &neg);
    if (!neg && v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return InvalidArgument(impl_->Where() + ": GetIntArray: key " + Quote(key) + Index(i) + " = " +
                             std::to_string(v) + " is out of the int64 range");
    out[i] = static_cast<int64_t>(v);
  }
  return out;
}

StatusOr<std::vector<uint64_t>> GgufFile::GetU64Array(std::string_view key) const {
  StatusOr<const Kv*> kv = Array(*impl_, key, "GetU64Array", IsInt, "integers");
  if (!kv.ok()) return kv.status();
  const Kv& e = *kv.value();
  const uint64_t size = gguf::ScalarBytes(static_cast<uint32_t>(e.elem_type));
  std::vector<uint64_t> out(e.count);
  for (uint64_t i = 0; i < e.count; ++i) {
    bool neg = false;
    out[i] = LoadInt(e.elem_type, e.value + i * size, &neg);
    if (neg)
      return InvalidArgument(impl_->Where() + ": GetU64Array: key " + Quote(key) + Index(i) + " = " +
                             std::to_string(static_cast<int64_t>(out[i])) + " is negative");
  }
  return out;
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  StatusOr<const Kv*> kv = Array(*impl_, key, "GetFloatArray", IsFloat, "f32 or f64");
  if (!kv.ok()) return kv.status();
  const Kv& e = *kv.value();
  const uint64_t size = gguf::ScalarBytes(static_cast<uint32_t>(e.elem_type));
  std::vector<float> out(e.count);
  for (uint64_t i = 0; i < e.count; ++i) out[i] = static_cast<float>(LoadFloat(e.elem_type, e.value + i * size));
  return out;
}

StatusOr<std::vector<double>> GgufFile::GetF64Array(std::string_view key) const {
  StatusOr<const Kv*> kv = Array(*impl_, key, "GetF64Array", IsFloat, "f32 or f64");
  if (!kv.ok()) return kv.status();
  const Kv& e = *kv.value();
  const uint64_t size = gguf::ScalarBytes(static_cast<uint32_t>(e.elem_type));
  std::vector<double> out(e.count);
  for (uint64_t i = 0; i < e.count; ++i) out[i] = LoadFloat(e.elem_type, e.value + i * size);
  return out;
}

StatusOr<std::vector<bool>> GgufFile::GetBoolArray(std::string_view key) const {
  StatusOr<const Kv*> kv = Array(*impl_, key, "GetBoolArray", [](GgufType t) { return t == GgufType::kBool; }, "bool");
  if (!kv.ok()) return kv.status();
  std::vector<bool> out(kv.value()->count);
  for (uint64_t i = 0; i < kv.value()->count; ++i) out[i] = kv.value()->value[i] != 0;
  return out;
}

}  // namespace tessera::io
