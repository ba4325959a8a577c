// Dense additive-bias export: the interop format of ONNX Attention / HF eager attention.
// O(S_q * S_kv) by nature; never used on the fast path.
#include <cmath>
#include <limits>
#include <string>

#include "attention/mask.h"
#include "tessera/attention.h"

namespace tessera {

Status AttentionBias(const MaskSpec& m, int64_t batch, int64_t s_q, int64_t s_kv, float masked_value, float* out) {
  if (batch <= 0 || s_q < 0 || s_kv < 0)
    return InvalidArgument("AttentionBias: invalid shape [" + std::to_string(batch) + ", 1, " + std::to_string(s_q) +
                           ", " + std::to_string(s_kv) + "]");
  if (out == nullptr) return InvalidArgument("AttentionBias: out is null");
  if ((s_q > 0 && m.q_pos == nullptr) || (s_kv > 0 && m.k_pos == nullptr))
    return InvalidArgument("AttentionBias: q_pos and k_pos are required");
  if ((m.q_block == nullptr) != (m.k_block == nullptr))
    return InvalidArgument("AttentionBias: q_block and k_block must be given together");
  if (m.window_left < -1 || m.window_right < -1)
    return InvalidArgument("AttentionBias: window entries must be >= -1");
  if (m.dense.present() && m.dense.stride_head != 0)
    return InvalidArgument("AttentionBias: a per-head dense mask cannot be exported as [B, 1, S_q, S_kv]");
  if (!(masked_value < 0))
    return InvalidArgument("AttentionBias: masked_value " + std::to_string(masked_value) + " must be negative");
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t valid = attn::KvValid(m, b, s_kv);
    if (valid < 0 || valid > s_kv)
      return InvalidArgument("AttentionBias: kv_valid[" + std::to_string(b) + "] = " + std::to_string(valid) +
                             " is outside [0, " + std::to_string(s_kv) + "]");
    for (int64_t i = 0; i < s_q; ++i) {
      const int32_t qp = m.q_pos[b * s_q + i];
      const int32_t qb = m.q_block ? m.q_block[b * s_q + i] : -1;
      float* row = out + (b * s_q + i) * s_kv;
      for (int64_t j = 0; j < s_kv; ++j) {
        const int32_t kb = m.k_block ? m.k_block[b * s_kv + j] : -1;
        float x = masked_value;
        if (j < valid && attn::StructuredVisible(m, qp, qb, m.k_pos[b * s_kv + j], kb)) {
          const float d = attn::DenseTerm(m.dense, b, 0, i, j);
          if (std::isnan(d))
            return InvalidArgument("AttentionBias: dense bias is NaN at [" + std::to_string(b) + ", 0, " +
                                   std::to_string(i) + ", " + std::to_string(j) + "]");
          if (d != -std::numeric_limits<float>::infinity()) x = d;
        }
        row[j] = x;
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera
