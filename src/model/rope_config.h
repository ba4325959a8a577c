// Rotary position embedding parameters of one attention layer type, as transformers resolves
// them (modeling_rope_utils.py in transformers 5.24), and the inverse frequencies they produce.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::model {

enum class RopeType {
  kDefault,       // "default": inv_freq[i] = theta^(-2i/D), i < D/2
  kLinear,        // "linear": default / factor (Gemma 3 global layers of the 4B/12B/27B, factor 8)
  kProportional,  // "proportional" (Gemma 4 full layers): the first floor(p*D/2) frequencies are
                  // theta^(-2i/D) (exponent over the FULL D), the rest are 0 (no rotation); / factor
};
const char* RopeTypeName(RopeType t);

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;              // rope_theta
  double factor = 1.0;                 // "factor" (linear: required; proportional: default 1)
  double partial_rotary_factor = 1.0;  // proportional only; fraction p of the D/2 pairs rotated
  // cos/sin are multiplied by this (HF `attention_scaling`); 1 for all three supported types.
  double attention_scaling = 1.0;
};

// inv_freq: [head_dim / 2] f32 for the ops::Rope kernel (rotate-half pairs (i, i + D/2)),
// computed in f32 like transformers (1 / theta^(float(2i) / D), then / factor). head_dim even.
// Within 1 ulp of torch's values (its vectorized powf and libm's powf differ by up to an ulp).
std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int64_t head_dim);

// Number of rotated pairs (non-zero frequencies) for a layer of width head_dim.
int64_t RopeRotaryPairs(const RopeConfig& rope, int64_t head_dim);

}  // namespace tessera::model
