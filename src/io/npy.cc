#include "tessera/npy.h"

#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "io/input_file.h"

namespace tessera::io {
namespace {

constexpr uint64_t kMaxNpyBytes = uint64_t{1} << 33;  // far above any image-embedding array

// Value of `key` in the header dict text ("'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }").
bool Field(const std::string& h, const std::string& key, std::string* out) {
  const size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) return false;
  size_t v = h.find(':', k);
  if (v == std::string::npos) return false;
  ++v;
  while (v < h.size() && h[v] == ' ') ++v;
  size_t end = v;
  if (h[v] == '(') {
    end = h.find(')', v);
    if (end == std::string::npos) return false;
    ++end;
  } else {
    while (end < h.size() && h[end] != ',' && h[end] != '}') ++end;
  }
  *out = h.substr(v, end - v);
  return true;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(' ') + 1 - b);
}

// "(9, 64)", "(5,)" or "()" -> dims; every item must be plain decimal digits (spaces around
// them allowed), so "(abc, 64)" or "(9, 64x)" is an error rather than 0 rows or (9, 64).
Status ParseShape(const std::string& shape, const std::string& who, std::vector<int64_t>* dims) {
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')')
    return InvalidArgument(who + "shape '" + shape + "' is not a tuple");
  const std::string inner = shape.substr(1, shape.size() - 2);
  if (Trim(inner).empty()) return Status::Ok();  // "()": rank 0
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t comma = inner.find(',', start);
    items.push_back(Trim(inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (items.size() == 2 && items[1].empty()) items.pop_back();  // "(5,)": a 1-tuple
  for (const std::string& item : items) {
    if (item.empty() || item.size() > 13 || item.find_first_not_of("0123456789") != std::string::npos)
      return InvalidArgument(who + "shape '" + shape + "' has dimension '" + item +
                             "', not a non-negative integer");
    const long long d = std::stoll(item);  // at most 13 digits: cannot overflow
    if (d > (1LL << 40)) return InvalidArgument(who + "shape '" + shape + "' has dimension " + item + " > 2^40");
    dims->push_back(d);
  }
  return Status::Ok();
}

StatusOr<NpyArray> ParseNpyUnchecked(const std::string& bytes, const std::string& name) {
  const std::string who = "ReadNpy: " + name + ": ";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    return InvalidArgument(who + "not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return InvalidArgument(who + "truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  } else {
    return InvalidArgument(who + "unsupported .npy version " + std::to_string(major));
  }
  if (header_len > bytes.size() - offset) return InvalidArgument(who + "header length " + std::to_string(header_len) + " exceeds the file");
  const std::string h = bytes.substr(offset, header_len);
  std::string descr, fortran, shape;
  if (!Field(h, "descr", &descr) || !Field(h, "fortran_order", &fortran) || !Field(h, "shape", &shape))
    return InvalidArgument(who + "header lacks descr, fortran_order or shape");
  if (descr != "'<f4'") return InvalidArgument(who + "dtype " + descr + " is not float32 ('<f4')");
  if (fortran != "False") return InvalidArgument(who + "Fortran-order arrays are not supported");
  NpyArray a;
  TESSERA_RETURN_IF_ERROR(ParseShape(shape, who, &a.shape));
  if (a.shape.empty() || a.shape.size() > 2) return InvalidArgument(who + "rank " + std::to_string(a.shape.size()) + " is not 1 or 2");
  int64_t n = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && n > (int64_t{1} << 40) / d) return InvalidArgument(who + "shape too large");
    n *= d;
  }
  const size_t data_off = offset + header_len;
  if (bytes.size() - data_off != static_cast<size_t>(n) * 4)
    return InvalidArgument(who + "holds " + std::to_string(bytes.size() - data_off) + " data bytes, shape needs " +
                           std::to_string(n * 4));
  a.data.resize(n);
  // An empty vector's data() may be null, and memcpy from/to null is undefined even for 0 bytes.
  if (n > 0) std::memcpy(a.data.data(), bytes.data() + data_off, n * 4);
  return a;
}

}  // namespace

StatusOr<NpyArray> ParseNpy(const std::string& bytes, const std::string& name) {
  try {
    return ParseNpyUnchecked(bytes, name);
  } catch (const std::exception& e) {  // nothing should throw (allocation aside); never cross the API
    return InvalidArgument("ReadNpy: " + name + ": " + e.what());
  }
}

StatusOr<NpyArray> ReadNpy(const std::string& path) {
  // Regular files only: a FIFO named by --image-embeds must not block the reader.
  StatusOr<std::string> bytes = ReadInputFile(path, ".npy file", kMaxNpyBytes);
  if (!bytes.ok()) return Status(bytes.status().code(), "ReadNpy: " + bytes.status().message());
  return ParseNpy(bytes.value(), path);
}

}  // namespace tessera::io
