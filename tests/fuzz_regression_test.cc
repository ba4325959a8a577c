// Regressions for what the libFuzzer targets in fuzz/ found (docs/reliability.md, Fuzzing).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tessera/chat_template.h"
#include "tessera/gguf.h"
#include "tessera/npy.h"
#include "model/config.h"
#include "tessera/tokenizer.h"
#include "temp_dir.h"

namespace tessera {
namespace {

std::string NpyV1(const std::string& dict, const std::string& data = "") {
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

// A zero dimension: memcpy was called with the empty vector's null data() (UB; UBSan reports it).
TEST(FuzzRegression, NpyWithZeroRowsParsesEmpty) {
  StatusOr<io::NpyArray> a = io::ParseNpy(NpyV1("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4), }\n"),
                                          "empty.npy");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a.value().shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(a.value().data.empty());
}

// A piece starting with a NUL byte: SentencePiece's trie builder (darts) threw "zero-length key"
// through the loader instead of a Status.
TEST(FuzzRegression, TokenizerPieceWithLeadingNulIsAnError) {
  // ModelProto{pieces: [{piece: "<unk>", type: UNKNOWN}, {piece: "\0b"}, {piece: "a"}]}
  const std::string model("\x0a\x09\x0a\x05<unk>\x18\x02\x0a\x04\x0a\x02\x00" "b\x0a\x03\x0a\x01" "a", 22);
  auto t = tokenizer::SentencePieceTokenizer::FromSerializedModel(model, "nul_piece.model");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nul_piece.model"), std::string::npos) << t.status().message();
}

// A linear RoPE factor that is a positive double but 0 (or inf) as float32 was accepted, and the
// full layers' inverse frequencies (divided by it in float32) became inf (or all zero).
TEST(FuzzRegression, RopeFactorOutsideFloat32IsAnError) {
  for (const char* factor : {"1e-300", "1e-40", "1e300"}) {
    const std::string json = std::string(R"({"model_type": "gemma3_text", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 6,
        "rope_scaling": {"rope_type": "linear", "factor": )") + factor + "}}";
    StatusOr<model::ModelConfig> c = model::ParseModelConfig(json);
    ASSERT_FALSE(c.ok()) << factor;
    EXPECT_NE(c.status().message().find("factor"), std::string::npos) << c.status().message();
  }
}

// A GGUF tensor with a zero dimension is empty even when its other dimensions multiply past 2^64:
// the reader accepted it (as ggml does) but the writer called the shape an overflow, so a file
// could not be copied through GgufWriter.
TEST(FuzzRegression, GgufEmptyTensorWithHugeDimsCopiesThroughTheWriter) {
  std::string img = "GGUF";
  auto u32 = [&](uint32_t v) { img.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { img.append(reinterpret_cast<const char*>(&v), 8); };
  u32(3);  // version
  u64(1);  // one tensor
  u64(0);  // no metadata
  u64(1);  // name "t"
  img += "t";
  u32(3);  // three dims, innermost first
  for (uint64_t d : {uint64_t{0}, uint64_t{1} << 40, uint64_t{1} << 40}) u64(d);  // shape [2^40, 2^40, 0]
  u32(0);  // f32
  u64(0);  // at offset 0
  img.resize(96, '\0');  // 73 bytes of header, padded to the alignment
  StatusOr<io::GgufFile> f = io::GgufFile::FromBytes(img, "empty.gguf");
  ASSERT_TRUE(f.ok()) << f.status().message();
  const io::GgufTensor& t = f.value().tensors()[0];
  EXPECT_EQ(t.nbytes, 0u);
  io::GgufWriter w;
  w.AddTensor(t.name, t.shape, t.dtype, [](char*) { return Status::Ok(); });
  testing::TempDir dir;
  const Status s = w.Write(dir.File("copy.gguf"));
  ASSERT_TRUE(s.ok()) << s.message();
  StatusOr<io::GgufFile> g = io::GgufFile::Open(dir.File("copy.gguf"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g.value().tensors()[0].shape, t.shape);
}

// A macro recursing 199 deep through 40 nested ifs is 8000 levels of evaluation: under ASan the
// fuzz build overflowed its 8 MiB stack before the depth count stopped it (fuzz/corpus/
// chat_template/deep_recursion). The renderer now also watches the stack itself.
TEST(FuzzRegression, ChatTemplateDeepRecursionIsAnErrorNotAStackOverflow) {
  std::string ifs, ends;
  for (int i = 0; i < 40; ++i) ifs += "{% if true %}", ends += "{% endif %}";
  const std::string src = "{% macro f(n) %}{% if n > 0 %}" + ifs + "{{ f(n - 1) | string }}" + ends +
                          "{% endif %}{% endmacro %}{{ f(199) }}";
  StatusOr<chat::ChatTemplate> t = chat::ChatTemplate::FromSource(src, "deep");
  ASSERT_TRUE(t.ok()) << t.status().message();
  StatusOr<std::string> out = t.value().Render(R"([{"role":"user","content":"x"}])", chat::RenderOptions{});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("chat template 'deep' line 1: template nests too deeply"), std::string::npos)
      << out.status().message();
}

}  // namespace
}  // namespace tessera
