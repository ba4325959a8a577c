#include "model/drafter_config.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "io/input_file.h"
#include "io/json_nesting.h"

namespace tessera::model {
namespace {

using Json = nlohmann::json;
constexpr uint64_t kMaxConfigBytes = 16ull << 20;

Status Bad(const std::string& field, const std::string& detail) {
  return InvalidArgument("ParseDrafterConfig: " + field + " " + detail);
}

// An optional field that must hold an integer, or the default when absent.
StatusOr<int64_t> IntField(const Json& obj, const char* key, int64_t def, const std::string& prefix) {
  auto it = obj.find(key);
  if (it == obj.end()) return def;
  if (!it->is_number_integer()) return Bad(prefix + key, std::string("must be an integer, got ") + it->type_name());
  return it->get<int64_t>();
}

StatusOr<bool> BoolField(const Json& obj, const char* key, bool def, const std::string& prefix) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_boolean()) return Bad(prefix + key, std::string("must be a boolean, got ") + it->type_name());
  return it->get<bool>();
}

// The assistant architecture's constraints on its text stack (configuration_gemma4_assistant's
// validate_architecture): no PLE, no MoE, no double-wide MLP, every layer KV-shared.
Status CheckTextConstraints(const Json& text) {
  const std::string p = "text_config.";
  for (const char* key : {"hidden_size_per_layer_input", "vocab_size_per_layer_input"}) {
    StatusOr<int64_t> v = IntField(text, key, -1, p);
    if (!v.ok()) return v.status();
    // Absent takes the gemma4_text default (non-zero), which the assistant does not allow.
    if (v.value() != 0) return Bad(p + key, "must be 0 in a gemma4_assistant, got " + (v.value() < 0 ? std::string("the default") : std::to_string(v.value())));
  }
  for (const char* key : {"enable_moe_block", "use_double_wide_mlp"}) {
    StatusOr<bool> v = BoolField(text, key, false, p);
    if (!v.ok()) return v.status();
    if (v.value()) return Bad(p + key, "must be false in a gemma4_assistant");
  }
  StatusOr<int64_t> layers = IntField(text, "num_hidden_layers", -1, p);
  if (!layers.ok()) return layers.status();
  StatusOr<int64_t> shared = IntField(text, "num_kv_shared_layers", 0, p);
  if (!shared.ok()) return shared.status();
  // transformers fills 0 in as "all"; anything else but all leaves layers without K/V to read.
  if (shared.value() != 0 && shared.value() != layers.value())
    return Bad(p + "num_kv_shared_layers", "= " + std::to_string(shared.value()) +
                                               ": every layer of a gemma4_assistant is KV-shared (expected " +
                                               std::to_string(layers.value()) + ")");
  return Status::Ok();
}

StatusOr<DrafterConfig> Parse(const Json& root) {
  auto type = root.find("model_type");
  if (type == root.end() || !type->is_string() || type->get<std::string>() != "gemma4_assistant")
    return InvalidArgument(std::string("ParseDrafterConfig: model_type must be \"gemma4_assistant\", got ") +
                           (type == root.end() ? std::string("none") : type->dump().substr(0, 80)));
  DrafterConfig c;
  StatusOr<bool> ordered = BoolField(root, "use_ordered_embeddings", false, "");
  if (!ordered.ok()) return ordered.status();
  c.ordered_embeddings = ordered.value();
  StatusOr<int64_t> centroids = IntField(root, "num_centroids", 2048, "");
  if (!centroids.ok()) return centroids.status();
  StatusOr<int64_t> top_k = IntField(root, "centroid_intermediate_top_k", 32, "");
  if (!top_k.ok()) return top_k.status();
  c.num_centroids = centroids.value();
  c.centroid_top_k = top_k.value();
  StatusOr<int64_t> backbone = IntField(root, "backbone_hidden_size", 1536, "");
  if (!backbone.ok()) return backbone.status();
  if (backbone.value() < 1 || backbone.value() > (int64_t{1} << 16))
    return Bad("backbone_hidden_size", "= " + std::to_string(backbone.value()) + " is out of range [1, 65536]");
  c.backbone_hidden_size = backbone.value();
  auto text = root.find("text_config");
  if (text == root.end() || !text->is_object())
    return Bad("text_config", "must be an object (the assistant's gemma4_text config)");
  TESSERA_RETURN_IF_ERROR(CheckTextConstraints(*text));
  Json t = *text;
  t["model_type"] = "gemma4_text";
  t["num_kv_shared_layers"] = 0;
  if (root.contains("tie_word_embeddings")) t["tie_word_embeddings"] = root["tie_word_embeddings"];
  StatusOr<ModelConfig> parsed = ParseModelConfig(t.dump());
  if (!parsed.ok())
    return Status(parsed.status().code(), "ParseDrafterConfig: text_config: " + parsed.status().message());
  c.text = std::move(parsed.value());
  if (c.ordered_embeddings) {
    const int64_t V = c.text.vocab_size;
    if (c.num_centroids < 1 || c.num_centroids > V || V % c.num_centroids != 0)
      return Bad("num_centroids", "= " + std::to_string(c.num_centroids) + " must divide text_config.vocab_size " +
                                      std::to_string(V) + " (equal clusters of the vocabulary)");
    if (c.centroid_top_k < 1 || c.centroid_top_k > c.num_centroids)
      return Bad("centroid_intermediate_top_k", "= " + std::to_string(c.centroid_top_k) + " is outside [1, num_centroids " +
                                                    std::to_string(c.num_centroids) + "]");
  }
  return c;
}

}  // namespace

StatusOr<DrafterConfig> ParseDrafterConfig(std::string_view json_text) {
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(json_text, "ParseDrafterConfig"));
  try {
    const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return InvalidArgument("ParseDrafterConfig: not valid JSON");
    if (!root.is_object())
      return InvalidArgument(std::string("ParseDrafterConfig: the config must be a JSON object, got ") +
                             root.type_name());
    return Parse(root);
  } catch (const std::exception& e) {  // nothing above should throw; never let it cross the API
    return InvalidArgument(std::string("ParseDrafterConfig: ") + e.what());
  }
}

StatusOr<DrafterConfig> LoadDrafterConfig(const std::string& path) {
  std::string file = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    file = path + (path.back() == '/' ? "" : "/") + "config.json";
  StatusOr<std::string> read = io::ReadInputFile(file, "config", kMaxConfigBytes);
  if (!read.ok()) return Status(read.status().code(), "LoadDrafterConfig: " + read.status().message());
  StatusOr<DrafterConfig> c = ParseDrafterConfig(read.value());
  if (!c.ok()) return Status(c.status().code(), "LoadDrafterConfig: '" + file + "': " + c.status().message());
  return c;
}

}  // namespace tessera::model
