// DecodeDataUrl: images arrive inline, as RFC 2397 data URLs with a base64 (RFC 4648) payload.
#include <array>

#include "server/api_request.h"

namespace tessera::server {
namespace {

// Value of each base64 alphabet byte; -1 for bytes outside it.
constexpr std::array<int8_t, 256> kBase64 = [] {
  std::array<int8_t, 256> t{};
  t.fill(-1);
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
  return t;
}();

// Strict base64: the standard alphabet, '=' padding only at the end (optional), nothing else.
bool DecodeBase64(std::string_view in, std::string* out) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return false;
  out->clear();
  out->reserve(in.size() / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = kBase64[static_cast<uint8_t>(c)];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return true;
}

}  // namespace

ApiError DecodeDataUrl(std::string_view url, const std::string& param, int64_t max_bytes, std::string* out) {
  if (url.substr(0, 5) != "data:")
    return BadRequest(param, "only base64 data: URLs are accepted for images (the server fetches nothing), got '" +
                                 std::string(url.substr(0, 32)) + (url.size() > 32 ? "...'" : "'"));
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) return BadRequest(param, "the data URL has no ',' before its payload");
  const std::string_view meta = url.substr(5, comma - 5);
  if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64")
    return BadRequest(param, "the data URL must be base64 (data:image/png;base64,...)");
  const std::string_view type = meta.substr(0, meta.size() - 7);
  if (!type.empty() && type.substr(0, 6) != "image/")
    return BadRequest(param, "the data URL's media type must be image/*, got '" + std::string(type.substr(0, 64)) + "'");
  const std::string_view payload = url.substr(comma + 1);
  // 3 bytes per 4 characters: refuse an oversized image before decoding it.
  if (static_cast<int64_t>(payload.size() / 4) * 3 > max_bytes)
    return BadRequest(param, "the image is larger than " + std::to_string(max_bytes) + " bytes");
  if (!DecodeBase64(payload, out)) return BadRequest(param, "the data URL's payload is not valid base64");
  if (out->empty()) return BadRequest(param, "the data URL's payload is empty");
  return {};
}

}  // namespace tessera::server
