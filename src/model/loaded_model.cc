#include "model/loaded_model.h"

#include <cstdlib>
#include <new>

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

}  // namespace

StatusOr<std::unique_ptr<LoadedModel>> LoadedModel::Load(const std::string& dir, const WeightLoadOptions& options) {
  StatusOr<ModelConfig> config = LoadModelConfig(dir);
  if (!config.ok()) return config.status();
  StatusOr<GemmaArch> arch = BuildArch(config.value());
  if (!arch.ok()) return arch.status();
  StatusOr<io::SafetensorsCheckpoint> ckpt = io::SafetensorsCheckpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  TESSERA_RETURN_IF_ERROR(CheckCheckpointAgainstConfig(config.value(), ckpt.value()));
  std::unique_ptr<LoadedModel> m(new LoadedModel(dir, std::move(config.value()), std::move(ckpt.value())));
  // Converted or repacked weights are copies: their allocation can fail.
  auto load = [&]() -> StatusOr<GemmaWeights> {
    try {
      return LoadGemmaWeights(m->ckpt_, arch.value(), options);
    } catch (const std::bad_alloc&) {
      return ResourceExhausted("LoadedModel::Load: out of memory converting or repacking the weights of " + dir);
    }
  };
  StatusOr<GemmaWeights> weights = load();
  if (!weights.ok()) return weights.status();
  m->model_ = std::make_unique<GemmaModel>(std::move(arch.value()), std::move(weights.value()));
  return m;
}

}  // namespace tessera::model
