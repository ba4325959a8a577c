// The EXIF orientation tag and the eight transposes it names. The EXIF block is a TIFF structure:
// a byte-order mark, the offset of the first directory, then 12-byte entries (tag, type, count,
// value); orientation is tag 0x0112 in that first directory. Every read is bounds-checked: the
// block is untrusted.
#include <cstdint>
#include <vector>

#include "image/decoders.h"

namespace tessera::image {
namespace {

struct TiffReader {
  const std::vector<uint8_t>& b;
  bool big_endian;
  bool U16(size_t at, uint32_t* v) const {
    if (at + 2 > b.size()) return false;
    *v = big_endian ? (b[at] << 8) | b[at + 1] : b[at] | (b[at + 1] << 8);
    return true;
  }
  bool U32(size_t at, uint32_t* v) const {
    uint32_t hi = 0, lo = 0;
    if (!U16(at, big_endian ? &hi : &lo) || !U16(at + 2, big_endian ? &lo : &hi)) return false;
    *v = (hi << 16) | lo;
    return true;
  }
};

}  // namespace

int ExifOrientation(const std::vector<uint8_t>& tiff) {
  if (tiff.size() < 8) return 1;
  const bool le = tiff[0] == 'I' && tiff[1] == 'I', be = tiff[0] == 'M' && tiff[1] == 'M';
  if (!le && !be) return 1;
  const TiffReader r{tiff, be};
  uint32_t ifd = 0, count = 0;
  if (!r.U32(4, &ifd) || !r.U16(ifd, &count)) return 1;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t entry = static_cast<size_t>(ifd) + 2 + 12 * static_cast<size_t>(i);
    uint32_t tag = 0, type = 0, value = 0;
    if (!r.U16(entry, &tag) || !r.U16(entry + 2, &type)) return 1;
    if (tag != 0x0112) continue;
    if (type == 3) {  // SHORT, left-justified in the value field
      if (!r.U16(entry + 8, &value)) return 1;
    } else if (type == 4) {  // LONG
      if (!r.U32(entry + 8, &value)) return 1;
    } else {
      return 1;
    }
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

// Output pixel (x, y) of the upright image is input pixel map(x, y). Orientations 5..8 swap the
// axes; 2, 4, 5, 7 mirror.
Image ApplyOrientation(const Image& in, int orientation) {
  const bool swap = orientation >= 5;
  Image out;
  out.height = swap ? in.width : in.height;
  out.width = swap ? in.height : in.width;
  out.rgb.resize(in.rgb.size());
  const int64_t H = in.height, W = in.width;
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sx = x, sy = y;
      switch (orientation) {
        case 2: sx = W - 1 - x; break;                     // mirror left-right
        case 3: sx = W - 1 - x; sy = H - 1 - y; break;     // rotate 180
        case 4: sy = H - 1 - y; break;                     // mirror top-bottom
        case 5: sx = y; sy = x; break;                     // transpose
        case 6: sx = y; sy = H - 1 - x; break;             // rotate 90 clockwise
        case 7: sx = W - 1 - y; sy = H - 1 - x; break;     // transverse
        case 8: sx = W - 1 - y; sy = x; break;             // rotate 90 counter-clockwise
        default: break;
      }
      const uint8_t* s = &in.rgb[(sy * W + sx) * 3];
      uint8_t* d = &out.rgb[(y * out.width + x) * 3];
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  return out;
}

}  // namespace tessera::image
