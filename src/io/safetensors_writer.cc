#include "io/safetensors_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tessera::io {
namespace {

using Json = nlohmann::ordered_json;

const char* StoredName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

}  // namespace

Status SafetensorsWriter::Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data,
                              size_t nbytes) {
  if (name.empty() || name == "__metadata__")
    return InvalidArgument("SafetensorsWriter::Add: invalid tensor name '" + name + "'");
  if (tensors_.count(name)) return InvalidArgument("SafetensorsWriter::Add: duplicate tensor '" + name + "'");
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return InvalidArgument("SafetensorsWriter::Add: tensor '" + name + "' has negative dim " + std::to_string(d));
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
      return InvalidArgument("SafetensorsWriter::Add: tensor '" + name + "' shape overflows");
  }
  uint64_t expected = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(dtype)), &expected) || expected != nbytes)
    return InvalidArgument("SafetensorsWriter::Add: tensor '" + name + "' has " + std::to_string(nbytes) +
                           " bytes, its shape needs " + std::to_string(expected));
  Pending p{dtype, shape, std::vector<uint8_t>(nbytes)};
  if (nbytes) std::memcpy(p.bytes.data(), data, nbytes);
  tensors_.emplace(name, std::move(p));
  return Status::Ok();
}

Status SafetensorsWriter::AddF32(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                 const std::vector<float>& values) {
  std::vector<uint8_t> encoded(values.size() * DTypeSize(dtype));
  EncodeFromF32(dtype, values.data(), encoded.data(), values.size());
  return Add(name, dtype, shape, encoded.data(), encoded.size());
}

StatusOr<std::string> SafetensorsWriter::Serialize() const {
  std::vector<const std::pair<const std::string, Pending>*> order;
  for (const auto& kv : tensors_) order.push_back(&kv);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return DTypeSize(a->second.dtype) > DTypeSize(b->second.dtype);  // names already sorted
  });
  Json header = Json::object();
  if (!metadata_.empty()) {
    Json meta = Json::object();
    for (const auto& [k, v] : metadata_) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (const auto* kv : order) {
    const Pending& p = kv->second;
    header[kv->first] =
        Json{{"dtype", StoredName(p.dtype)}, {"shape", p.shape}, {"data_offsets", {offset, offset + p.bytes.size()}}};
    offset += p.bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("SafetensorsWriter::Serialize: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + offset);
  for (const auto* kv : order)
    out.append(reinterpret_cast<const char*>(kv->second.bytes.data()), kv->second.bytes.size());
  return out;
}

Status SafetensorsWriter::WriteFile(const std::string& path) const {
  StatusOr<std::string> bytes = Serialize();
  if (!bytes.ok()) return bytes.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument("SafetensorsWriter::WriteFile: cannot create '" + path + "'");
  out.write(bytes.value().data(), static_cast<std::streamsize>(bytes.value().size()));
  out.close();
  if (!out) return InvalidArgument("SafetensorsWriter::WriteFile: write to '" + path + "' failed");
  return Status::Ok();
}

}  // namespace tessera::io
