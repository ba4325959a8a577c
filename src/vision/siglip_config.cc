#include "vision/siglip_config.h"

#include <cmath>

#include "io/input_file.h"
#include "io/json_nesting.h"
#include "model/config_fields.h"
#include "tessera/attention.h"

namespace tessera::vision {
namespace {

using model::config_detail::Fields;
using model::config_detail::Json;

constexpr uint64_t kMaxConfigBytes = 16ull << 20;
// Bounds that keep every product of sizes far from overflow; real towers are well inside them.
constexpr int64_t kMaxWidth = 1 << 16, kMaxLayers = 1024, kMaxImageSize = 1 << 14;

Status Bad(const std::string& file, const std::string& field, const std::string& detail) {
  return InvalidArgument("vision config '" + file + "': " + field + " " + detail);
}

Status Range(const std::string& file, const std::string& field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return Bad(file, field,
               "= " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return Status::Ok();
}

// Reads the fields into c; messages from Fields name the field ("vision_config.<key>").
Status ReadFields(const Json& root, const std::string& file, SiglipConfig& c) {
  Fields top(root, "");
  CFG_ASSIGN(c.mm_tokens_per_image, top.Int("mm_tokens_per_image", c.mm_tokens_per_image));
  const Json* vc = top.Find("vision_config");
  if (vc == nullptr || vc->is_null()) return Status::Ok();  // Gemma3Config: a default SigLIP tower
  if (!vc->is_object()) return Bad(file, "vision_config", "must be an object");
  Fields f(*vc, "vision_config.");
  CFG_ASSIGN(std::optional<std::string> act, f.OptString("hidden_act", std::string("gelu_pytorch_tanh")));
  if (act && *act != "gelu_pytorch_tanh" && *act != "gelu_new")
    return Bad(file, "vision_config.hidden_act", "= \"" + *act + "\" is not supported (gelu_pytorch_tanh)");
  CFG_ASSIGN(c.hidden_size, f.Int("hidden_size", c.hidden_size));
  CFG_ASSIGN(c.intermediate_size, f.Int("intermediate_size", c.intermediate_size));
  CFG_ASSIGN(c.num_hidden_layers, f.Int("num_hidden_layers", c.num_hidden_layers));
  CFG_ASSIGN(c.num_attention_heads, f.Int("num_attention_heads", c.num_attention_heads));
  CFG_ASSIGN(c.num_channels, f.Int("num_channels", c.num_channels));
  CFG_ASSIGN(c.image_size, f.Int("image_size", c.image_size));
  CFG_ASSIGN(c.patch_size, f.Int("patch_size", c.patch_size));
  CFG_ASSIGN(double eps, f.Num("layer_norm_eps", c.layer_norm_eps));
  if (!(eps >= 0.0) || !std::isfinite(eps)) return Bad(file, "vision_config.layer_norm_eps", "must be finite and >= 0");
  c.layer_norm_eps = static_cast<float>(eps);
  return Status::Ok();
}

// The shape relations the encoder relies on.
Status Check(const SiglipConfig& c, const std::string& file) {
  TESSERA_RETURN_IF_ERROR(Range(file, "vision_config.hidden_size", c.hidden_size, 1, kMaxWidth));
  TESSERA_RETURN_IF_ERROR(Range(file, "vision_config.intermediate_size", c.intermediate_size, 1, kMaxWidth));
  TESSERA_RETURN_IF_ERROR(Range(file, "vision_config.num_hidden_layers", c.num_hidden_layers, 0, kMaxLayers));
  TESSERA_RETURN_IF_ERROR(Range(file, "vision_config.num_attention_heads", c.num_attention_heads, 1, c.hidden_size));
  TESSERA_RETURN_IF_ERROR(Range(file, "vision_config.num_channels", c.num_channels, 1, 64));
  TESSERA_RETURN_IF_ERROR(Range(file, "vision_config.image_size", c.image_size, 1, kMaxImageSize));
  TESSERA_RETURN_IF_ERROR(Range(file, "vision_config.patch_size", c.patch_size, 1, c.image_size));
  if (c.hidden_size % c.num_attention_heads != 0)
    return Bad(file, "vision_config.hidden_size", "= " + std::to_string(c.hidden_size) +
                                                      " is not a multiple of num_attention_heads = " +
                                                      std::to_string(c.num_attention_heads));
  if (c.head_dim() > kMaxHeadDim)
    return Bad(file, "vision_config.num_attention_heads", "gives head_dim " + std::to_string(c.head_dim()) +
                                                              " above the supported " + std::to_string(kMaxHeadDim));
  if (c.image_size % c.patch_size != 0)
    return Bad(file, "vision_config.image_size", "= " + std::to_string(c.image_size) +
                                                     " is not a multiple of patch_size = " + std::to_string(c.patch_size));
  TESSERA_RETURN_IF_ERROR(Range(file, "mm_tokens_per_image", c.mm_tokens_per_image, 1, c.num_patches()));
  const int64_t side = c.tokens_per_side();
  if (side * side != c.mm_tokens_per_image || c.patches_per_side() % side != 0)
    return Bad(file, "mm_tokens_per_image",
               "= " + std::to_string(c.mm_tokens_per_image) + " must be a square whose side divides the " +
                   std::to_string(c.patches_per_side()) + " patches per side (image_size / patch_size)");
  return Status::Ok();
}

}  // namespace

int64_t SiglipConfig::tokens_per_side() const {
  int64_t s = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(mm_tokens_per_image))));
  while (s > 0 && s * s > mm_tokens_per_image) --s;
  return std::max<int64_t>(s, 1);
}

StatusOr<SiglipConfig> ParseSiglipConfig(std::string_view json_text, const std::string& file) {
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(json_text, "vision config '" + file + "'"));
  try {
    const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return InvalidArgument("vision config '" + file + "': not valid JSON");
    if (!root.is_object()) return InvalidArgument("vision config '" + file + "': the top level must be an object");
    SiglipConfig c;
    Status s = ReadFields(root, file, c);
    if (!s.ok()) return Status(s.code(), "vision config '" + file + "': " + s.message());
    TESSERA_RETURN_IF_ERROR(Check(c, file));
    return c;
  } catch (const std::exception& e) {  // nothing above should throw; never let it cross the API
    return InvalidArgument("vision config '" + file + "': " + e.what());
  }
}

StatusOr<SiglipConfig> LoadSiglipConfig(const std::string& dir) {
  const std::string file = dir + (!dir.empty() && dir.back() == '/' ? "" : "/") + "config.json";
  StatusOr<std::string> text = io::ReadInputFile(file, "config", kMaxConfigBytes);
  if (!text.ok()) return text.status();
  return ParseSiglipConfig(text.value(), file);
}

}  // namespace tessera::vision
