#include "model/loaded_model.h"

#include <new>

namespace tessera::model {

StatusOr<std::unique_ptr<LoadedModel>> LoadedModel::Load(const std::string& dir, const WeightLoadOptions& options) {
  StatusOr<ModelConfig> config = LoadModelConfig(dir);
  if (!config.ok()) return config.status();
  StatusOr<GemmaArch> arch = BuildArch(config.value());
  if (!arch.ok()) return arch.status();
  StatusOr<io::SafetensorsCheckpoint> ckpt = io::SafetensorsCheckpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
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
