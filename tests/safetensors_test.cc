// Safetensors reader, writer and checkpoint: round trips, every truncation, hostile headers
// (lengths, JSON, offsets, dtypes, shapes), a seeded mutation fuzz loop (run it under ASan), and
// sharded checkpoints with language-model prefix detection.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "io/safetensors_checkpoint.h"
#include "io/safetensors_writer.h"
#include "temp_dir.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;

std::string Le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file image with the given header text (no padding) and `data_bytes` zero bytes of data.
std::string RawFile(const std::string& header, size_t data_bytes) {
  return Le64(header.size()) + header + std::string(data_bytes, '\0');
}

// Header text padded to a multiple of 8 so 8-byte-aligned offsets stay aligned in the file.
std::string Padded(std::string header) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

std::string SmallFileImage() {
  SafetensorsWriter w;
  EXPECT_TRUE(w.AddF32("a", DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6}).ok());
  EXPECT_TRUE(w.AddF32("b", DType::kBF16, {3}, {0.5f, -1.0f, 2.0f}).ok());
  EXPECT_TRUE(w.AddF32("c", DType::kF16, {1, 1}, {3.0f}).ok());
  w.SetMetadata("format", "pt");
  StatusOr<std::string> bytes = w.Serialize();
  EXPECT_TRUE(bytes.ok());
  return bytes.value();
}

using testing::TempDir;

using testing::WriteText;

