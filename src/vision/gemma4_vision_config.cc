#include "vision/gemma4_vision_config.h"

#include "io/input_file.h"
#include "io/json_nesting.h"
#include "model/config_fields.h"

namespace tessera::vision {
namespace {

using model::config_detail::Fields;
using model::config_detail::Json;

constexpr uint64_t kMaxConfigBytes = 16ull << 20;

// The shared config parser names itself in its messages; ours name the file instead.
Status Retag(const Status& s, const std::string& where) {
  std::string m = s.message();
  const std::string tag = "ParseModelConfig: ";
  if (m.rfind(tag, 0) == 0) m = m.substr(tag.size());
  return Status(s.code(), where + ": " + m);
}

StatusOr<Json> ParseRoot(const std::string& text, const std::string& where) {
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(text, where));
  Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument(where + ": not a JSON object");
  const auto it = root.find("vision_config");
  if (it == root.end() || it->is_null())
    return InvalidArgument(where + ": has no vision_config (the checkpoint takes no images)");
  if (!it->is_object()) return InvalidArgument(where + ": vision_config must be an object");
  return Json(*it);
}

Status Positive(const std::string& where, const char* field, int64_t v) {
  if (v < 1 || v > (int64_t{1} << 24))
    return InvalidArgument(where + ": vision_config." + field + " = " + std::to_string(v) + " is out of range [1, " +
                           std::to_string(int64_t{1} << 24) + "]");
  return Status::Ok();
}

#define VC_ASSIGN(lhs, expr)                             \
  do {                                                   \
    auto vc_tmp = (expr);                                \
    if (!vc_tmp.ok()) return Retag(vc_tmp.status(), where); \
    lhs = vc_tmp.value();                                \
  } while (0)

Status ParseRope(const Fields& f, const std::string& where, double* theta) {
  const Json* rp = f.Find("rope_parameters");
  if (rp == nullptr || rp->is_null()) return Status::Ok();
  if (!rp->is_object()) return InvalidArgument(where + ": vision_config.rope_parameters must be an object");
  const Fields r(*rp, "vision_config.rope_parameters.");
  std::optional<std::string> type;
  VC_ASSIGN(type, r.OptString("rope_type", std::string("axial")));
  if (type && *type != "axial")
    return Unimplemented(where + ": vision_config.rope_parameters.rope_type = \"" + *type +
                         "\": the Gemma 4 vision tower supports only \"axial\"");
  VC_ASSIGN(*theta, r.Num("rope_theta", *theta));
  if (!(*theta > 0.0)) return InvalidArgument(where + ": vision_config.rope_parameters.rope_theta must be > 0");
  return Status::Ok();
}

}  // namespace

StatusOr<Gemma4VisionConfig> ParseGemma4VisionConfig(const std::string& json_text, const std::string& where) {
  StatusOr<Json> vc = ParseRoot(json_text, where);
  if (!vc.ok()) return vc.status();
  const Fields f(vc.value(), "vision_config.");
  Gemma4VisionConfig c;
  VC_ASSIGN(c.hidden_size, f.Int("hidden_size", c.hidden_size));
  VC_ASSIGN(c.intermediate_size, f.Int("intermediate_size", c.intermediate_size));
  VC_ASSIGN(c.num_hidden_layers, f.Int("num_hidden_layers", c.num_hidden_layers));
  VC_ASSIGN(c.num_attention_heads, f.Int("num_attention_heads", c.num_attention_heads));
  VC_ASSIGN(c.num_key_value_heads, f.Int("num_key_value_heads", c.num_key_value_heads));
  VC_ASSIGN(c.head_dim, f.Int("head_dim", c.head_dim));
  VC_ASSIGN(c.rms_norm_eps, f.Num("rms_norm_eps", c.rms_norm_eps));
  VC_ASSIGN(c.pooling_kernel_size, f.Int("pooling_kernel_size", c.pooling_kernel_size));
  VC_ASSIGN(c.patch_size, f.Int("patch_size", c.patch_size));
  VC_ASSIGN(c.position_embedding_size, f.Int("position_embedding_size", c.position_embedding_size));
  VC_ASSIGN(c.use_clipped_linears, f.Bool("use_clipped_linears", c.use_clipped_linears));
  VC_ASSIGN(c.standardize, f.Bool("standardize", c.standardize));
  std::optional<std::string> act;
  VC_ASSIGN(act, f.OptString("hidden_activation", std::string("gelu_pytorch_tanh")));
  if (act && *act != "gelu_pytorch_tanh" && *act != "gelu_new")
    return Unimplemented(where + ": vision_config.hidden_activation = \"" + *act +
                         "\": only gelu_pytorch_tanh is supported");
  bool bias = false;
  VC_ASSIGN(bias, f.Bool("attention_bias", false));
  if (bias) return Unimplemented(where + ": vision_config.attention_bias = true is not supported");
  TESSERA_RETURN_IF_ERROR(ParseRope(f, where, &c.rope_theta));
  for (auto [name, v] : {std::pair{"hidden_size", c.hidden_size}, {"intermediate_size", c.intermediate_size},
                         {"num_hidden_layers", c.num_hidden_layers}, {"num_attention_heads", c.num_attention_heads},
                         {"num_key_value_heads", c.num_key_value_heads}, {"head_dim", c.head_dim},
                         {"pooling_kernel_size", c.pooling_kernel_size}, {"patch_size", c.patch_size},
                         {"position_embedding_size", c.position_embedding_size}})
    TESSERA_RETURN_IF_ERROR(Positive(where, name, v));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return InvalidArgument(where + ": vision_config.num_attention_heads = " + std::to_string(c.num_attention_heads) +
                           " is not a multiple of num_key_value_heads = " + std::to_string(c.num_key_value_heads));
  // The axial rope splits each head into an x half and a y half, each rotated by halves.
  if (c.head_dim % 4 != 0 || c.head_dim > 512)
    return InvalidArgument(where + ": vision_config.head_dim = " + std::to_string(c.head_dim) +
                           " must be a multiple of 4 and at most 512 (axial rope)");
  if (!(c.rms_norm_eps >= 0.0)) return InvalidArgument(where + ": vision_config.rms_norm_eps must be >= 0");
  return c;
}

StatusOr<UnifiedVisionConfig> ParseUnifiedVisionConfig(const std::string& json_text, const std::string& where) {
  StatusOr<Json> vc = ParseRoot(json_text, where);
  if (!vc.ok()) return vc.status();
  const Fields f(vc.value(), "vision_config.");
  UnifiedVisionConfig c;
  VC_ASSIGN(c.patch_size, f.Int("patch_size", c.patch_size));
  VC_ASSIGN(c.pooling_kernel_size, f.Int("pooling_kernel_size", c.pooling_kernel_size));
  VC_ASSIGN(c.mm_embed_dim, f.Int("mm_embed_dim", c.mm_embed_dim));
  VC_ASSIGN(c.mm_posemb_size, f.Int("mm_posemb_size", c.mm_posemb_size));
  VC_ASSIGN(c.output_proj_dims, f.Int("output_proj_dims", c.output_proj_dims));
  VC_ASSIGN(c.rms_norm_eps, f.Num("rms_norm_eps", c.rms_norm_eps));
  for (auto [name, v] : {std::pair{"patch_size", c.patch_size}, {"pooling_kernel_size", c.pooling_kernel_size},
                         {"mm_embed_dim", c.mm_embed_dim}, {"mm_posemb_size", c.mm_posemb_size},
                         {"output_proj_dims", c.output_proj_dims}})
    TESSERA_RETURN_IF_ERROR(Positive(where, name, v));
  // The embedder's RMSNorm runs over output_proj_dims on the mm_embed_dim-wide hidden state.
  if (c.output_proj_dims != c.mm_embed_dim)
    return InvalidArgument(where + ": vision_config.output_proj_dims = " + std::to_string(c.output_proj_dims) +
                           " must equal mm_embed_dim = " + std::to_string(c.mm_embed_dim));
  if (!(c.rms_norm_eps >= 0.0)) return InvalidArgument(where + ": vision_config.rms_norm_eps must be >= 0");
  return c;
}

StatusOr<Gemma4VisionConfig> ReadGemma4VisionConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  StatusOr<std::string> text = io::ReadInputFile(path, "config", kMaxConfigBytes);
  if (!text.ok()) return text.status();
  return ParseGemma4VisionConfig(text.value(), path);
}

StatusOr<UnifiedVisionConfig> ReadUnifiedVisionConfig(const std::string& dir) {
  const std::string path = dir + "/config.json";
  StatusOr<std::string> text = io::ReadInputFile(path, "config", kMaxConfigBytes);
  if (!text.ok()) return text.status();
  return ParseUnifiedVisionConfig(text.value(), path);
}

}  // namespace tessera::vision
