// The executable specification: one query row at a time, every key evaluated with the full
// predicate, double accumulation. Slow on purpose; every fast kernel is tested against it.
// Visible keys are accumulated in (position, slot) order, so the result does not depend on where
// a cache stores its keys: a ring store and a dense store holding the same tokens give bit-identical
// outputs, which the KV cache property tests rely on.
// Precision bf16 rounds each q element and each normalized softmax weight to bf16 before their
// products, as a bf16 model in transformers does.
// Non-finite values (docs/reliability.md): a masked key is never read; a visible key whose score
// q.k * scale is not finite makes its row NaN (checked before the soft cap, which would turn +-inf
// into +-cap); a non-finite V element reaches the output columns it is in by plain IEEE arithmetic
// (even at weight 0: 0 * inf is NaN). Only a row with no visible key gives zeros.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/kernels.h"
#include "attention/mask.h"

namespace tessera::attn {

void ReferenceAttention(const AttentionParams& p) {
  const MaskSpec& m = p.mask;
  const int64_t B = p.q.batch, Hq = p.q.heads, S_q = p.q.seq, D = p.q.dim;
  const int64_t Hkv = p.k.heads, S_kv = p.k.seq, Dv = p.v.dim;
  const int64_t group = Hq / Hkv;
  const bool bf16 = p.precision == AttentionPrecision::kBf16;
  auto operand = [bf16](float x) { return bf16 ? Bf16ToF32(F32ToBf16(x)) : x; };
  std::vector<float> q_row(D), k_row(D), v_row(Dv);
  std::vector<double> weights(S_kv);
  std::vector<double> scores(S_kv), acc(Dv);
  std::vector<char> visible(S_kv);
  std::vector<int64_t> order;  // visible key slots sorted by position
  for (int64_t b = 0; b < B; ++b) {
    const int64_t valid = KvValid(m, b, S_kv);
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < S_q; ++i) {
        const float* q_in = reinterpret_cast<const float*>(p.q.At(b, h, i));
        for (int64_t d = 0; d < D; ++d) q_row[d] = operand(q_in[d]);
        const float* q = q_row.data();
        const int32_t qp = m.q_pos[b * S_q + i];
        const int32_t qb = m.q_block ? m.q_block[b * S_q + i] : -1;
        double max_s = -std::numeric_limits<double>::infinity();
        bool any_visible = false, scores_finite = true;
        for (int64_t j = 0; j < S_kv; ++j) {
          visible[j] = 0;
          if (j >= valid) continue;
          const int32_t kb = m.k_block ? m.k_block[b * S_kv + j] : -1;
          if (!StructuredVisible(m, qp, qb, m.k_pos[b * S_kv + j], kb)) continue;
          const double bias = DenseTerm(m.dense, b, h, i, j);
          if (bias == -std::numeric_limits<double>::infinity()) continue;
          DecodeToF32(p.k.dtype, p.k.At(b, g, j), k_row.data(), D);
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += static_cast<double>(q[d]) * k_row[d];
          s *= p.scale;
          scores_finite &= std::isfinite(s);  // (a NaN or +inf bias is refused by ValidateAttention)
          if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
          s += bias;
          scores[j] = s;
          visible[j] = 1;
          any_visible = true;
          max_s = std::max(max_s, s);
        }
        float* out = p.out.At(b, h, i);
        if (!any_visible || !scores_finite) {
          std::fill(out, out + Dv, any_visible ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
          continue;
        }
        order.clear();
        for (int64_t j = 0; j < S_kv; ++j)
          if (visible[j]) order.push_back(j);
        const int32_t* kp = m.k_pos + b * S_kv;
        std::sort(order.begin(), order.end(), [kp](int64_t x, int64_t y) { return kp[x] != kp[y] ? kp[x] < kp[y] : x < y; });
        double denom = 0;
        for (int64_t j : order) denom += weights[j] = std::exp(scores[j] - max_s);
        for (int64_t d = 0; d < Dv; ++d) acc[d] = 0;
        for (int64_t j : order) {
          const double w = bf16 ? operand(static_cast<float>(weights[j] / denom)) : weights[j] / denom;
          DecodeToF32(p.v.dtype, p.v.At(b, g, j), v_row.data(), Dv);
          for (int64_t d = 0; d < Dv; ++d) acc[d] += w * v_row[d];
        }
        for (int64_t d = 0; d < Dv; ++d) out[d] = static_cast<float>(acc[d]);
      }
    }
  }
}

}  // namespace tessera::attn
