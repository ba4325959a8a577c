// Issue 17, failure paths and unclear errors on the files a user names: a FIFO, device, directory
// or symlink loop where config.json, a checkpoint, tokenizer.model or a .npy is expected; JSON
// nested deep enough to overflow a recursive walk; .npy headers with nonsense shapes; a checkpoint
// whose tensors disagree with its config. Each must be an immediate error naming the path or field.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <string>

#include "io/json_nesting.h"
#include "tessera/npy.h"
#include "io/safetensors.h"
#include "io/safetensors_checkpoint.h"
#include "model/config.h"
#include "model/loaded_model.h"
#include "runtime/session.h"
#include "temp_dir.h"
#include "tiny_model.h"
#include "tessera/tokenizer.h"

#ifndef TESSERA_TESTDATA_DIR
#define TESSERA_TESTDATA_DIR "tests/testdata"
#endif

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using testing::TempDir;

using testing::WriteText;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `load` (which reads `fifo` somewhere) and returns its message. A load that blocks on the
// FIFO is a failure; it is then unblocked (a writer opens and closes the FIFO) so the test ends.
std::string MessageWithoutBlocking(const std::string& fifo, std::function<Status()> load) {
  std::future<Status> f = std::async(std::launch::async, std::move(load));
  if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked reading the FIFO " << fifo;
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) ::close(fd);
  }
  const Status st = f.get();
  EXPECT_FALSE(st.ok());
  return st.message();
}

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A copy of a small test checkpoint whose config.json the caller may edit.
std::string CopyModel(const TempDir& tmp, const std::string& name) {
  const std::string dir = tmp.File(name);
  fs::copy(TESSERA_TESTDATA_DIR "/models/" + name, dir);
  return dir;
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST(SpecialFiles, ConfigFifoDirectoryAndLoop) {
  TempDir tmp;
  const std::string fifo = tmp.File("config.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg = MessageWithoutBlocking(fifo, [&] { return model::LoadModelConfig(tmp.path()).status(); });
  EXPECT_HAS(msg, fifo);
  EXPECT_HAS(msg, "FIFO");

  TempDir as_dir;
  fs::create_directory(as_dir.File("config.json"));
  msg = model::LoadModelConfig(as_dir.path()).status().message();
  EXPECT_HAS(msg, "is a directory");
  EXPECT_EQ(msg.find("9223372036854775807"), std::string::npos) << msg;

  TempDir loop;
  fs::create_symlink("config.json", loop.File("config.json"));
  msg = model::LoadModelConfig(loop.path()).status().message();
  EXPECT_HAS(msg, "symbolic link loop");
}

TEST(SpecialFiles, CheckpointIsReportedAsWhatItIs) {
  TempDir tmp;
  const std::string fifo = tmp.File("model.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg =
      MessageWithoutBlocking(fifo, [&] { return io::SafetensorsCheckpoint::Open(tmp.path()).status(); });
  EXPECT_HAS(msg, "model.safetensors");
  EXPECT_HAS(msg, "FIFO");
  msg = MessageWithoutBlocking(fifo, [&] { return io::SafetensorsCheckpoint::Open(fifo).status(); });
  EXPECT_HAS(msg, "FIFO");
  msg = MessageWithoutBlocking(fifo, [&] { return io::SafetensorsFile::Open(fifo).status(); });
  EXPECT_HAS(msg, "FIFO");

  TempDir loop;
  fs::create_symlink("model.safetensors", loop.File("model.safetensors"));
  msg = io::SafetensorsCheckpoint::Open(loop.path()).status().message();
  EXPECT_HAS(msg, "symbolic link loop");
  msg = io::SafetensorsCheckpoint::Open(loop.File("model.safetensors")).status().message();
  EXPECT_HAS(msg, "symbolic link loop");

  TempDir dir;
  fs::create_directory(dir.File("model.safetensors"));
  msg = io::SafetensorsCheckpoint::Open(dir.path()).status().message();
  EXPECT_HAS(msg, "model.safetensors");
  EXPECT_HAS(msg, "is a directory");

  msg = io::SafetensorsCheckpoint::Open("/dev/null").status().message();
  EXPECT_HAS(msg, "character device");
}

TEST(SpecialFiles, ShardAndIndexFifo) {
  TempDir tmp;
  const std::string shard = tmp.File("a.safetensors");
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  WriteText(tmp.File("model.safetensors.index.json"), R"({"weight_map": {"x": "a.safetensors"}})");
  std::string msg =
      MessageWithoutBlocking(shard, [&] { return io::SafetensorsCheckpoint::Open(tmp.path()).status(); });
  EXPECT_HAS(msg, "a.safetensors");
  EXPECT_HAS(msg, "FIFO");

  TempDir idx;
  const std::string index = idx.File("model.safetensors.index.json");
  ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
  msg = MessageWithoutBlocking(index, [&] { return io::SafetensorsCheckpoint::Open(idx.path()).status(); });
  EXPECT_HAS(msg, "index.json");
  EXPECT_HAS(msg, "FIFO");
}

TEST(SpecialFiles, NpyFifoAndDirectory) {
  TempDir tmp;
  const std::string fifo = tmp.File("x.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string msg = MessageWithoutBlocking(fifo, [&] { return io::ReadNpy(fifo).status(); });
  EXPECT_HAS(msg, fifo);
  EXPECT_HAS(msg, "FIFO");
  fs::create_directory(tmp.File("d.npy"));
  msg = io::ReadNpy(tmp.File("d.npy")).status().message();
  EXPECT_HAS(msg, "is a directory");
}

TEST(SpecialFiles, TokenizerDirectoryAndFifoAreStatusErrors) {
  TempDir tmp;
  fs::create_directory(tmp.File("tokenizer.model"));
  std::string msg;
  EXPECT_NO_THROW(msg = tokenizer::SentencePieceTokenizer::Load(tmp.File("tokenizer.model")).status().message());
  EXPECT_HAS(msg, "is a directory");
  const std::string fifo = tmp.File("fifo.model");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  msg = MessageWithoutBlocking(fifo, [&] { return tokenizer::SentencePieceTokenizer::Load(fifo).status(); });
  EXPECT_HAS(msg, "FIFO");
  // Not a model at all: an error, not an exception.
  WriteText(tmp.File("junk.model"), std::string(1000, '\xff'));
  EXPECT_NO_THROW(msg = tokenizer::SentencePieceTokenizer::Load(tmp.File("junk.model")).status().message());
  EXPECT_HAS(msg, "junk.model");
}

TEST(JsonNesting, CountsBracketsOutsideStrings) {
  EXPECT_TRUE(io::CheckJsonNesting(Nested(64), "x").ok());
  EXPECT_FALSE(io::CheckJsonNesting(Nested(65), "x").ok());
  EXPECT_TRUE(io::CheckJsonNesting("{\"a\": \"" + std::string(1000, '[') + "\"}", "x").ok());
  EXPECT_TRUE(io::CheckJsonNesting(R"({"a\"[[[[": [1]})", "x", 2).ok());
  EXPECT_HAS(io::CheckJsonNesting(Nested(3), "thing", 2).message(), "thing");
}

TEST(JsonNesting, DeepConfigIsAnErrorNotAStackOverflow) {
  Json base = Json::parse(ReadText(TESSERA_TESTDATA_DIR "/models/gemma3_text/config.json"));
  std::string text = base.dump();
  const std::string key = "\"full_attention\":{";  // inside rope_parameters, copied when merged
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.insert(at + key.size(), "\"deep\":" + Nested(150000) + ",");
  const Status st = model::ParseModelConfig(text).status();
  EXPECT_FALSE(st.ok());
  EXPECT_HAS(st.message(), "nests deeper");

  TempDir tmp;
  WriteText(tmp.File("config.json"), text);
  EXPECT_HAS(model::LoadModelConfig(tmp.path()).status().message(), "config.json");
}

TEST(JsonNesting, DeepSafetensorsHeaderAndIndex) {
  const std::string header = "{\"__metadata__\": {\"a\": " + Nested(150000) + "}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const Status st = io::SafetensorsFile::FromBytes(bytes + header, "deep.safetensors").status();
  EXPECT_FALSE(st.ok());
  EXPECT_HAS(st.message(), "nests deeper");

  TempDir tmp;
  WriteText(tmp.File("model.safetensors.index.json"), "{\"metadata\": " + Nested(150000) + ", \"weight_map\": {}}");
  const std::string msg = io::SafetensorsCheckpoint::Open(tmp.path()).status().message();
  EXPECT_HAS(msg, "nests deeper");
}

std::string NpyImage(const std::string& shape) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header;
}

TEST(Npy, ShapesMustBeTuplesOfIntegers) {
  EXPECT_TRUE(io::ParseNpy(NpyImage("(2, 3)") + std::string(24, '\0'), "ok").ok());
  EXPECT_TRUE(io::ParseNpy(NpyImage("(4,)") + std::string(16, '\0'), "ok").ok());
  for (const char* bad : {"(abc, 64)", "(9, 64x)", "(9 64)", "(9,, 64)", "(-1, 4)", "(+3, 4)", "(, 4)", "9, 4", "()",
                          "(1, 2, 3)", "(99999999999999999999, 1)", ""}) {
    bool ok = true;
    EXPECT_NO_THROW(ok = io::ParseNpy(NpyImage(bad) + std::string(9 * 64 * 4, '\0'), "x.npy").ok()) << bad;
    EXPECT_FALSE(ok) << "shape " << bad << " was accepted";
  }
  const std::string msg = io::ParseNpy(NpyImage("(abc, 64)"), "x.npy").status().message();
  EXPECT_HAS(msg, "abc");
  EXPECT_HAS(msg, "x.npy");
}

// Loads a copy of the gemma3_text checkpoint whose config.json `edit` changed (the copy loads
// unchanged: the edit alone makes any error).
Status LoadWithEditedConfig(const std::function<void(Json&)>& edit) {
  TempDir tmp;
  const std::string dir = CopyModel(tmp, "gemma3_text");
  EXPECT_TRUE(model::LoadedModel::Load(dir).ok());
  Json c = Json::parse(ReadText(dir + "/config.json"));
  edit(c);
  WriteText(dir + "/config.json", c.dump());
  return model::LoadedModel::Load(dir).status();
}

TEST(CheckpointMatchesConfig, FewerLayersThanTheCheckpointIsAnError) {
  const Status st = LoadWithEditedConfig([](Json& c) {
    c["num_hidden_layers"] = 3;
    c["layer_types"] = Json::array({"sliding_attention", "sliding_attention", "full_attention"});
  });
  EXPECT_FALSE(st.ok());
  EXPECT_HAS(st.message(), "num_hidden_layers");
  EXPECT_HAS(st.message(), "layers.3.");
}

TEST(CheckpointMatchesConfig, UntiedEmbeddingsNeedAnLmHead) {
  const Status st = LoadWithEditedConfig([](Json& c) { c["tie_word_embeddings"] = false; });
  EXPECT_FALSE(st.ok());
  EXPECT_HAS(st.message(), "tie_word_embeddings");
  EXPECT_HAS(st.message(), "lm_head.weight");
}

TEST(Generate, NegativeMaxNewTokensIsAnError) {
  auto m = testing::MakeTinyModel({});
  runtime::SessionOptions o;
  o.max_context = 32;
  o.max_chunk = 8;
  auto s = runtime::Session::Create(*m, o, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<std::vector<int32_t>> out;
  runtime::Prompt p;
  p.tokens = {1, 2, 3};
  const Status st = testing::GenerateTokens(*s.value(), {p}, -1, {}, {}, &out);
  EXPECT_FALSE(st.ok());
  EXPECT_HAS(st.message(), "-1");
}

}  // namespace
}  // namespace tessera
