// libFuzzer target: one safetensors file image (io::SafetensorsFile::FromBytes, the parser that
// Open runs on a mapped file). Invariants on success, checked against an independent reading of
// the header: every tensor's data_offsets lie inside the data section and span numel * element
// size; Get() answers exactly for F32/BF16/F16 with an aligned, readable view of that size,
// GetIntegers() exactly for I64/I32 with the file's values; and
// re-writing the tensors with SafetensorsWriter gives a file that parses to the same tensors.
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "tessera/dtype.h"

namespace {

using tessera::StatusOr;
using tessera::io::SafetensorsFile;
using tessera::io::SafetensorsTensor;
using Json = nlohmann::json;

uint64_t ReadLe64(const std::string& b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[i]);
  return v;
}

// Sums the bytes so that ASan sees every byte of the view read.
unsigned Touch(const SafetensorsTensor& t) {
  unsigned sum = 0;
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
  return sum;
}

void CheckRoundTrip(const SafetensorsFile& f) {
  tessera::io::SafetensorsWriter w;
  for (const auto& [k, v] : f.metadata()) w.SetMetadata(k, v);
  for (const std::string& name : f.TensorNames()) {
    StatusOr<SafetensorsTensor> t = f.Get(name);
    if (!t.ok() || name.empty()) return;  // the writer stores only F32/BF16/F16 under non-empty names
    FUZZ_CHECK(w.Add(name, t.value().dtype, t.value().shape, t.value().data, t.value().nbytes).ok(),
               "the writer refused a tensor the reader accepted");
  }
  StatusOr<std::string> image = w.Serialize();
  FUZZ_CHECK(image.ok(), "Serialize failed");
  StatusOr<SafetensorsFile> g = SafetensorsFile::FromBytes(image.value(), "roundtrip");
  FUZZ_CHECK(g.ok(), "the writer's output does not parse");
  FUZZ_CHECK(g.value().num_tensors() == f.num_tensors(), "round-trip tensor count");
  FUZZ_CHECK(g.value().metadata() == f.metadata(), "round-trip metadata");
  for (const std::string& name : f.TensorNames()) {
    const SafetensorsTensor a = f.Get(name).value();
    StatusOr<SafetensorsTensor> b = g.value().Get(name);
    FUZZ_CHECK(b.ok() && b.value().dtype == a.dtype && b.value().shape == a.shape &&
                   b.value().nbytes == a.nbytes && (a.nbytes == 0 || std::memcmp(a.data, b.value().data, a.nbytes) == 0),
               "round-trip tensor differs");
  }
}

void Check(const std::string& bytes) {
  StatusOr<SafetensorsFile> r = SafetensorsFile::FromBytes(bytes, "fuzz.safetensors");
  if (!r.ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error must say what is wrong");
    return;
  }
  const SafetensorsFile& f = r.value();
  FUZZ_CHECK(bytes.size() >= 8, "accepted a file shorter than the length prefix");
  const uint64_t header_len = ReadLe64(bytes);
  FUZZ_CHECK(header_len <= bytes.size() - 8, "header runs past the file");
  const uint64_t data_size = bytes.size() - 8 - header_len;
  const Json header = Json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_len, nullptr, false);
  FUZZ_CHECK(header.is_object(), "accepted a header that is not a JSON object");
  FUZZ_CHECK(f.num_tensors() == header.size() - header.count("__metadata__"), "tensor count");
  unsigned sink = 0;
  for (const std::string& name : f.TensorNames()) {
    FUZZ_CHECK(name != "__metadata__" && header.contains(name), "a listed tensor is not in the header");
    const Json& e = header[name];
    const uint64_t begin = e["data_offsets"][0].get<uint64_t>(), end = e["data_offsets"][1].get<uint64_t>();
    FUZZ_CHECK(begin <= end && end <= data_size, "data_offsets outside the data section");
    const std::string& dtype = e["dtype"].get_ref<const std::string&>();
    FUZZ_CHECK(f.StoredDTypeName(name) == dtype, "stored dtype name");
    std::vector<int64_t> ishape;
    StatusOr<std::vector<int64_t>> ints = f.GetIntegers(name, &ishape);
    const size_t width = dtype == "I64" ? 8 : dtype == "I32" ? 4 : 0;
    FUZZ_CHECK(ints.ok() == (width != 0), "GetIntegers answers exactly for I64/I32");
    if (ints.ok()) {
      FUZZ_CHECK(ints.value().size() * width == end - begin, "GetIntegers count != data_offsets span / width");
      int64_t numel = 1;
      for (int64_t d : ishape) numel *= d;
      FUZZ_CHECK(static_cast<size_t>(numel) == ints.value().size(), "GetIntegers count != numel of its shape");
      for (size_t i = 0; i < ints.value().size(); ++i) {
        int64_t want = 0;
        if (width == 8) {
          std::memcpy(&want, bytes.data() + 8 + header_len + begin + 8 * i, 8);
        } else {
          int32_t v;
          std::memcpy(&v, bytes.data() + 8 + header_len + begin + 4 * i, 4);
          want = v;
        }
        FUZZ_CHECK(ints.value()[i] == want, "GetIntegers value differs from the file's bytes");
      }
    }
    StatusOr<SafetensorsTensor> t = f.Get(name);
    const bool supported = dtype == "F32" || dtype == "BF16" || dtype == "F16";
    FUZZ_CHECK(t.ok() == supported, "Get answers exactly for F32/BF16/F16");
    if (!t.ok()) continue;
    const SafetensorsTensor& v = t.value();
    FUZZ_CHECK(v.nbytes == end - begin, "view size != data_offsets span");
    FUZZ_CHECK(v.nbytes == static_cast<uint64_t>(v.numel()) * tessera::DTypeSize(v.dtype), "nbytes != numel * size");
    FUZZ_CHECK((v.data == nullptr) == (v.nbytes == 0), "null data iff empty");
    FUZZ_CHECK(reinterpret_cast<uintptr_t>(v.data) % tessera::DTypeSize(v.dtype) == 0, "misaligned view");
    FUZZ_CHECK(v.nbytes == 0 || std::memcmp(v.data, bytes.data() + 8 + header_len + begin, v.nbytes) == 0,
               "view differs from the file's bytes at data_offsets");
    sink += Touch(v);
  }
  FUZZ_CHECK(!f.Contains("__metadata__"), "__metadata__ listed as a tensor");
  CheckRoundTrip(f);
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("SafetensorsFile::FromBytes", [&] { Check(bytes); });
  return 0;
}
