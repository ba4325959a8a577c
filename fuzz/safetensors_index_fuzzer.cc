// libFuzzer target: the sharded checkpoint index, model.safetensors.index.json
// (io::SafetensorsCheckpoint::FromIndexText, what Open runs on an index file's text).
// Input: the index text, then optionally kShardMark and one safetensors image that every shard
// name opens to (so weight_map entries can resolve). Invariants: the shard opener is only ever
// asked for plain file names (no path leaves the index's directory); on success every weight_map
// tensor is listed, Get answers for each, and the detected prefix names an existing anchor.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "io/safetensors.h"
#include "io/safetensors_checkpoint.h"

namespace {

using tessera::StatusOr;
using tessera::io::SafetensorsCheckpoint;
using tessera::io::SafetensorsFile;

constexpr std::string_view kShardMark = "\n--shard--\n";

void Check(std::string_view input) {
  const size_t mark = input.find(kShardMark);
  const std::string_view index = input.substr(0, mark);
  const bool has_shard = mark != std::string_view::npos;
  const std::string_view shard = has_shard ? input.substr(mark + kShardMark.size()) : std::string_view();
  size_t opened = 0;
  auto open_shard = [&](const std::string& name) -> StatusOr<SafetensorsFile> {
    FUZZ_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                   name.find('\0') == std::string::npos,
               "a shard name that is not a plain file name reached the opener");
    ++opened;
    if (!has_shard) return tessera::InvalidArgument("no shard '" + name + "' in this input");
    return SafetensorsFile::FromBytes(shard, name);
  };
  StatusOr<SafetensorsCheckpoint> r = SafetensorsCheckpoint::FromIndexText(index, "fuzz.index.json", open_shard);
  if (!r.ok()) {
    FUZZ_CHECK(!r.status().message().empty(), "an error must say what is wrong");
    return;
  }
  const SafetensorsCheckpoint& c = r.value();
  FUZZ_CHECK(c.num_shards() == opened, "one shard per distinct file name");
  FUZZ_CHECK(c.num_tensors() == c.TensorNames().size(), "tensor count");
  for (const std::string& name : c.TensorNames()) {
    FUZZ_CHECK(c.Contains(name), "a listed tensor is not contained");
    StatusOr<tessera::io::SafetensorsTensor> t = c.Get(name);
    FUZZ_CHECK(t.ok() || t.status().code() == tessera::StatusCode::kUnimplemented, "Get failed on a listed tensor");
  }
  StatusOr<std::string> prefix = c.LanguageModelPrefix();
  if (prefix.ok()) {
    FUZZ_CHECK(c.HasLanguageModelTensor(std::string(SafetensorsCheckpoint::kPrefixAnchor)), "prefix without anchor");
    (void)c.GetLanguageModelTensor(SafetensorsCheckpoint::kPrefixAnchor);
  }
  (void)c.LmHeadName();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("SafetensorsCheckpoint::FromIndexText", [&] { Check(input); });
  return 0;
}
