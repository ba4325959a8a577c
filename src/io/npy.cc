#include "io/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

namespace tessera::io {
namespace {

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

}  // namespace

StatusOr<NpyArray> ParseNpy(const std::string& bytes, const std::string& name) {
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
  std::string dims = shape.substr(1, shape.size() - 2);
  std::stringstream ss(dims);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    char* end = nullptr;
    const long long d = std::strtoll(item.c_str(), &end, 10);
    if (d < 0 || d > (1LL << 40)) return InvalidArgument(who + "bad dimension '" + item + "'");
    a.shape.push_back(d);
  }
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

StatusOr<NpyArray> ReadNpy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument("ReadNpy: cannot open '" + path + "'");
  std::stringstream buf;
  buf << f.rdbuf();
  return ParseNpy(buf.str(), path);
}

}  // namespace tessera::io