TEST(SafetensorsTest, RoundTripThroughFileAndBytes) {
  TempDir dir;
  SafetensorsWriter w;
  const std::vector<float> af = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -8.5f};
  ASSERT_TRUE(w.AddF32("model.embed_tokens.weight", DType::kBF16, {3, 2}, af).ok());
  ASSERT_TRUE(w.AddF32("odd_bf16", DType::kBF16, {3}, {1, 2, 3}).ok());  // odd count: F32 must still align
  ASSERT_TRUE(w.AddF32("f32", DType::kF32, {2, 3}, af).ok());
  ASSERT_TRUE(w.AddF32("f16", DType::kF16, {6}, af).ok());
  ASSERT_TRUE(w.AddF32("scalar", DType::kF32, {}, {42.0f}).ok());
  ASSERT_TRUE(w.AddF32("empty", DType::kF16, {0, 4}, {}).ok());
  w.SetMetadata("format", "pt");
  ASSERT_TRUE(w.WriteFile(dir.File("x.safetensors")).ok());

  StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.File("x.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value().num_tensors(), 6u);
  EXPECT_EQ(f.value().metadata().at("format"), "pt");
  EXPECT_EQ(f.value().StoredDTypeName("f16"), "F16");

  auto expect_values = [&](const char* name, DType dt, std::vector<int64_t> shape, const std::vector<float>& want) {
    StatusOr<SafetensorsTensor> t = f.value().Get(name);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(t.value().dtype, dt) << name;
    EXPECT_EQ(t.value().shape, shape) << name;
    EXPECT_EQ(t.value().numel(), static_cast<int64_t>(want.size())) << name;
    EXPECT_EQ(t.value().nbytes, want.size() * DTypeSize(dt)) << name;
    if (!want.empty()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.value().data) % DTypeSize(dt), 0u) << name;
      std::vector<float> got(want.size());
      DecodeToF32(dt, t.value().data, got.data(), got.size());
      std::vector<float> rounded(want.size());
      std::vector<uint8_t> tmp(want.size() * DTypeSize(dt));
      EncodeFromF32(dt, want.data(), tmp.data(), want.size());
      DecodeToF32(dt, tmp.data(), rounded.data(), want.size());
      EXPECT_EQ(got, rounded) << name;
    } else {
      EXPECT_EQ(t.value().data, nullptr);
    }
  };
  expect_values("model.embed_tokens.weight", DType::kBF16, {3, 2}, af);
  expect_values("odd_bf16", DType::kBF16, {3}, {1, 2, 3});
  expect_values("f32", DType::kF32, {2, 3}, af);
  expect_values("f16", DType::kF16, {6}, af);
  expect_values("scalar", DType::kF32, {}, {42.0f});
  expect_values("empty", DType::kF16, {0, 4}, {});

  // Same image through FromBytes.
  std::ifstream in(dir.File("x.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  StatusOr<SafetensorsFile> g = SafetensorsFile::FromBytes(bytes, "mem");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g.value().TensorNames(), f.value().TensorNames());

  // Views survive moving the owner.
  const void* before = f.value().Get("f32").value().data;
  SafetensorsFile moved = std::move(f.value());
  EXPECT_EQ(moved.Get("f32").value().data, before);

  StatusOr<SafetensorsTensor> missing = moved.Get("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  SafetensorsWriter w;
  float v[4] = {};
  EXPECT_TRUE(w.Add("a", DType::kF32, {4}, v, 16).ok());
  EXPECT_FALSE(w.Add("a", DType::kF32, {4}, v, 16).ok());             // duplicate
  EXPECT_FALSE(w.Add("b", DType::kF32, {4}, v, 12).ok());             // size mismatch
  EXPECT_FALSE(w.Add("c", DType::kF32, {-1, 4}, v, 16).ok());         // negative dim
  EXPECT_FALSE(w.Add("__metadata__", DType::kF32, {4}, v, 16).ok());  // reserved
  EXPECT_FALSE(w.Add("", DType::kF32, {4}, v, 16).ok());
  EXPECT_FALSE(w.AddF32("d", DType::kBF16, {3}, {1, 2}).ok());  // count mismatch
}

TEST(SafetensorsTest, EveryTruncationIsAnError) {
  const std::string full = SmallFileImage();
  ASSERT_TRUE(SafetensorsFile::FromBytes(full, "full").ok());
  for (size_t n = 0; n < full.size(); ++n) {
    StatusOr<SafetensorsFile> f = SafetensorsFile::FromBytes(std::string_view(full).substr(0, n), "cut");
    EXPECT_FALSE(f.ok()) << "truncated to " << n << " of " << full.size() << " bytes was accepted";
  }
  // The same through real files and mmap.
  TempDir dir;
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string path = dir.File("t.safetensors");
    WriteText(path, full.substr(0, n));
    EXPECT_FALSE(SafetensorsFile::Open(path).ok()) << "file truncated to " << n;
  }
}

TEST(SafetensorsTest, HeaderLengthChecks) {
  const std::string h = "{}";
  auto fails_with = [](const std::string& bytes, const char* needle) {
    StatusOr<SafetensorsFile> f = SafetensorsFile::FromBytes(bytes, "h");
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().message();
  };
  EXPECT_TRUE(SafetensorsFile::FromBytes(Le64(2) + h, "ok").ok());
  fails_with(Le64(3) + h, "runs past the end");
  fails_with(Le64(uint64_t{1} << 63) + h, "exceeds the limit");
  fails_with(Le64(~uint64_t{0}) + h, "exceeds the limit");
  fails_with(Le64(SafetensorsFile::kMaxHeaderBytes + 1) + h, "exceeds the limit");
  fails_with("", "shorter than the 8-byte");
  fails_with(std::string(7, '\0'), "shorter than the 8-byte");
  fails_with(Le64(0), "not valid JSON");
}

TEST(SafetensorsTest, MalformedJsonAndEntries) {
  const char* bad[] = {
      "{",
      "[]",
      "123",
      "\"str\"",
      "{\"a\": 1}",
      "{\"a\": []}",
      "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}",
      "{\"a\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}",
      "{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [\"0\", 4]}}",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 4]}}",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0.0, 4]}}",
      "{\"__metadata__\": [\"x\"]}",
      "{\"__metadata__\": {\"k\": 1}}",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}} trailing",
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}\x01}",
  };
  for (const char* h : bad) {
    StatusOr<SafetensorsFile> f = SafetensorsFile::FromBytes(RawFile(h, 64), "bad");
    EXPECT_FALSE(f.ok()) << "accepted header: " << h;
  }
  // Whitespace padding (what writers emit) and metadata are fine.
  EXPECT_TRUE(SafetensorsFile::FromBytes(RawFile("{\"__metadata__\": {\"k\": \"v\"}}     ", 0), "ok").ok());
}

