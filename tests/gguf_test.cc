// GGUF reader and writer: round trips of every metadata type and tensor type, writer failures
// leaving no file, every truncation of a valid file, and one hand-made file per refusal. The
// hand-made files come from a byte builder written from the format description (docs/gguf.md),
// not from GgufWriter, so a shared misreading of the format would not cancel out.
#include "tessera/gguf.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace tessera::io {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Little-endian builder of GGUF images.
class Bytes {
 public:
  Bytes& U8(uint8_t v) { return Raw(&v, 1); }
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  Bytes& I64(int64_t v) { return Raw(&v, 8); }
  Bytes& F32(float v) { return Raw(&v, 4); }
  Bytes& Str(const std::string& s) {
    U64(s.size());
    s_ += s;
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    s_ += "GGUF";
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  // A tensor info with dims given as ne[] (innermost first), as the file stores them.
  Bytes& Info(const std::string& name, const std::vector<int64_t>& ne, uint32_t type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) I64(d);
    return U32(type).U64(offset);
  }
  Bytes& PadTo(size_t a) {
    while (s_.size() % a) s_ += '\0';
    return *this;
  }
  Bytes& Zeros(size_t n) {
    s_.append(n, '\0');
    return *this;
  }
  const std::string& str() const { return s_; }

 private:
  Bytes& Raw(const void* p, size_t n) {
    s_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string s_;
};

StatusOr<GgufFile> Parse(const std::string& bytes) { return GgufFile::FromBytes(bytes, "test.gguf"); }

// Expects the image to be refused with a message containing every one of `parts`.
void ExpectRefused(const std::string& bytes, const std::vector<std::string>& parts) {
  StatusOr<GgufFile> f = Parse(bytes);
  ASSERT_FALSE(f.ok()) << "accepted; expected an error with '" << parts[0] << "'";
  for (const std::string& p : parts)
    EXPECT_NE(f.status().message().find(p), std::string::npos) << f.status().message() << "\n  lacks: " << p;
  EXPECT_NE(f.status().message().find("test.gguf"), std::string::npos) << f.status().message();
}

// A fill writing byte i = (seed + 7 i) mod 251 over n bytes.
GgufWriter::Fill Pattern(size_t n, int seed) {
  return [n, seed](char* dst) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<char>((seed + 7 * i) % 251);
    return Status::Ok();
  };
}
bool HasPattern(const GgufTensor& t, int seed) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (size_t i = 0; i < t.nbytes; ++i)
    if (p[i] != static_cast<uint8_t>((seed + 7 * i) % 251)) return false;
  return true;
}

struct TensorCase {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  QuantType quant;
  uint32_t ggml_type;
  uint64_t nbytes;
};

// Byte sizes from ggml's block layouts: q4_0 18 B / 32, q5_0 22 / 32, q8_0 34 / 32, q4_1 20 / 32,
// q5_1 24 / 32, q4_K 144 / 256, q5_K 176 / 256, q6_K 210 / 256.
const std::vector<TensorCase>& Cases() {
  static const std::vector<TensorCase> cases = {
      {"f32.matrix", {3, 5}, DType::kF32, QuantType::kNone, 0, 60},
      {"f16.matrix", {2, 4}, DType::kF16, QuantType::kNone, 1, 16},
      {"bf16.vector", {7}, DType::kBF16, QuantType::kNone, 30, 14},
      {"f32.scalar", {}, DType::kF32, QuantType::kNone, 0, 4},
      {"f32.empty", {0, 3}, DType::kF32, QuantType::kNone, 0, 0},
      {"q4_0", {2, 64}, DType::kF32, QuantType::kQ4_0, 2, 2 * 2 * 18},
      {"q5_0", {3, 32}, DType::kF32, QuantType::kQ5_0, 6, 3 * 22},
      {"q8_0", {1, 96}, DType::kF32, QuantType::kQ8_0, 8, 3 * 34},
      {"q4_1", {2, 32}, DType::kF32, QuantType::kQ4_1, 3, 2 * 20},
      {"q5_1", {1, 64}, DType::kF32, QuantType::kQ5_1, 7, 2 * 24},
      {"q4_K", {2, 256}, DType::kF32, QuantType::kQ4_K, 12, 2 * 144},
      {"q5_K", {1, 512}, DType::kF32, QuantType::kQ5_K, 13, 2 * 176},
      {"q6_K", {2, 2, 256}, DType::kF32, QuantType::kQ6_K, 14, 4 * 210},
  };
  return cases;
}

