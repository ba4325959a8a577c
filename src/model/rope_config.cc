#include "model/rope_config.h"

#include <cmath>

namespace tessera::model {

const char* RopeTypeName(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kProportional: return "proportional";
  }
  return "?";
}

int64_t RopeRotaryPairs(const RopeConfig& rope, int64_t head_dim) {
  if (rope.type != RopeType::kProportional) return head_dim / 2;
  // Python: int(rope_proportion * head_dim // 2), float floor division (modeling_rope_utils.py:247).
  const int64_t pairs =
      static_cast<int64_t>(std::floor(rope.partial_rotary_factor * static_cast<double>(head_dim) / 2.0));
  return pairs < 0 ? 0 : (pairs > head_dim / 2 ? head_dim / 2 : pairs);
}

std::vector<float> RopeInverseFrequencies(const RopeConfig& rope, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const int64_t pairs = RopeRotaryPairs(rope, head_dim);
  std::vector<float> inv(static_cast<size_t>(half), 0.0f);
  const float base = static_cast<float>(rope.theta);
  const float dim = static_cast<float>(head_dim);
  const float factor = static_cast<float>(rope.factor);
  for (int64_t i = 0; i < pairs; ++i) {
    const float exponent = static_cast<float>(2 * i) / dim;
    float f = 1.0f / std::pow(base, exponent);
    if (rope.type != RopeType::kDefault) f /= factor;
    inv[static_cast<size_t>(i)] = f;
  }
  return inv;
}

}  // namespace tessera::model