std::string OneTensor(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "{\"t\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": " + offsets + "}}";
}

void ExpectError(const std::string& header, size_t data, const char* needle) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::FromBytes(RawFile(Padded(header), data), "file.st");
  ASSERT_FALSE(f.ok()) << header;
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().message();
}

TEST(SafetensorsTest, OffsetsOutOfRangeOverlappingOrWrongSize) {
  EXPECT_TRUE(SafetensorsFile::FromBytes(RawFile(Padded(OneTensor("F32", "[2]", "[0, 8]")), 8), "ok").ok());
  ExpectError(OneTensor("F32", "[2]", "[0, 8]"), 7, "runs past");
  ExpectError(OneTensor("F32", "[2]", "[8, 16]"), 8, "runs past");
  ExpectError(OneTensor("F32", "[2]", "[8, 0]"), 16, "begin > end");
  ExpectError(OneTensor("F32", "[2]", "[0, 12]"), 16, "needs 8");
  ExpectError(OneTensor("F32", "[3]", "[0, 8]"), 16, "needs 12");
  ExpectError(OneTensor("F32", "[2]", "[2, 10]"), 16, "not aligned");
  // Overlap, in either key order.
  ExpectError(
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
      " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
      16, "overlap");
  ExpectError(
      "{\"b\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [14, 18]},"
      " \"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}",
      32, "overlap");
  // A tensor nested inside a longer one is an overlap even when a short one sits between.
  ExpectError(
      "{\"a\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [0, 32]},"
      " \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]},"
      " \"c\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [24, 28]}}",
      32, "overlap");
  // Empty tensors overlap nothing; gaps are tolerated.
  StatusOr<SafetensorsFile> ok = SafetensorsFile::FromBytes(
      RawFile(Padded("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                     " \"e\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]},"
                     " \"g\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [12, 16]}}"),
              16),
      "ok");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok.value().Get("e").value().nbytes, 0u);
}

TEST(SafetensorsTest, UnsupportedDType) {
  // Unknown names fail at open, naming tensor and dtype.
  ExpectError(OneTensor("Q4_K", "[2]", "[0, 8]"), 8, "unsupported dtype 'Q4_K'");
  ExpectError(OneTensor("F4", "[2]", "[0, 1]"), 8, "'t'");
  // Known but unsupported: validated (sizes!), listed, refused on Get with the tensor's name.
  ExpectError(OneTensor("I64", "[2]", "[0, 8]"), 16, "needs 16");
  StatusOr<SafetensorsFile> f =
      SafetensorsFile::FromBytes(RawFile(Padded(OneTensor("I64", "[2]", "[0, 16]")), 16), "f");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f.value().Contains("t"));
  EXPECT_EQ(f.value().StoredDTypeName("t"), "I64");
  StatusOr<SafetensorsTensor> t = f.value().Get("t");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("'t'"), std::string::npos);
  EXPECT_NE(t.status().message().find("unsupported dtype I64"), std::string::npos);
}