void AddCases(GgufWriter* w) {
  int seed = 1;
  for (const TensorCase& c : Cases()) {
    if (c.quant == QuantType::kNone)
      w->AddTensor(c.name, c.shape, c.dtype, Pattern(c.nbytes, seed++));
    else
      w->AddQuantTensor(c.name, c.shape, c.quant, Pattern(c.nbytes, seed++));
  }
}

void SetEveryType(GgufWriter* w) {
  w->SetString("general.architecture", "gemma3");
  w->SetInt("t.u8", GgufType::kU8, 255);
  w->SetInt("t.i8", GgufType::kI8, -128);
  w->SetInt("t.u16", GgufType::kU16, 65535);
  w->SetInt("t.i16", GgufType::kI16, -32768);
  w->SetU32("t.u32", 4000000000u);
  w->SetI32("t.i32", -2000000000);
  w->SetU64("t.u64", 18000000000000000000ull);
  w->SetInt("t.i64", GgufType::kI64, -9000000000000000000ll);
  w->SetF32("t.f32", 0.1f);
  w->SetF64("t.f64", 0.1);
  w->SetBool("t.bool", true);
  w->SetStringArray("a.string", {"", "a", "\xe2\x96\x81hello", std::string("nul\0in", 6)});
  w->SetI32Array("a.i32", {-1, 0, 2147483647});
  w->SetIntArray("a.u8", GgufType::kU8, {0, 255});
  w->SetIntArray("a.i16", GgufType::kI16, {-32768, 7});
  w->SetIntArray("a.i64", GgufType::kI64, {-5, 5});
  w->SetU64Array("a.u64", {0, 18446744073709551615ull});
  w->SetF32Array("a.f32", {1.5f, -0.25f});
  w->SetF64Array("a.f64", {1e300, -2.5});
  w->SetBoolArray("a.bool", {true, false, true});
  w->SetF32Array("a.empty", {});
}

