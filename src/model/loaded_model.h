// A model opened for inference: a Hugging Face directory (config.json parsed and validated, the
// safetensors checkpoint memory-mapped) or a GGUF file (its metadata mapped to the same config,
// model/gguf_config.h), the architecture resolved and every weight bound. The checkpoint or file
// stays open for the model's lifetime (weights are views into it unless converted).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors_checkpoint.h"
#include "model/config.h"
#include "tessera/gguf.h"
#include "model/gemma_model.h"
#include "model/weight_loader.h"

namespace tessera::model {

class LoadedModel {
 public:
  // `path`: a checkpoint directory, or a file starting with the GGUF magic.
  static StatusOr<std::unique_ptr<LoadedModel>> Load(const std::string& path, const WeightLoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const GemmaModel& model() const { return *model_; }
  // The safetensors checkpoint; only for a directory (is_gguf() false). A GGUF's config is a
  // text-only model type, so the vision paths never ask.
  const io::SafetensorsCheckpoint& checkpoint() const { return *ckpt_; }
  bool is_gguf() const { return gguf_.has_value(); }
  const io::GgufFile* gguf() const { return gguf_ ? &*gguf_ : nullptr; }
  // GGUF only: what the file did not hold and was inferred (GgufModelConfig::inferred).
  const std::vector<std::string>& inferred() const { return inferred_; }
  const std::string& dir() const { return dir_; }  // the path loaded (a directory or a GGUF file)

 private:
  LoadedModel(std::string dir, ModelConfig config) : dir_(std::move(dir)), config_(std::move(config)) {}
  static StatusOr<std::unique_ptr<LoadedModel>> LoadGguf(const std::string& path, const WeightLoadOptions& options);
  std::string dir_;
  ModelConfig config_;
  std::optional<io::SafetensorsCheckpoint> ckpt_;
  std::optional<io::GgufFile> gguf_;
  std::vector<std::string> inferred_;
  std::unique_ptr<GemmaModel> model_;
};

}  // namespace tessera::model
