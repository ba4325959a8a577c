// Where a model's chat template lives: chat_template.jinja in a checkpoint directory (what
// transformers saves now), else tokenizer_config.json's "chat_template" (a string, or a list of
// {name, template} of which we take "default"), else a processor's chat_template.json; in a GGUF,
// the tokenizer.chat_template metadata string.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "chat/template_impl.h"
#include "io/input_file.h"
#include "io/json_nesting.h"
#include "tessera/gguf.h"

namespace tessera::chat {
namespace {

using Json = nlohmann::json;
using Found = std::pair<std::string, std::string>;  // (name for messages, template text)

// tokenizer_config.json carries the vocabulary's added tokens and can be megabytes.
constexpr uint64_t kMaxConfigBytes = 256u << 20;

bool IsFile(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The "chat_template" member of a JSON config, or NotFound when it has none.
StatusOr<Found> TemplateFromJson(const std::string& file) {
  StatusOr<std::string> text = io::ReadInputFile(file, "tokenizer config", kMaxConfigBytes);
  if (!text.ok()) return text.status();
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(text.value(), file));
  const Json j = Json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(file + ": not a JSON object");
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return NotFound(file + " has no \"chat_template\"");
  const std::string name = file + ":chat_template";
  if (it->is_string()) return Found{name, it->get<std::string>()};
  if (!it->is_array()) return InvalidArgument(name + ": expected a string or a list of {name, template}");
  for (const Json& entry : *it) {
    if (!entry.is_object()) return InvalidArgument(name + ": each entry must be an object with name and template");
    auto n = entry.find("name"), t = entry.find("template");
    if (n == entry.end() || t == entry.end() || !n->is_string() || !t->is_string())
      return InvalidArgument(name + ": each entry needs string \"name\" and \"template\"");
    if (n->get<std::string>() == "default") return Found{name + "[default]", t->get<std::string>()};
  }
  return InvalidArgument(name + ": named templates but none called \"default\"");
}

StatusOr<Found> FromDirectory(const std::string& dir) {
  const std::string jinja = dir + "/chat_template.jinja";
  if (IsFile(jinja)) {
    StatusOr<std::string> text = io::ReadInputFile(jinja, "chat template", kMaxTemplateBytes);
    if (!text.ok()) return text.status();
    return Found{jinja, std::move(text).value()};
  }
  for (const char* file : {"tokenizer_config.json", "chat_template.json"}) {
    const std::string path = dir + "/" + file;
    if (!IsFile(path)) continue;
    StatusOr<Found> found = TemplateFromJson(path);
    if (found.ok() || found.status().code() != StatusCode::kNotFound) return found;
  }
  return NotFound("checkpoint '" + dir + "' has no chat template (chat_template.jinja, tokenizer_config.json, "
                  "chat_template.json)");
}

StatusOr<Found> FromGguf(const std::string& path) {
  StatusOr<io::GgufFile> f = io::GgufFile::Open(path);
  if (!f.ok()) return f.status();
  constexpr const char* kKey = "tokenizer.chat_template";
  if (!f.value().Has(kKey)) return NotFound("GGUF '" + path + "' has no " + std::string(kKey));
  StatusOr<std::string> text = f.value().GetString(kKey);
  if (!text.ok()) return text.status();
  return Found{path + ":" + kKey, std::move(text).value()};
}

}  // namespace

StatusOr<Found> ReadModelTemplate(const std::string& path) {
  if (IsDir(path)) return FromDirectory(path);
  if (IsFile(path)) {
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return FromGguf(path);
    return InvalidArgument("'" + path + "' is neither a checkpoint directory nor a .gguf file");
  }
  const std::string what = io::DescribeNonRegular(path);
  return InvalidArgument("model path '" + path + "' " + (what.empty() ? "cannot be read" : what));
}

}  // namespace tessera::chat
