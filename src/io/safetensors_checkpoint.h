// A Hugging Face checkpoint stored as safetensors: either one `model.safetensors` or shards listed
// by `model.safetensors.index.json` ({"metadata": {...}, "weight_map": {tensor: shard file}}).
// All shards are mapped and validated at Open(); lookups return views into the mappings.
//
// Language-model key prefixes. The text decoder's tensors carry a prefix that depends on the
// class that saved them:
//   "model.language_model."  Gemma3/Gemma4/Gemma4Unified ForConditionalGeneration (transformers >= 4.52)
//   "language_model.model."  Gemma3ForConditionalGeneration saved by transformers < 4.52
//   "model."                 *ForCausalLM (text-only)
//   ""                       a bare *TextModel
// Multimodal checkpoints also hold vision/audio towers (model.vision_tower.*, model.embed_vision.*,
// multi_modal_projector.*, ...); only the language-model prefix matters here. It is detected from
// the anchor tensor "<prefix>embed_tokens.weight", which only the text decoder has; a checkpoint
// where the anchor exists under two prefixes is refused as ambiguous.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"
#include "tessera/status.h"

namespace tessera::io {

class SafetensorsCheckpoint {
 public:
  static constexpr std::string_view kSingleFileName = "model.safetensors";
  static constexpr std::string_view kIndexFileName = "model.safetensors.index.json";
  static constexpr uint64_t kMaxIndexBytes = 100ull << 20;
  // Probe order of the language-model prefixes.
  static constexpr std::array<std::string_view, 4> kLanguageModelPrefixes = {"model.language_model.",
                                                                             "language_model.model.", "model.", ""};
  static constexpr std::string_view kPrefixAnchor = "embed_tokens.weight";

  // `path`: a directory holding model.safetensors (preferred, as transformers does) or
  // model.safetensors.index.json; or a path to a .safetensors file; or a path to an index file.
  static StatusOr<SafetensorsCheckpoint> Open(const std::string& path);
  // Opens one shard by its plain file name (never a path: the index is validated first).
  using ShardOpener = std::function<StatusOr<SafetensorsFile>(const std::string& shard)>;
  // The sharded form from an index's text; `index_path` names it in messages. Open() passes an
  // opener reading the index's directory; tests and fuzzing pass in-memory shards.
  static StatusOr<SafetensorsCheckpoint> FromIndexText(std::string_view text, const std::string& index_path,
                                                       const ShardOpener& open_shard);

  SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept = default;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) noexcept = default;

  const std::string& path() const { return path_; }
  size_t num_shards() const { return shards_.size(); }
  size_t num_tensors() const { return owner_.size(); }
  // All tensor names, sorted.
  std::vector<std::string> TensorNames() const;
  bool Contains(std::string_view tensor) const { return owner_.find(tensor) != owner_.end(); }
  // kInvalidArgument when absent (the message names the checkpoint), kUnimplemented for a dtype
  // other than F32/BF16/F16.
  StatusOr<SafetensorsTensor> Get(std::string_view tensor) const;
  // SafetensorsFile::GetIntegers on the shard holding `tensor`.
  StatusOr<std::vector<int64_t>> GetIntegers(std::string_view tensor, std::vector<int64_t>* shape = nullptr) const;

  // The detected language-model prefix (one of kLanguageModelPrefixes), or kInvalidArgument
  // when no prefix or more than one prefix holds the anchor tensor.
  StatusOr<std::string> LanguageModelPrefix() const;
  // Looks up a tensor by its canonical name relative to the text decoder ("norm.weight",
  // "layers.3.self_attn.q_proj.weight"), under the detected prefix.
  StatusOr<SafetensorsTensor> GetLanguageModelTensor(std::string_view canonical) const;
  bool HasLanguageModelTensor(std::string_view canonical) const;
  // Full key of the untied LM head for the detected prefix ("lm_head.weight", or
  // "language_model.lm_head.weight" for the old Gemma 3 layout) if the checkpoint has one;
  // nullopt means the head is tied to embed_tokens.
  std::optional<std::string> LmHeadName() const;

  // Prefix detection over any set of names (`has` answers membership).
  static StatusOr<std::string> DetectLanguageModelPrefix(const std::function<bool(std::string_view)>& has,
                                                         std::string_view where);

 private:
  SafetensorsCheckpoint() = default;
  static StatusOr<SafetensorsCheckpoint> OpenSingle(const std::string& file);
  static StatusOr<SafetensorsCheckpoint> OpenIndex(const std::string& index_path);
  void DetectPrefix();

  std::string path_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t, std::less<>> owner_;  // tensor -> shards_ index
  std::optional<std::string> lm_prefix_;
  std::string lm_prefix_error_;  // why lm_prefix_ is empty
};

}  // namespace tessera::io
