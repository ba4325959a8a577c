#include "attention/score_row.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/mask.h"

namespace tessera::attn {
namespace {

constexpr double kNegInfD = -std::numeric_limits<double>::infinity();

// A value as the softmax's storage type holds it (ONNX casts around the softmax).
double RoundSoftmax(SoftmaxPrecision sp, double x) {
  switch (sp) {
    case SoftmaxPrecision::kF16: return F16ToF32(F32ToF16(static_cast<float>(x)));
    case SoftmaxPrecision::kBf16: return Bf16ToF32(F32ToBf16(static_cast<float>(x)));
    default: return x;
  }
}

}  // namespace

RowScratch::RowScratch(const AttentionParams& p)
    : q(p.q.dim), k(p.k.dim), v(p.v.dim), raw(p.k.seq), scores(p.k.seq), weights(p.k.seq), visible(p.k.seq) {
  order.reserve(p.k.seq);
}

double ScoreRow(const AttentionParams& p, int64_t b, int64_t h, int64_t i, bool all_keys, RowScratch& rs,
                bool* finite) {
  const MaskSpec& m = p.mask;
  const int64_t S_q = p.q.seq, S_kv = p.k.seq, D = p.q.dim;
  const int64_t g = h / (p.q.heads / p.k.heads);
  const bool bf16 = p.precision == AttentionPrecision::kBf16;
  const float* q_in = reinterpret_cast<const float*>(p.q.At(b, h, i));
  for (int64_t d = 0; d < D; ++d) rs.q[d] = bf16 ? Bf16ToF32(F32ToBf16(q_in[d])) : q_in[d];
  const int64_t valid = QueryKvValid(p, b, i);
  const int32_t qp = m.q_pos[b * S_q + i];
  const int32_t qb = m.q_block ? m.q_block[b * S_q + i] : -1;
  double max_s = kNegInfD;
  *finite = true;
  rs.order.clear();
  for (int64_t j = 0; j < S_kv; ++j) {
    bool vis = j < valid;
    if (vis) vis = StructuredVisible(m, qp, qb, m.k_pos[b * S_kv + j], m.k_block ? m.k_block[b * S_kv + j] : -1);
    const double bias = vis ? DenseTerm(m.dense, b, h, i, j) : 0.0;
    vis = vis && bias != kNegInfD;
    rs.visible[j] = vis;
    if (!vis && !all_keys) continue;
    DecodeToF32(p.k.dtype, p.k.At(b, g, j), rs.k.data(), D);
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += static_cast<double>(rs.q[d]) * rs.k[d];
    s *= p.scale;
    rs.raw[j] = s;
    if (!vis) continue;
    *finite &= std::isfinite(s);  // (checked before the soft cap, which would hide +-inf)
    if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
    rs.scores[j] = s + bias;
    max_s = std::max(max_s, rs.scores[j]);
    rs.order.push_back(j);
  }
  const int32_t* kp = m.k_pos + b * S_kv;
  std::sort(rs.order.begin(), rs.order.end(),
            [kp](int64_t x, int64_t y) { return kp[x] != kp[y] ? kp[x] < kp[y] : x < y; });
  return max_s;
}

void SoftmaxRow(const AttentionParams& p, int64_t h, double max_score, RowScratch& rs) {
  const SoftmaxPrecision sp = p.softmax_precision;
  const bool rounded = sp == SoftmaxPrecision::kF16 || sp == SoftmaxPrecision::kBf16;
  double max_s = max_score;
  if (rounded) {
    max_s = kNegInfD;
    for (int64_t j : rs.order) max_s = std::max(max_s, rs.scores[j] = RoundSoftmax(sp, rs.scores[j]));
  }
  double denom = p.sink ? std::exp(static_cast<double>(p.sink[h]) - max_s) : 0.0;
  for (int64_t j : rs.order) denom += rs.weights[j] = std::exp(rs.scores[j] - max_s);
  const bool bf16 = p.precision == AttentionPrecision::kBf16;
  for (int64_t j : rs.order) {
    double w = RoundSoftmax(sp, rs.weights[j] / denom);
    if (bf16) w = Bf16ToF32(F32ToBf16(static_cast<float>(w)));
    rs.weights[j] = w;
  }
}

}  // namespace tessera::attn
