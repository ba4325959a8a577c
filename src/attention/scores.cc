// AttentionScores: the intermediates of attention written out per (query, key) pair, for the ONNX
// adapters' score outputs. Built on the reference kernel's row (score_row.h), so the scores agree
// with what the reference kernel attends over.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/score_row.h"
#include "tessera/attention.h"

namespace tessera {

Status AttentionScores(const AttentionParams& p, ScoreStage stage, float masked_value, float* out) {
  TESSERA_RETURN_IF_ERROR(ValidateAttention(p));
  const int64_t B = p.q.batch, Hq = p.q.heads, S_q = p.q.seq, S_kv = p.k.seq;
  if (B * Hq * S_q * S_kv == 0) return Status::Ok();
  if (out == nullptr) return InvalidArgument("AttentionScores: out is null");
  const bool all_keys = stage == ScoreStage::kRaw || stage == ScoreStage::kSoftcapped;
  attn::RowScratch rs(p);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t i = 0; i < S_q; ++i) {
        float* row = out + ((b * Hq + h) * S_q + i) * S_kv;
        bool finite = true;
        const double max_s = attn::ScoreRow(p, b, h, i, all_keys, rs, &finite);
        switch (stage) {
          case ScoreStage::kRaw:
            for (int64_t j = 0; j < S_kv; ++j) row[j] = static_cast<float>(rs.raw[j]);
            break;
          case ScoreStage::kSoftcapped:
            for (int64_t j = 0; j < S_kv; ++j)
              row[j] = static_cast<float>(p.softcap > 0 ? p.softcap * std::tanh(rs.raw[j] / p.softcap) : rs.raw[j]);
            break;
          case ScoreStage::kMasked:
            for (int64_t j = 0; j < S_kv; ++j) row[j] = rs.visible[j] ? static_cast<float>(rs.scores[j]) : masked_value;
            break;
          case ScoreStage::kProbabilities:
            std::fill(row, row + S_kv, 0.0f);
            if (rs.order.empty()) break;
            if (!finite) {  // as the kernels: the whole row is NaN
              std::fill(row, row + S_kv, std::numeric_limits<float>::quiet_NaN());
              break;
            }
            attn::SoftmaxRow(p, h, max_s, rs);
            for (int64_t j : rs.order) row[j] = static_cast<float>(rs.weights[j]);
            break;
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera
