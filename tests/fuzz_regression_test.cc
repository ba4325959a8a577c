// Regressions for what the libFuzzer targets in fuzz/ found (docs/reliability.md, Fuzzing).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tessera/npy.h"
#include "model/config.h"
#include "tessera/tokenizer.h"

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

}  // namespace
}  // namespace tessera
