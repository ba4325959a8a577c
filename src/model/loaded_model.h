// A model directory opened for inference: config.json parsed and validated, the safetensors
// checkpoint memory-mapped, the architecture resolved and every weight bound. The checkpoint
// stays open for the model's lifetime (weights are views into it unless converted).
#pragma once

#include <memory>
#include <string>

#include "io/safetensors_checkpoint.h"
#include "model/config.h"
#include "model/gemma_model.h"
#include "model/weight_loader.h"

namespace tessera::model {

class LoadedModel {
 public:
  static StatusOr<std::unique_ptr<LoadedModel>> Load(const std::string& dir, const WeightLoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const GemmaModel& model() const { return *model_; }
  const io::SafetensorsCheckpoint& checkpoint() const { return ckpt_; }
  const std::string& dir() const { return dir_; }

 private:
  LoadedModel(std::string dir, ModelConfig config, io::SafetensorsCheckpoint ckpt)
      : dir_(std::move(dir)), config_(std::move(config)), ckpt_(std::move(ckpt)) {}
  std::string dir_;
  ModelConfig config_;
  io::SafetensorsCheckpoint ckpt_;
  std::unique_ptr<GemmaModel> model_;
};

}  // namespace tessera::model
