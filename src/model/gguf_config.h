// ModelConfig from a GGUF file's metadata, for the Gemma 3 / Gemma 4 text decoders as llama.cpp's
// converter (convert_hf_to_gguf.py) writes them: general.architecture "gemma3" or "gemma4".
//
// The metadata is translated into the Hugging Face config it stands for and parsed by
// ParseModelConfig, so every range and consistency check of config.json applies unchanged; a
// failure there names the GGUF key the field came from. What the file does not say is inferred as
// llama.cpp infers it (docs/gguf-models.md lists each case): Gemma 3's query_pre_attn_scalar
// (head_dim, or hidden / heads at 62 layers, unless `gemma3.attention.scale` is given), Gemma 3's
// layer pattern (every 6th layer full unless the pattern key says otherwise), Gemma 4's
// proportional RoPE (from the rope_freqs tensor: 1 for a rotated pair, a huge factor for the rest).
// Other architectures (an mmproj "clip" file, gemma2, gemma3n, ...), MoE, fused QKV, RoPE scaling
// other than linear and anything else the engine does not run are refused naming the key or tensor.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "tessera/gguf.h"
#include "tessera/status.h"

namespace tessera::model {

struct GgufModelConfig {
  ModelConfig config;        // model_type gemma3_text or gemma4_text (a GGUF holds the text decoder only)
  std::string architecture;  // general.architecture
  // Gemma 3: the converter stored every RMSNorm weight as 1 + w (Gemma3RMSNorm's scale), so the
  // norms run with offset 0 on the stored value, which equals the f32 1 + w exactly.
  bool norm_weights_shifted = false;
  // One line per value the file does not hold, saying what was assumed.
  std::vector<std::string> inferred;
};

StatusOr<GgufModelConfig> GgufToModelConfig(const io::GgufFile& file);

// Whether `path` is a regular file starting with the GGUF magic.
bool IsGgufFile(const std::string& path);

}  // namespace tessera::model