// Integer buffers (an assistant's token_ordering): I64 and I32 read as int64 values, little-endian
// as stored; a float tensor refused by GetIntegers, an integer one by Get, each naming the dtype.
TEST(SafetensorsTest, GetIntegers) {
  const std::string header = Padded(
      R"({"i64": {"dtype": "I64", "shape": [2, 2], "data_offsets": [0, 32]},)"
      R"( "i32": {"dtype": "I32", "shape": [3], "data_offsets": [32, 44]},)"
      R"( "f": {"dtype": "F32", "shape": [1], "data_offsets": [44, 48]}})");
  std::string data;
  for (int64_t v : {int64_t{7}, int64_t{-1}, int64_t{1} << 40, int64_t{0}}) data += Le64(static_cast<uint64_t>(v));
  for (int32_t v : {3, -5, 2147483647}) {
    char b[4];
    std::memcpy(b, &v, 4);  // the test machine is little-endian, as the format
    data.append(b, 4);
  }
  data.append(4, '\0');
  StatusOr<SafetensorsFile> f = SafetensorsFile::FromBytes(Le64(header.size()) + header + data, "ints.st");
  ASSERT_TRUE(f.ok()) << f.status().message();
  std::vector<int64_t> shape;
  StatusOr<std::vector<int64_t>> a = f.value().GetIntegers("i64", &shape);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a.value(), (std::vector<int64_t>{7, -1, int64_t{1} << 40, 0}));
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 2}));
  StatusOr<std::vector<int64_t>> b = f.value().GetIntegers("i32", &shape);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b.value(), (std::vector<int64_t>{3, -5, 2147483647}));
  EXPECT_EQ(shape, (std::vector<int64_t>{3}));
  StatusOr<std::vector<int64_t>> c = f.value().GetIntegers("f");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("has dtype F32"), std::string::npos) << c.status().message();
  StatusOr<std::vector<int64_t>> none = f.value().GetIntegers("nope");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("'nope'"), std::string::npos) << none.status().message();
}

TEST(SafetensorsTest, HugeAndInvalidShapes) {
  ExpectError(OneTensor("F32", "[4611686018427387904, 8]", "[0, 8]"), 8, "overflows");
  ExpectError(OneTensor("F32", "[4294967296, 4294967296]", "[0, 8]"), 8, "overflows");
  ExpectError(OneTensor("F32", "[2305843009213693952]", "[0, 8]"), 8, "overflows");  // 2^61 * 4 bytes
  ExpectError(OneTensor("BF16", "[9223372036854775807]", "[0, 8]"), 8, "overflows");
  ExpectError(OneTensor("F32", "[18446744073709551615]", "[0, 8]"), 8, "too large");
  ExpectError(OneTensor("F32", "[18446744073709551616]", "[0, 8]"), 8,
              "not a non-negative integer");  // parsed as float
  ExpectError(OneTensor("F32", "[-2]", "[0, 8]"), 8, "not a non-negative integer");
  ExpectError(OneTensor("F32", "[2.0]", "[0, 8]"), 8, "not a non-negative integer");
  ExpectError(OneTensor("F32", "[true]", "[0, 8]"), 8, "not a non-negative integer");
  ExpectError(OneTensor("F32", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", "[0, 4]"), 8, "rank 17");
  // An overflowing product multiplied by a zero dim is an empty tensor, not an error.
  StatusOr<SafetensorsFile> f =
      SafetensorsFile::FromBytes(RawFile(Padded(OneTensor("F32", "[4294967296, 4294967296, 0]", "[0, 0]")), 0), "z");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value().Get("t").value().nbytes, 0u);
}

// Mutates a valid image many ways; the reader must only ever answer (never crash, never hand out
// a view outside the image). ASan/UBSan turn any stray access into a failure.
TEST(SafetensorsTest, FuzzMutatedHeadersNeverCrash) {
  const std::string base = SmallFileImage();
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(base[i]);
  std::mt19937_64 rng(20260501);
  static const char kAlphabet[] = "{}[]\",:0123456789-.eE truefalsnul\\F32BF16I64U8_ \x00\xff";
  const std::string alphabet(kAlphabet, sizeof(kAlphabet) - 1);
  int accepted = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string img = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      // End of the (original) header region still present in the image.
      const size_t hend = std::min(img.size(), 8 + static_cast<size_t>(header_len));
      switch (rng() % 7) {
        case 0:  // flip a bit anywhere in the length or header
          if (hend > 0) img[rng() % hend] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:  // replace a header byte with a JSON-ish character
          if (hend > 8) img[8 + rng() % (hend - 8)] = alphabet[rng() % alphabet.size()];
          break;
        case 2:  // bump a digit
          for (int tries = 0; hend > 8 && tries < 20; ++tries) {
            size_t p = 8 + rng() % (hend - 8);
            if (img[p] >= '0' && img[p] <= '9') {
              img[p] = static_cast<char>('0' + rng() % 10);
              break;
            }
          }
          break;
        case 3:  // truncate
          img.resize(rng() % (img.size() + 1));
          break;
        case 4: {  // rewrite the length field
          const uint64_t choices[] = {0, 1, header_len - 1, header_len + 1, img.size(), ~uint64_t{0}, rng()};
          const std::string le = Le64(choices[rng() % 7]);
          if (img.size() >= 8) img.replace(0, 8, le);
          break;
        }
        case 5:  // insert a character into the header
          if (hend > 8) img.insert(8 + rng() % (hend - 8), 1, alphabet[rng() % alphabet.size()]);
          break;
        case 6:  // delete a header character
          if (hend > 8) img.erase(8 + rng() % (hend - 8), 1);
          break;
      }
    }
    StatusOr<SafetensorsFile> f = SafetensorsFile::FromBytes(img, "fuzz");
    if (!f.ok()) {
      EXPECT_FALSE(f.status().message().empty());
      continue;
    }
    ++accepted;
    for (const std::string& name : f.value().TensorNames()) {
      StatusOr<SafetensorsTensor> t = f.value().Get(name);
      if (!t.ok()) continue;
      // Touch every byte of the view: ASan catches anything outside the image.
      const auto* p = static_cast<const uint8_t*>(t.value().data);
      unsigned sum = 0;
      for (size_t i = 0; i < t.value().nbytes; ++i) sum += p[i];
      (void)sum;
      EXPECT_LE(t.value().nbytes, img.size());
    }
  }
  EXPECT_GT(accepted, 0);  // some mutations (whitespace, metadata text) stay valid
}