TEST(Gguf, RoundTripEveryMetadataTypeAndTensorType) {
  TempDir dir;
  GgufWriter w;
  SetEveryType(&w);
  AddCases(&w);
  const std::string path = dir.File("model.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  StatusOr<GgufFile> opened = GgufFile::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const GgufFile& f = opened.value();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.Keys().front(), "general.architecture");
  EXPECT_EQ(f.Keys().size(), 22u);
  EXPECT_FALSE(f.Has("general.alignment"));  // only written when not the default
  EXPECT_EQ(f.GetString("general.architecture").value(), "gemma3");
  EXPECT_EQ(f.GetInt("t.u8").value(), 255);
  EXPECT_EQ(f.GetInt("t.i8").value(), -128);
  EXPECT_EQ(f.GetInt("t.u16").value(), 65535);
  EXPECT_EQ(f.GetInt("t.i16").value(), -32768);
  EXPECT_EQ(f.GetInt("t.u32").value(), 4000000000ll);
  EXPECT_EQ(f.GetInt("t.i32").value(), -2000000000);
  EXPECT_EQ(f.GetU64("t.u64").value(), 18000000000000000000ull);
  EXPECT_EQ(f.GetInt("t.i64").value(), -9000000000000000000ll);
  EXPECT_EQ(f.GetFloat("t.f32").value(), static_cast<double>(0.1f));
  EXPECT_EQ(f.GetFloat("t.f64").value(), 0.1);
  EXPECT_TRUE(f.GetBool("t.bool").value());
  EXPECT_EQ(f.TypeOf("t.u16").value(), GgufType::kU16);
  EXPECT_EQ(f.TypeOf("a.u8").value(), GgufType::kArray);
  EXPECT_EQ(f.ArrayTypeOf("a.u8").value(), GgufType::kU8);
  EXPECT_EQ(f.GetStringArray("a.string").value(),
            (std::vector<std::string>{"", "a", "\xe2\x96\x81hello", std::string("nul\0in", 6)}));
  EXPECT_EQ(f.GetIntArray("a.i32").value(), (std::vector<int64_t>{-1, 0, 2147483647}));
  EXPECT_EQ(f.GetIntArray("a.u8").value(), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f.GetIntArray("a.i16").value(), (std::vector<int64_t>{-32768, 7}));
  EXPECT_EQ(f.GetIntArray("a.i64").value(), (std::vector<int64_t>{-5, 5}));
  EXPECT_EQ(f.GetU64Array("a.u64").value(), (std::vector<uint64_t>{0, 18446744073709551615ull}));
  EXPECT_EQ(f.GetFloatArray("a.f32").value(), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(f.GetF64Array("a.f64").value(), (std::vector<double>{1e300, -2.5}));
  EXPECT_EQ(f.GetBoolArray("a.bool").value(), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(f.GetFloatArray("a.empty").value().empty());

  ASSERT_EQ(f.tensors().size(), Cases().size());
  int seed = 1;
  for (size_t i = 0; i < Cases().size(); ++i) {
    const TensorCase& c = Cases()[i];
    const GgufTensor& t = f.tensors()[i];
    SCOPED_TRACE(c.name);
    EXPECT_EQ(t.name, c.name);
    EXPECT_EQ(f.Find(c.name), &t);
    EXPECT_EQ(t.shape, c.shape);
    EXPECT_EQ(t.ggml_type, c.ggml_type);
    EXPECT_EQ(t.quant, c.quant);
    if (c.quant == QuantType::kNone) {
      EXPECT_EQ(t.dtype, c.dtype);
    }
    EXPECT_EQ(t.nbytes, c.nbytes);
    EXPECT_EQ(t.data == nullptr, c.nbytes == 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u);
    EXPECT_TRUE(HasPattern(t, seed++));
  }
  EXPECT_EQ(f.Find("absent"), nullptr);
}

TEST(Gguf, WriterLayoutIsLlamaCppsPackedLayout) {
  // Offsets are the running sum of padded sizes and the file ends at the last padded tensor:
  // llama.cpp insists on exactly this.
  TempDir dir;
  GgufWriter w;
  w.AddTensor("a", {5}, DType::kF32, Pattern(20, 1));
  w.AddTensor("b", {3}, DType::kF16, Pattern(6, 2));
  ASSERT_TRUE(w.Write(dir.File("x.gguf")).ok());
  std::ifstream in(dir.File("x.gguf"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // header 24 + infos ("a": 8+1+4+8+4+8 = 33, "b": 33) = 90 -> data at 96; a [96, 116) pad to 128.
  Bytes expect;
  expect.Header(2, 0).Info("a", {5}, 0, 0).Info("b", {3}, 1, 32).PadTo(32);
  ASSERT_EQ(bytes.size(), 96u + 32 + 32);
  EXPECT_EQ(bytes.substr(0, 96), expect.str());
  EXPECT_EQ(static_cast<uint8_t>(bytes[96]), 1);
  EXPECT_EQ(static_cast<uint8_t>(bytes[128]), 2);
}

TEST(Gguf, AlignmentOtherThan32IsWrittenAndHonoured) {
  TempDir dir;
  GgufWriter w;
  w.SetString("k", "v");
  AddCases(&w);
  ASSERT_TRUE(w.Write(dir.File("a.gguf"), 256).ok());
  StatusOr<GgufFile> f = GgufFile::Open(dir.File("a.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value().alignment(), 256u);
  EXPECT_EQ(f.value().GetInt("general.alignment").value(), 256);
  EXPECT_EQ(f.value().TypeOf("general.alignment").value(), GgufType::kU32);
  for (const GgufTensor& t : f.value().tensors()) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 256, 0u) << t.name;
}

TEST(Gguf, SettingAKeyAgainReplacesItInPlace) {
  TempDir dir;
  GgufWriter w;
  w.SetU32("first", 1);
  w.SetString("second", "x");
  w.SetF32("first", 2.0f);  // now an f32, still first
  ASSERT_TRUE(w.Write(dir.File("r.gguf")).ok());
  GgufFile f = GgufFile::Open(dir.File("r.gguf")).value();
  EXPECT_EQ(f.Keys(), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(f.GetFloat("first").value(), 2.0);
}

TEST(Gguf, GetterErrorsNameTheKey) {
  GgufWriter w;
  w.SetU64("big", 18446744073709551615ull);
  w.SetInt("neg", GgufType::kI8, -3);
  w.SetI32Array("ints", {1});
  w.SetString("s", "x");
  TempDir dir;
  ASSERT_TRUE(w.Write(dir.File("g.gguf")).ok());
  GgufFile f = GgufFile::Open(dir.File("g.gguf")).value();
  auto expect = [](const Status& s, const std::string& part) {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  };
  expect(f.GetInt("absent").status(), "has no metadata key 'absent'");
  expect(f.GetInt("big").status(), "'big' = 18446744073709551615 is out of the int64 range");
  expect(f.GetU64("neg").status(), "'neg' = -3 is negative");
  expect(f.GetString("big").status(), "'big' is u64, not a string");
  expect(f.GetFloat("s").status(), "'s' is string, not f32 or f64");
  expect(f.GetInt("ints").status(), "'ints' is an array of i32, not an integer");
  expect(f.GetStringArray("ints").status(), "'ints' is an array of i32, not an array of string");
  expect(f.GetFloatArray("s").status(), "'s' is string, not an array of f32 or f64");
  expect(f.ArrayTypeOf("s").status(), "'s' is string");
  expect(f.TypeOf("absent").status(), "has no metadata key");
  EXPECT_EQ(f.GetU64("big").value(), 18446744073709551615ull);
}

// Every file in dir (the writer must leave neither the target nor its temporary file behind).
std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

TEST(Gguf, WriterFailuresLeaveNoFile) {
  struct Case {
    const char* what;
    std::function<void(GgufWriter*)> build;
    uint32_t alignment;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"fill fails", [](GgufWriter* w) {
         w->AddTensor("ok", {4}, DType::kF32, Pattern(16, 1));
         w->AddTensor("bad", {4}, DType::kF32, [](char*) { return InvalidArgument("no data for you"); });
       }, 32, "tensor 'bad': no data for you"},
      {"fill throws", [](GgufWriter* w) {
         w->AddTensor("t", {4}, DType::kF32, [](char*) -> Status { throw std::runtime_error("boom"); });
       }, 32, "tensor 't': the fill threw: boom"},
      {"duplicate tensor", [](GgufWriter* w) {
         w->AddTensor("t", {4}, DType::kF32, Pattern(16, 1));
         w->AddTensor("t", {4}, DType::kF32, Pattern(16, 1));
       }, 32, "duplicate tensor name 't'"},
      {"row not a block multiple", [](GgufWriter* w) {
         w->AddQuantTensor("q", {2, 48}, QuantType::kQ8_0, Pattern(0, 1));
       }, 32, "tensor 'q' of q8_0 has rows of 48 values, not a multiple of its block of 32"},
      {"kNone as a block format", [](GgufWriter* w) {
         w->AddQuantTensor("q", {32}, QuantType::kNone, Pattern(0, 1));
       }, 32, "tensor 'q' has no GGUF type"},
      {"long name", [](GgufWriter* w) {
         w->AddTensor(std::string(64, 'n'), {1}, DType::kF32, Pattern(4, 1));
       }, 32, "name is 64 bytes; llama.cpp reads at most 63"},
      {"negative dim", [](GgufWriter* w) { w->AddTensor("t", {-1}, DType::kF32, Pattern(0, 1)); }, 32,
       "tensor 't' shape [-1] has a negative dimension"},
      {"five dims", [](GgufWriter* w) { w->AddTensor("t", {1, 1, 1, 1, 1}, DType::kF32, Pattern(4, 1)); }, 32,
       "more than 4 dimensions"},
      {"value out of range", [](GgufWriter* w) { w->SetInt("k", GgufType::kU8, 256); }, 32,
       "key 'k': value 256 does not fit u8"},
      {"array value out of range", [](GgufWriter* w) { w->SetIntArray("k", GgufType::kI16, {0, 40000}); }, 32,
       "key 'k'[1]: value 40000 does not fit i16"},
      {"alignment not a power of two", [](GgufWriter* w) {}, 48, "alignment 48 is not a power of two"},
      {"general.alignment disagrees", [](GgufWriter* w) { w->SetU32("general.alignment", 64); }, 32,
       "general.alignment must be the u32 alignment 32"},
      {"total size overflows", [](GgufWriter* w) {
         w->AddTensor("a", {int64_t{1} << 59}, DType::kF32, Pattern(0, 1));
         w->AddTensor("b", {int64_t{1} << 59}, DType::kF32, Pattern(0, 1));
       }, 32, "tensor 'b': the tensors' total size overflows"},
      {"byte count overflows", [](GgufWriter* w) { w->AddTensor("t", {int64_t{1} << 62}, DType::kF32, Pattern(0, 1)); },
       32, "tensor 't' shape [4611686018427387904] of f32 overflows the byte count"},
      {"missing fill", [](GgufWriter* w) { w->AddTensor("t", {1}, DType::kF32, nullptr); }, 32,
       "tensor 't' has no fill function"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    GgufWriter w;
    c.build(&w);
    const Status s = w.Write(dir.File("out.gguf"), c.alignment);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
    EXPECT_TRUE(Listing(dir.path()).empty());
  }
}

TEST(Gguf, WriterReplacesAnExistingFileOnlyOnSuccess) {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  testing::WriteText(path, "old contents");
  GgufWriter bad;
  bad.AddTensor("t", {4}, DType::kF32, [](char*) { return InvalidArgument("fail"); });
  EXPECT_FALSE(bad.Write(path).ok());
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "old contents");
  GgufWriter good;
  good.SetString("k", "v");
  ASSERT_TRUE(good.Write(path).ok());
  EXPECT_EQ(GgufFile::Open(path).value().GetString("k").value(), "v");
  EXPECT_EQ(Listing(dir.path()).size(), 1u);
}

// No space: the file-size limit stands in for a full disk (both fail the up-front allocation).
TEST(Gguf, WriterOutOfSpaceIsResourceExhaustedAndLeavesNoFile) {
  TempDir dir;
  GgufWriter w;
  w.AddTensor("big", {1 << 20}, DType::kF32, Pattern(4 << 20, 1));
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // else the kernel's SIGXFSZ ends the process
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 1 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  const Status s = w.Write(dir.File("big.gguf"));
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.message();
  EXPECT_NE(s.message().find("big.gguf"), std::string::npos) << s.message();
  EXPECT_TRUE(Listing(dir.path()).empty());
}

TEST(Gguf, WriterIntoAMissingDirectoryFails) {
  TempDir dir;
  GgufWriter w;
  const Status s = w.Write(dir.File("no/such/dir/m.gguf"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no/such/dir/m.gguf"), std::string::npos) << s.message();
}

// A small valid image: two metadata entries and an f32 and a q8_0 tensor.
std::string SmallFile() {
  Bytes b;
  b.Header(2, 2).Str("general.architecture").U32(8).Str("gemma3").Str("n").U32(4).U32(7);
  b.Info("w", {32, 2}, 8, 0).Info("v", {3}, 0, 96).PadTo(32);
  for (int i = 0; i < 68; ++i) b.U8(static_cast<uint8_t>(i));
  b.Zeros(28);
  b.F32(1).F32(2).F32(3);
  return b.str();
}

TEST(GgufRead, HandMadeFileReads) {
  StatusOr<GgufFile> f = Parse(SmallFile());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value().GetInt("n").value(), 7);
  const GgufTensor* w = f.value().Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 32}));  // ne reversed
  EXPECT_EQ(w->quant, QuantType::kQ8_0);
  EXPECT_EQ(w->nbytes, 68u);
  EXPECT_EQ(static_cast<const uint8_t*>(w->data)[67], 67);
  const GgufTensor* v = f.value().Find("v");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(static_cast<const float*>(v->data)[2], 3.0f);
  EXPECT_EQ(v->numel(), 3);
}

TEST(GgufRead, EveryTruncationIsAnError) {
  const std::string full = SmallFile();
  ASSERT_TRUE(Parse(full).ok());
  const size_t data_end = full.size();  // the last tensor ends the file
  for (size_t n = 0; n < data_end; ++n) {
    StatusOr<GgufFile> f = Parse(full.substr(0, n));
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes accepted";
    if (!f.ok()) {
      EXPECT_NE(f.status().message().find("test.gguf"), std::string::npos);
    }
  }
}

TEST(GgufRead, WriterOutputTruncatedAnywhereIsAnErrorOrStillWhole) {
  TempDir dir;
  GgufWriter w;
  SetEveryType(&w);
  AddCases(&w);
  ASSERT_TRUE(w.Write(dir.File("m.gguf")).ok());
  std::ifstream in(dir.File("m.gguf"), std::ios::binary);
  const std::string full((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(Parse(full).ok());
  // The last tensor (q6_K, 840 bytes) is followed by padding to 864; cutting only padding is fine.
  ASSERT_EQ(Cases().back().nbytes, 840u);
  const size_t last_end = full.size() - (864 - 840);
  for (size_t n = 0; n < full.size(); ++n) {
    StatusOr<GgufFile> f = Parse(full.substr(0, n));
    EXPECT_EQ(f.ok(), n >= last_end) << "prefix of " << n << " bytes: " << f.status().message();
  }
}

TEST(GgufRead, Refusals) {
  // Header.
  ExpectRefused("", {"the magic needs 4 bytes at offset 0", "truncated"});
  ExpectRefused("GGML" + std::string(20, '\0'), {"not a GGUF file"});
  ExpectRefused(Bytes().Header(0, 0, 0x03000000).str(), {"big-endian"});
  ExpectRefused(Bytes().Header(0, 0, 1).str(), {"version 1 is not supported"});
  ExpectRefused(Bytes().Header(0, 0, 4).str(), {"unsupported GGUF version 4"});
  ExpectRefused(Bytes().Header(0, 0, 0).str(), {"unsupported GGUF version 0"});
  ExpectRefused(Bytes().Header(uint64_t{1} << 40, 0).str(), {"tensor count 1099511627776 exceeds the limit"});
  ExpectRefused(Bytes().Header(0, uint64_t{1} << 21).str(), {"metadata count 2097152 exceeds the limit"});
  ExpectRefused(Bytes().Header(0, 1000).Zeros(100).str(), {"1000 metadata entries", "cannot fit"});
  ExpectRefused(Bytes().Header(1000, 0).Zeros(100).str(), {"1000 tensors cannot fit"});
  // Metadata.
  ExpectRefused(Bytes().Header(0, 1).U64(uint64_t{1} << 20).Zeros(16).str(),
                {"key of metadata entry 0 length 1048576 exceeds the limit of 65535"});
  ExpectRefused(Bytes().Header(0, 1).U64(100).Zeros(16).str(), {"key of metadata entry 0 needs 100 bytes", "truncated"});
  ExpectRefused(Bytes().Header(0, 1).Str("").U32(4).U32(1).str(), {"metadata entry 0 has an empty key"});
  ExpectRefused(Bytes().Header(0, 2).Str("k").U32(4).U32(1).Str("k").U32(4).U32(2).str(),
                {"duplicate metadata key 'k'"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(13).U32(1).str(), {"key 'k' has unknown value type 13"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(8).U64(uint64_t{65} << 20).Zeros(8).str(),
                {"value of 'k' length 68157440 exceeds the limit of 67108864"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(8).U64(10).Zeros(3).str(), {"value of 'k' needs 10 bytes"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(9).U32(9).U64(1).U32(4).U64(1).U32(5).str(),
                {"array 'k' holds arrays; nested arrays are not supported"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(9).U32(77).U64(0).str(), {"array 'k' has unknown element type 77"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(9).U32(0).U64(uint64_t{1} << 27).str(),
                {"array 'k' length 134217728 exceeds the limit of 67108864"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(9).U32(4).U64(4).U32(1).str(), {"value of 'k' needs 16 bytes"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(9).U32(8).U64(2).Str("a").U64(5).str(),
                {"value of 'k'[1] needs 5 bytes"});
  ExpectRefused(Bytes().Header(0, 1).Str("k").U32(9).U32(8).U64(1000).Zeros(100).str(),
                {"value of 'k' needs 8000 bytes"});
  ExpectRefused(Bytes().Header(0, 1).Str("general.alignment").U32(10).U64(32).str(),
                {"general.alignment must be u32, got u64"});
  ExpectRefused(Bytes().Header(0, 1).Str("general.alignment").U32(4).U32(48).str(),
                {"general.alignment = 48 is not a power of two"});
  ExpectRefused(Bytes().Header(0, 1).Str("general.alignment").U32(4).U32(0).str(),
                {"general.alignment = 0 is not a power of two"});
  // Tensor infos.
  auto one = [](const std::string& name, const std::vector<int64_t>& ne, uint32_t type, uint64_t offset,
                size_t data) { return Bytes().Header(1, 0).Info(name, ne, type, offset).PadTo(32).Zeros(data).str(); };
  ExpectRefused(one("", {4}, 0, 0, 16), {"tensor 0 has an empty name"});
  ExpectRefused(Bytes().Header(1, 0).Str("t").U32(5).Zeros(64).str(), {"tensor 't' has 5 dimensions (at most 4)"});
  ExpectRefused(one("t", {4, -2}, 0, 0, 16), {"tensor 't' has negative dimension ne[1] = -2"});
  ExpectRefused(one("t", {int64_t{1} << 32, int64_t{1} << 32}, 0, 0, 16), {"tensor 't' shape", "overflows the element count"});
  ExpectRefused(one("t", {int64_t{1} << 31, int64_t{1} << 31}, 0, 0, 16), {"tensor 't' shape", "overflows the byte count"});
  ExpectRefused(one("t", {32}, 9, 0, 64), {"tensor 't' has ggml type q8_1 (id 9)", "does not run"});
  ExpectRefused(one("t", {32}, 10, 0, 64), {"tensor 't' has ggml type q2_K (id 10)"});
  ExpectRefused(one("t", {32}, 28, 0, 64), {"tensor 't' has ggml type f64 (id 28)"});
  ExpectRefused(one("t", {32}, 4, 0, 64), {"q4_2 (removed from ggml)"});
  ExpectRefused(one("t", {32}, 43, 0, 64), {"tensor 't' has unknown ggml type id 43"});
  ExpectRefused(one("t", {48, 2}, 8, 0, 200), {"tensor 't' of q8_0 has rows of 48 values, not a multiple of its block of 32"});
  ExpectRefused(one("t", {128}, 12, 0, 144), {"tensor 't' of q4_K has rows of 128 values, not a multiple of its block of 256"});
  ExpectRefused(one("t", {}, 2, 0, 64), {"rows of 1 values"});
  ExpectRefused(one("t", {4}, 0, 0, 15), {"tensor 't' data [0, +16) runs past the 15-byte data section"});
  ExpectRefused(one("t", {4}, 0, uint64_t{1} << 63, 16), {"tensor 't' data [9223372036854775808, +16) runs past"});
  ExpectRefused(one("t", {4}, 0, 64, 16), {"tensor 't' data [64, +16) runs past"});
  ExpectRefused(one("t", {4}, 0, 16, 64), {"tensor 't' data offset 16 is not a multiple of the alignment 32"});
  ExpectRefused(Bytes().Header(2, 0).Info("a", {4}, 0, 0).Info("a", {4}, 0, 32).PadTo(32).Zeros(64).str(),
                {"duplicate tensor name 'a'"});
  ExpectRefused(Bytes().Header(2, 0).Info("a", {16}, 0, 0).Info("b", {4}, 0, 32).PadTo(32).Zeros(64).str(),
                {"tensors 'a' and 'b' overlap"});
  ExpectRefused(Bytes().Header(2, 0).Info("a", {4}, 0, 32).Info("b", {32}, 0, 0).PadTo(32).Zeros(128).str(),
                {"tensors 'b' and 'a' overlap"});
  ExpectRefused(Bytes().Header(1, 0).Info("t", {0}, 0, 0).str(), {"data section would start at offset 64, past the end of the 57-byte file"});
  // Element alignment when the file's alignment is below it.
  // header 24 + alignment entry 33 + info 33: the data starts at 90, not a multiple of 4.
  ExpectRefused(Bytes().Header(1, 1).Str("general.alignment").U32(4).U32(2).Info("t", {1}, 0, 0).PadTo(2).Zeros(8).str(),
                {"tensor 't' data at file offset 90 is not aligned to 4 bytes"});
}

// Mutates a valid image many ways (bit flips, little-endian fields overwritten with edge values,
// truncation, inserted and deleted bytes); the reader must only ever answer, and every view it
// hands out must lie inside the image. Run under ASan/UBSan (the sanitize preset) to catch strays.
TEST(GgufRead, MutatedFilesNeverCrash) {
  const std::string base = SmallFile();
  std::mt19937_64 rng(20261202);
  const uint64_t edge[] = {0, 1, 2, 3, 4, 5, 8, 9, 13, 31, 32, 0xffffffffull, ~uint64_t{0}, uint64_t{1} << 63};
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string img = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !img.empty(); ++e) {
      const size_t at = rng() % img.size();
      switch (rng() % 5) {
        case 0: img[at] ^= static_cast<char>(1u << (rng() % 8)); break;
        case 1: {  // a 4- or 8-byte field set to an edge value
          const uint64_t v = edge[rng() % (sizeof(edge) / sizeof(edge[0]))];
          const size_t width = rng() % 2 ? 4 : 8;
          for (size_t i = 0; i < width && at + i < img.size(); ++i) img[at + i] = static_cast<char>(v >> (8 * i));
          break;
        }
        case 2: img.resize(at); break;
        case 3: img.insert(at, 1, static_cast<char>(rng())); break;
        case 4: img.erase(at, 1); break;
      }
    }
    StatusOr<GgufFile> f = GgufFile::FromBytes(img, "mutated.gguf");
    if (!f.ok()) {
      EXPECT_NE(f.status().message().find("mutated.gguf"), std::string::npos) << f.status().message();
      continue;
    }
    ++accepted;
    for (const std::string& key : f.value().Keys()) EXPECT_TRUE(f.value().TypeOf(key).ok());
    for (const GgufTensor& t : f.value().tensors()) {
      unsigned sum = 0;
      for (size_t i = 0; i < t.nbytes; ++i) sum += static_cast<const uint8_t*>(t.data)[i];
      (void)sum;
      EXPECT_LE(t.nbytes, img.size());
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside tensor data and metadata values stay valid
}

TEST(GgufRead, AcceptedOddities) {
  // Zero-size tensors (ggml allows them), tensors in any order with gaps, version 2, no metadata.
  Bytes b;
  b.Header(3, 0, 2).Info("z", {0, 4}, 8, 64).Info("b", {4}, 0, 32).Info("a", {2}, 1, 0).PadTo(32).Zeros(96);
  StatusOr<GgufFile> f = Parse(b.str());
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f.value().version(), 2u);
  EXPECT_EQ(f.value().Find("z")->nbytes, 0u);
  EXPECT_EQ(f.value().Find("z")->data, nullptr);
  EXPECT_EQ(f.value().Find("z")->shape, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(f.value().tensors()[0].name, "z");  // file order kept
  // No tensors and no padding after the metadata.
  ASSERT_TRUE(Parse(Bytes().Header(0, 1).Str("k").U32(7).U8(2).str()).ok());
  EXPECT_TRUE(Parse(Bytes().Header(0, 1).Str("k").U32(7).U8(2).str()).value().GetBool("k").value());
}

TEST(GgufRead, OpenNamesAMissingFile) {
  StatusOr<GgufFile> f = GgufFile::Open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/nonexistent/model.gguf"), std::string::npos) << f.status().message();
}

}  // namespace
}  // namespace tessera::io
