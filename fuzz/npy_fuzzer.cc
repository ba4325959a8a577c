// libFuzzer target: the .npy reader (io::ParseNpy, what ReadNpy runs on a file's bytes).
// Invariants on success: rank 1 or 2, the data holds exactly numel floats equal to the file's
// trailing bytes, and a canonical re-encoding of the array parses back to the same array.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "tessera/npy.h"

namespace {

using tessera::io::NpyArray;

// The array as numpy writes it (version 1.0, header padded to a multiple of 64).
std::string Encode(const NpyArray& a) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < a.shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(a.shape[i]);
  dict += a.shape.size() == 1 ? ",), }" : "), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size() * sizeof(float));
  return out;
}

void Check(const std::string& bytes) {
  tessera::StatusOr<NpyArray> r = tessera::io::ParseNpy(bytes, "fuzz.npy");
  if (!r.ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error must say what is wrong");
    return;
  }
  const NpyArray& a = r.value();
  FUZZ_CHECK(a.shape.size() == 1 || a.shape.size() == 2, "rank");
  int64_t n = 1;
  for (int64_t d : a.shape) {
    FUZZ_CHECK(d >= 0, "negative dimension");
    n *= d;
  }
  FUZZ_CHECK(static_cast<size_t>(n) == a.data.size(), "numel != data size");
  const size_t nbytes = a.data.size() * sizeof(float);
  FUZZ_CHECK(nbytes <= bytes.size(), "more data than bytes");
  FUZZ_CHECK(nbytes == 0 || std::memcmp(a.data.data(), bytes.data() + bytes.size() - nbytes, nbytes) == 0,
             "data differs from the file's trailing bytes");

  tessera::StatusOr<NpyArray> back = tessera::io::ParseNpy(Encode(a), "roundtrip.npy");
  FUZZ_CHECK(back.ok(), "the canonical encoding of an accepted array must parse");
  FUZZ_CHECK(back.value().shape == a.shape, "round-trip shape");
  FUZZ_CHECK(nbytes == 0 || std::memcmp(back.value().data.data(), a.data.data(), nbytes) == 0, "round-trip data");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("ParseNpy", [&] { Check(bytes); });
  return 0;
}
