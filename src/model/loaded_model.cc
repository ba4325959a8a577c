#include "model/loaded_model.h"

#include <cstdlib>
#include <new>

#include "model/gguf_config.h"
#include "model/gguf_weights.h"

namespace tessera::model {
namespace {

// What the weight binder cannot see: it loads the tensors the config asks for, so tensors of
// layers beyond num_hidden_layers, or an untied config without an lm_head, would load silently
// as a different (truncated or tied) model.
Status CheckCheckpointAgainstConfig(const ModelConfig& c, const io::SafetensorsCheckpoint& ckpt) {
  StatusOr<std::string> prefix = ckpt.LanguageModelPrefix();
  if (!prefix.ok()) return prefix.status();  // the binder reports it the same way
  const std::string layers = prefix.value() + "layers.";
  for (const std::string& name : ckpt.TensorNames()) {
    if (name.compare(0, layers.size(), layers) != 0) continue;
    const char* digits = name.c_str() + layers.size();
    char* end = nullptr;
    const long long index = std::strtoll(digits, &end, 10);
    if (end == digits || *end != '.') continue;
    if (index >= c.num_hidden_layers)
      return InvalidArgument("LoadedModel: config.json has num_hidden_layers = " + std::to_string(c.num_hidden_layers) +
                             " but checkpoint '" + ckpt.path() + "' holds tensors of layer " + std::to_string(index) +
                             " (e.g. '" + name.substr(0, 200) + "')");
  }
  if (!c.tie_word_embeddings && !ckpt.LmHeadName())
    return InvalidArgument("LoadedModel: config.json has tie_word_embeddings = false but checkpoint '" + ckpt.path() +
                           "' has no lm_head.weight (the output projection an untied model needs)");
  return Status::Ok();
}

// Converted or repacked weights are copies: their allocation can fail.
template <typename Bind>
StatusOr<GemmaWeights> BindCatchingOom(const std::string& path, Bind bind) {
  try {
    return bind();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("LoadedModel::Load: out of memory converting or repacking the weights of " + path);
  }
}

}  // namespace

StatusOr<std::unique_ptr<LoadedModel>> LoadedModel::LoadGguf(const std::string& path, const WeightLoadOptions& options) {
  StatusOr<io::GgufFile> file = io::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  StatusOr<GgufModelConfig> config = GgufToModelConfig(file.value());
  if (!config.ok()) return config.status();
  StatusOr<GemmaArch> arch = BuildArch(config.value().config);
  if (!arch.ok()) return arch.status();
  // The stored Gemma 3 norm weights are already 1 + w (GgufModelConfig::norm_weights_shifted).
  if (config.value().norm_weights_shifted) arch.value().norm_offset = 0.0f;
  TESSERA_RETURN_IF_ERROR(CheckGgufTensors(file.value(), arch.value()));
  std::unique_ptr<LoadedModel> m(new LoadedModel(path, std::move(config.value().config)));
  m->inferred_ = std::move(config.value().inferred);
  m->gguf_.emplace(std::move(file.value()));
  StatusOr<GemmaWeights> weights =
      BindCatchingOom(path, [&] { return LoadGgufWeights(*m->gguf_, arch.value(), options); });
  if (!weights.ok()) return weights.status();
  m->model_ = std::make_unique<GemmaModel>(std::move(arch.value()), std::move(weights.value()));
  return m;
}

StatusOr<std::unique_ptr<LoadedModel>> LoadedModel::Load(const std::string& dir, const WeightLoadOptions& options) {
  if (IsGgufFile(dir)) return LoadGguf(dir, options);
  StatusOr<ModelConfig> config = LoadModelConfig(dir);
  if (!config.ok()) return config.status();
  StatusOr<GemmaArch> arch = BuildArch(config.value());
  if (!arch.ok()) return arch.status();
  StatusOr<io::SafetensorsCheckpoint> ckpt = io::SafetensorsCheckpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  TESSERA_RETURN_IF_ERROR(CheckCheckpointAgainstConfig(config.value(), ckpt.value()));
  std::unique_ptr<LoadedModel> m(new LoadedModel(dir, std::move(config.value())));
  m->ckpt_.emplace(std::move(ckpt.value()));
  StatusOr<GemmaWeights> weights =
      BindCatchingOom(dir, [&] { return LoadGemmaWeights(*m->ckpt_, arch.value(), options); });
  if (!weights.ok()) return weights.status();
  m->model_ = std::make_unique<GemmaModel>(std::move(arch.value()), std::move(weights.value()));
  return m;
}

}  // namespace tessera::model