// --- checkpoints ------------------------------------------------------------------------------

void WriteTensors(const std::string& path, const std::vector<std::string>& names) {
  SafetensorsWriter w;
  for (size_t i = 0; i < names.size(); ++i)
    ASSERT_TRUE(w.AddF32(names[i], DType::kBF16, {2}, {static_cast<float>(i), 1.0f}).ok());
  ASSERT_TRUE(w.WriteFile(path).ok());
}

// Resident kilobytes of the mapping that starts at `start`, from /proc/self/smaps (-1: not found).
long MappingRssKb(const void* start) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_it = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) {  // a mapping's header line
      in_it = lo == reinterpret_cast<uintptr_t>(start);
      continue;
    }
    if (in_it && line.rfind("Rss:", 0) == 0) return std::stol(line.substr(4));
  }
  return -1;
}

// Prefault maps a range's pages up front (what the weight loader asks for every weight it binds):
// nothing of a fresh mapping is resident before, all of the range after.
TEST(MappedFileTest, PrefaultMakesTheRangeResident) {
  const fs::path path = fs::path(::testing::TempDir()) / "tessera_prefault.bin";
  const size_t bytes = size_t(1) << 20;
  {
    std::ofstream f(path, std::ios::binary);
    std::string data(bytes, '\x5a');
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  StatusOr<MappedFile> m = MappedFile::Open(path.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(MappingRssKb(m.value().data()), 0);
  if (!MappedFile::Prefault(m.value().data() + 100, bytes - 200)) GTEST_SKIP() << "no MADV_POPULATE_READ here";
  EXPECT_EQ(MappingRssKb(m.value().data()), static_cast<long>(bytes / 1024));
  EXPECT_EQ(m.value().data()[bytes - 1], 0x5a);
  EXPECT_FALSE(MappedFile::Prefault(nullptr, 10));
  fs::remove(path);
}

// Release drops the whole pages inside a range (what the loader does to a matrix it repacked):
// the pages partly outside it stay resident, the data stays readable, and reading it maps the
// pages back.
TEST(MappedFileTest, ReleaseDropsTheRangesWholePages) {
  const fs::path path = fs::path(::testing::TempDir()) / "tessera_release.bin";
  const size_t bytes = size_t(1) << 20, page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  {
    std::ofstream f(path, std::ios::binary);
    std::string data(bytes, '\x3c');
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  StatusOr<MappedFile> m = MappedFile::Open(path.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  const uint8_t* d = m.value().data();
  if (!MappedFile::Prefault(d, bytes)) GTEST_SKIP() << "no MADV_POPULATE_READ here";
  ASSERT_EQ(MappingRssKb(d), static_cast<long>(bytes / 1024));
  // From the middle of the first page to the middle of the last: all pages but those two go.
  ASSERT_TRUE(MappedFile::Release(d + page / 2, bytes - page));
  EXPECT_EQ(MappingRssKb(d), static_cast<long>(2 * page / 1024));
  long sum = 0;
  for (size_t i = 0; i < bytes; i += page) sum += d[i];
  EXPECT_EQ(sum, static_cast<long>(bytes / page) * 0x3c);
  EXPECT_EQ(MappingRssKb(d), static_cast<long>(bytes / 1024));
  EXPECT_FALSE(MappedFile::Release(d + 1, page - 2)) << "no whole page inside: nothing to drop";
  EXPECT_FALSE(MappedFile::Release(nullptr, bytes));
  fs::remove(path);
}

TEST(SafetensorsCheckpointTest, SingleFileDirectory) {
  TempDir dir;
  WriteTensors(dir.File("model.safetensors"), {"model.embed_tokens.weight", "model.norm.weight"});
  StatusOr<SafetensorsCheckpoint> c = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().num_shards(), 1u);
  EXPECT_EQ(c.value().num_tensors(), 2u);
  EXPECT_EQ(c.value().LanguageModelPrefix().value(), "model.");
  EXPECT_TRUE(c.value().GetLanguageModelTensor("norm.weight").ok());
  EXPECT_FALSE(c.value().LmHeadName().has_value());
  StatusOr<SafetensorsTensor> missing = c.value().GetLanguageModelTensor("layers.0.mlp.up_proj.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("model.layers.0.mlp.up_proj.weight"), std::string::npos);
  // The file path itself also opens.
  EXPECT_TRUE(SafetensorsCheckpoint::Open(dir.File("model.safetensors")).ok());
}

TEST(SafetensorsCheckpointTest, ShardedIndex) {
  TempDir dir;
  WriteTensors(dir.File("model-00001-of-00002.safetensors"),
               {"model.language_model.embed_tokens.weight", "model.language_model.layers.0.self_attn.q_proj.weight"});
  WriteTensors(dir.File("model-00002-of-00002.safetensors"),
               {"model.language_model.norm.weight", "model.vision_tower.encoder.layers.0.weight", "unlisted"});
  WriteText(dir.File("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 20},
    "weight_map": {
      "model.language_model.embed_tokens.weight": "model-00001-of-00002.safetensors",
      "model.language_model.layers.0.self_attn.q_proj.weight": "model-00001-of-00002.safetensors",
      "model.language_model.norm.weight": "model-00002-of-00002.safetensors",
      "model.vision_tower.encoder.layers.0.weight": "model-00002-of-00002.safetensors"
    }})");
  StatusOr<SafetensorsCheckpoint> c = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().num_shards(), 2u);
  EXPECT_EQ(c.value().num_tensors(), 4u);
  EXPECT_FALSE(c.value().Contains("unlisted"));
  EXPECT_EQ(c.value().LanguageModelPrefix().value(), "model.language_model.");
  StatusOr<SafetensorsTensor> norm = c.value().GetLanguageModelTensor("norm.weight");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm.value().dtype, DType::kBF16);
  EXPECT_TRUE(c.value().HasLanguageModelTensor("layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(SafetensorsCheckpoint::Open(dir.File("model.safetensors.index.json")).ok());
}

TEST(SafetensorsCheckpointTest, BrokenIndexes) {
  auto open_with_index = [](const std::string& index, const char* needle) {
    TempDir dir;
    WriteTensors(dir.File("a.safetensors"), {"model.embed_tokens.weight"});
    WriteText(dir.File("model.safetensors.index.json"), index);
    StatusOr<SafetensorsCheckpoint> c = SafetensorsCheckpoint::Open(dir.path());
    ASSERT_FALSE(c.ok()) << index;
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
  };
  open_with_index("{", "not valid JSON");
  open_with_index("[]", "JSON object");
  open_with_index("{\"metadata\": {}}", "weight_map");
  open_with_index("{\"weight_map\": {\"x\": 3}}", "not a string");
  open_with_index("{\"weight_map\": {\"model.embed_tokens.weight\": \"missing.safetensors\"}}", "missing.safetensors");
  open_with_index("{\"weight_map\": {\"model.embed_tokens.weight\": \"../a.safetensors\"}}", "plain file name");
  open_with_index("{\"weight_map\": {\"model.norm.weight\": \"a.safetensors\"}}", "does not contain it");
  // A corrupt shard names the shard.
  TempDir dir;
  WriteText(dir.File("bad.safetensors"), Le64(100) + "{}");
  WriteText(dir.File("model.safetensors.index.json"), "{\"weight_map\": {\"w\": \"bad.safetensors\"}}");
  StatusOr<SafetensorsCheckpoint> c = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad.safetensors"), std::string::npos);
}

TEST(SafetensorsCheckpointTest, MissingFiles) {
  TempDir dir;
  EXPECT_FALSE(SafetensorsCheckpoint::Open(dir.path()).ok());
  EXPECT_FALSE(SafetensorsCheckpoint::Open(dir.File("nope")).ok());
  EXPECT_FALSE(SafetensorsFile::Open(dir.path()).ok());  // a directory is not a file
}

TEST(SafetensorsCheckpointTest, PrefersSingleFileOverIndex) {
  TempDir dir;
  WriteTensors(dir.File("model.safetensors"), {"embed_tokens.weight"});
  WriteText(dir.File("model.safetensors.index.json"), "{");
  StatusOr<SafetensorsCheckpoint> c = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().LanguageModelPrefix().value(), "");
}

TEST(SafetensorsCheckpointTest, LanguageModelPrefixes) {
  struct Case {
    std::vector<std::string> names;
    std::string prefix;   // "!" = error
    std::string lm_head;  // "" = tied
  };
  const Case cases[] = {
      // Gemma 3 / 4 multimodal, current layout, with tower tensors around.
      {{"model.language_model.embed_tokens.weight", "model.vision_tower.vision_model.embeddings.patch_embedding.weight",
        "model.multi_modal_projector.mm_input_projection_weight", "model.embed_vision.embedding_projection.weight"},
       "model.language_model.",
       ""},
      // Gemma 3 multimodal saved by transformers < 4.52.
      {{"language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
        "vision_tower.vision_model.embeddings.patch_embedding.weight", "multi_modal_projector.mm_soft_emb_norm.weight"},
       "language_model.model.",
       "language_model.lm_head.weight"},
      // Text-only CausalLM, untied head.
      {{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}, "model.", "lm_head.weight"},
      // Bare text model.
      {{"embed_tokens.weight", "norm.weight"}, "", ""},
      // Nothing to anchor on.
      {{"model.vision_tower.weight", "model.language_model.norm.weight"}, "!", ""},
      // Two decoders: ambiguous.
      {{"model.embed_tokens.weight", "model.language_model.embed_tokens.weight"}, "!", ""},
  };
  for (const Case& k : cases) {
    TempDir dir;
    WriteTensors(dir.File("model.safetensors"), k.names);
    StatusOr<SafetensorsCheckpoint> c = SafetensorsCheckpoint::Open(dir.path());
    ASSERT_TRUE(c.ok()) << c.status().message();
    StatusOr<std::string> p = c.value().LanguageModelPrefix();
    if (k.prefix == "!") {
      EXPECT_FALSE(p.ok()) << k.names[0];
      EXPECT_FALSE(c.value().GetLanguageModelTensor("embed_tokens.weight").ok());
      continue;
    }
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p.value(), k.prefix);
    EXPECT_TRUE(c.value().GetLanguageModelTensor("embed_tokens.weight").ok());
    EXPECT_EQ(c.value().LmHeadName().value_or(""), k.lm_head);
  }
}

}  // namespace
}  // namespace tessera::io
