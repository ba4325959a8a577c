// The executable specification: one query row at a time, every key evaluated with the full
// predicate, double accumulation. Slow on purpose; every fast kernel is tested against it.
// Visible keys are accumulated in (position, slot) order, so the result does not depend on where
// a cache stores its keys: a ring store and a dense store holding the same tokens give bit-identical
// outputs, which the KV cache property tests rely on.
// Precision bf16 rounds each q element and each normalized softmax weight to bf16 before their
// products, as a bf16 model in transformers does. The softmax precisions other than f32 run here
// only (score_row.h).
// Non-finite values (docs/reliability.md): a masked key is never read; a visible key whose score
// q.k * scale is not finite makes its row NaN (checked before the soft cap, which would turn +-inf
// into +-cap); a non-finite V element reaches the output columns it is in by plain IEEE arithmetic
// (even at weight 0: 0 * inf is NaN). Only a row with no visible key gives zeros.
#include <algorithm>
#include <limits>
#include <vector>

#include "attention/kernels.h"
#include "attention/score_row.h"

namespace tessera::attn {

void ReferenceAttention(const AttentionParams& p) {
  const int64_t B = p.q.batch, Hq = p.q.heads, S_q = p.q.seq, Dv = p.v.dim;
  const int64_t group = Hq / p.k.heads;
  RowScratch rs(p);
  std::vector<double> acc(Dv);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t i = 0; i < S_q; ++i) {
        bool finite = true;
        const double max_s = ScoreRow(p, b, h, i, /*all_keys=*/false, rs, &finite);
        float* out = p.out.At(b, h, i);
        if (rs.order.empty() || !finite) {
          std::fill(out, out + Dv, rs.order.empty() ? 0.0f : std::numeric_limits<float>::quiet_NaN());
          continue;
        }
        SoftmaxRow(p, h, max_s, rs);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j : rs.order) {
          DecodeToF32(p.v.dtype, p.v.At(b, h / group, j), rs.v.data(), Dv);
          for (int64_t d = 0; d < Dv; ++d) acc[d] += rs.weights[j] * rs.v[d];
        }
        for (int64_t d = 0; d < Dv; ++d) out[d] = static_cast<float>(acc[d]);
      }
    }
  }
}

}  // namespace tessera::attn
