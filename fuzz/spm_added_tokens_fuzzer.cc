// libFuzzer target: a tokenizer.json beside a tokenizer.model
// (SentencePieceTokenizer::AddTokensBeyondModelFromText, what Tokenizer::FromCheckpointDir reads
// when a checkpoint has both files), on the test suite's gemma_style.model. On success the
// tokenizer must still serve: a text with the added contents in it encodes to ids that are the
// model's pieces or the file's added ids, and every id gives a piece without failing.
#include <climits>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "fuzz_check.h"
#include "tessera/tokenizer.h"

#ifndef TESSERA_TESTDATA_DIR
#define TESSERA_TESTDATA_DIR "tests/testdata"
#endif

namespace {

using tessera::tokenizer::SentencePieceTokenizer;

const std::string& ModelBytes() {
  static const std::string bytes = [] {
    std::ifstream f(TESSERA_TESTDATA_DIR "/tokenizer/gemma_style.model", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  return bytes;
}

void Check(const std::string& bytes) {
  auto r = SentencePieceTokenizer::FromSerializedModel(ModelBytes(), "gemma_style.model");
  FUZZ_CHECK(r.ok(), "the test model must load (run from the repository root)");
  SentencePieceTokenizer& t = *r.value();
  const tessera::Status st = t.AddTokensBeyondModelFromText(bytes, "fuzz.json");
  if (!st.ok()) {
    FUZZ_CHECK(!st.message().empty(), "an error must say what is wrong");
    return;
  }
  // The ids and contents the file may have added (what a valid entry looks like; the parser's
  // own rules decide which were taken, this only bounds what may come out).
  std::set<int64_t> added;
  std::string text = "<start_of_turn>user\n hi<image_soft_token>";
  const nlohmann::json root = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (root.is_object() && root.contains("added_tokens") && root["added_tokens"].is_array())
    for (const auto& a : root["added_tokens"]) {
      if (a.is_object() && a.contains("id") && a["id"].is_number_integer()) added.insert(a["id"].get<int64_t>());
      if (a.is_object() && a.contains("content") && a["content"].is_string()) text += a["content"].get<std::string>();
    }
  auto ids = t.EncodeWithSpecialTokens(text);
  FUZZ_CHECK(ids.ok(), "an accepted file must leave EncodeWithSpecialTokens working");
  for (int32_t id : ids.value())
    FUZZ_CHECK((id >= 0 && id < t.vocab_size()) || added.count(id), "an id neither a piece nor an added token");
  for (int64_t id : added)
    if (id >= INT32_MIN && id <= INT32_MAX) (void)t.Piece(static_cast<int32_t>(id));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("SentencePieceTokenizer::AddTokensBeyondModelFromText", [&] { Check(bytes); });
  return 0;
}
