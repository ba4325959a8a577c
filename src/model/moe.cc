#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "ops/elementwise.h"

namespace tessera::model {
namespace {

int64_t Round16(int64_t words) { return (words + 15) / 16 * 16; }  // keeps every view 64-byte aligned

// r = rmsnorm(h) (weightless) * router_scale * hidden^-1/2, in transformers' order of products.
void RouterInput(const LayerWeights& w, const MoeShape& s, const float* h, int64_t n, float* r) {
  ops::RmsNorm(h, s.hidden, nullptr, 0.0f, s.eps, n, s.hidden, r, s.hidden);
  const float root = 1.0f / std::sqrt(static_cast<float>(s.hidden));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < s.hidden; ++i) r[t * s.hidden + i] = r[t * s.hidden + i] * w.router_scale[i] * root;
}

void SoftmaxRow(float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - m));
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

// Counting sort of the (token, slot) pairs by expert; within an expert, tokens ascending.
void GroupByExpert(const MoeShape& s, int64_t n, const MoeScratch& sc) {
  std::fill(sc.start, sc.start + s.experts + 1, 0);
  for (int64_t i = 0; i < n * s.top_k; ++i) ++sc.start[sc.choice[i] + 1];
  for (int64_t e = 0; e < s.experts; ++e) sc.start[e + 1] += sc.start[e];
  int32_t* cursor = sc.start + s.experts + 1;  // each group's next free place
  std::copy(sc.start, sc.start + s.experts, cursor);
  for (int64_t i = 0; i < n * s.top_k; ++i) sc.order[cursor[sc.choice[i]]++] = static_cast<int32_t>(i);
}

double GeluTanh(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

// y = rmsnorm(x) * (offset + w) in double, for one row of d.
void NormRow(const double* x, int64_t d, const float* w, float offset, float eps, double* y) {
  double ms = 0.0;
  for (int64_t i = 0; i < d; ++i) ms += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ms / static_cast<double>(d) + eps);
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] * inv * (w ? offset + w[i] : 1.0);
}

}  // namespace

MoeShape MoeShapeOf(const GemmaArch& a) {
  MoeShape s;
  s.hidden = a.hidden;
  s.experts = a.experts;
  s.top_k = a.top_k;
  s.inter = a.expert_intermediate;
  s.eps = a.rms_eps;
  s.norm_offset = a.norm_offset;
  return s;
}

int64_t MoeScratch::ExpertRows(const MoeShape& s, int64_t n) {
  return std::max(n, std::min(n, kBatchedTokens) * s.top_k);
}

int64_t MoeScratch::Words(const MoeShape& s, int64_t n) {
  const int64_t rows = ExpertRows(s, n);
  return 2 * Round16(n * s.hidden) + 2 * Round16(rows * s.hidden) + Round16(n * s.experts) + 3 * Round16(n * s.top_k) +
         Round16(2 * (s.experts + 1)) + 2 * Round16(rows * s.inter);
}

MoeScratch MoeScratch::Carve(const MoeShape& s, int64_t n, float* base) {
  MoeScratch c;
  auto take = [&base](int64_t words) {
    float* p = base;
    base += Round16(words);
    return p;
  };
  c.normed = take(n * s.hidden);
  c.scores = take(n * s.experts);
  c.choice = reinterpret_cast<int32_t*>(take(n * s.top_k));
  c.weight = take(n * s.top_k);
  c.order = reinterpret_cast<int32_t*>(take(n * s.top_k));
  c.start = reinterpret_cast<int32_t*>(take(2 * (s.experts + 1)));
  const int64_t rows = ExpertRows(s, n);
  c.rows = take(rows * s.hidden);
  c.gate = take(rows * s.inter);
  c.up = take(rows * s.inter);
  c.out = take(rows * s.hidden);
  c.result = take(n * s.hidden);
  return c;
}

void SelectExperts(const float* probs, int64_t experts, int64_t top_k, const float* expert_scale, int32_t* choice,
                   float* weight) {
  // Insertion into a descending list of top_k: a later expert displaces only a strictly larger
  // probability's place, so equal probabilities keep the lower index first.
  int64_t have = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const float p = probs[e];
    if (have == top_k && !(p > probs[choice[top_k - 1]])) continue;
    int64_t at = have < top_k ? have++ : top_k - 1;
    while (at > 0 && p > probs[choice[at - 1]]) {
      choice[at] = choice[at - 1];
      --at;
    }
    choice[at] = static_cast<int32_t>(e);
  }
  float sum = 0.0f;
  for (int64_t k = 0; k < top_k; ++k) sum += probs[choice[k]];
  for (int64_t k = 0; k < top_k; ++k) weight[k] = probs[choice[k]] / sum * expert_scale[choice[k]];
}

namespace {

// out[token] += weight * y[i] for the group's rows i in [first, first + m) of `order`.
void AddWeighted(const MoeShape& s, const MoeScratch& sc, int64_t first, int64_t m, const float* y, float* out) {
  const int64_t H = s.hidden;
  for (int64_t r = 0; r < m; ++r) {
    const int64_t slot = sc.order[first + r];
    const float wt = sc.weight[slot];
    float* o = out + slot / s.top_k * H;
    for (int64_t i = 0; i < H; ++i) o[i] += y[r * H + i] * wt;
  }
}

// Every chosen expert at once (their groups laid out as `order`: [n * top_k] rows), each stage's
// matrices in one LinearBatch: decode's top_k small experts cost two dispatches, not three each.
// A group of one token reads its normed row in place (decode's every group); larger ones gather.
void ExpertsBatched(const LayerWeights& w, const MoeShape& s, int64_t n, ops::MatmulPrecision mp, bool rows_as_steps,
                    ThreadPool* pool, const MoeScratch& sc, float* out) {
  const int64_t H = s.hidden, K = s.top_k, I = s.inter;
  ops::LinearJob jobs[ops::kMaxLinearJobs];
  int64_t count = 0;
  for (int64_t e = 0; e < s.experts; ++e) {
    const int64_t first = sc.start[e], m = sc.start[e + 1] - first;
    if (m == 0) continue;
    const float* x = sc.normed + sc.order[first] / K * H;
    if (m > 1) {
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(sc.rows + (first + r) * H, sc.normed + sc.order[first + r] / K * H, H * sizeof(float));
      x = sc.rows + first * H;
    }
    jobs[count++] = {w.expert_gate[e], x, m, H, sc.gate + first * I, I};
    jobs[count++] = {w.expert_up[e], x, m, H, sc.up + first * I, I};
  }
  ops::LinearBatch(jobs, count, pool, mp, sc.x_pairs, rows_as_steps);
  ops::GeGlu(sc.gate, sc.up, n * K * I, sc.gate, pool);
  count = 0;
  for (int64_t e = 0; e < s.experts; ++e) {
    const int64_t first = sc.start[e], m = sc.start[e + 1] - first;
    if (m > 0) jobs[count++] = {w.expert_down[e], sc.gate + first * I, m, I, sc.out + first * H, H};
  }
  ops::LinearBatch(jobs, count, pool, mp, sc.x_pairs, rows_as_steps);
  // Experts in ascending order, each adding its weighted outputs: transformers' order of sums.
  for (int64_t e = 0; e < s.experts; ++e)
    AddWeighted(s, sc, sc.start[e], sc.start[e + 1] - sc.start[e], sc.out + sc.start[e] * H, out);
}

// One expert at a time over its gathered tokens (prefill: each expert's tokens one GEMM).
void ExpertsOneByOne(const LayerWeights& w, const MoeShape& s, ops::MatmulPrecision mp, bool rows_as_steps,
                     ThreadPool* pool, const MoeScratch& sc, float* out) {
  const int64_t H = s.hidden, K = s.top_k, I = s.inter;
  for (int64_t e = 0; e < s.experts; ++e) {
    const int64_t first = sc.start[e], m = sc.start[e + 1] - first;
    if (m == 0) continue;  // an expert no token chose: its weights are not read
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(sc.rows + r * H, sc.normed + sc.order[first + r] / K * H, H * sizeof(float));
    ops::Linear(w.expert_gate[e], sc.rows, m, H, sc.gate, I, pool, mp, sc.x_pairs, rows_as_steps);
    ops::Linear(w.expert_up[e], sc.rows, m, H, sc.up, I, pool, mp, sc.x_pairs, rows_as_steps);
    ops::GeGlu(sc.gate, sc.up, m * I, sc.gate, pool);
    ops::Linear(w.expert_down[e], sc.gate, m, I, sc.out, H, pool, mp, sc.x_pairs, rows_as_steps);
    AddWeighted(s, sc, first, m, sc.out, out);
  }
}

}  // namespace

void MoeForward(const LayerWeights& w, const MoeShape& s, const float* h, int64_t n, ops::MatmulPrecision mp,
                bool rows_as_steps, ThreadPool* pool, const MoeScratch& sc, float* out) {
  const int64_t H = s.hidden, E = s.experts, K = s.top_k;
  RouterInput(w, s, h, n, sc.normed);
  ops::Linear(w.router, sc.normed, n, H, sc.scores, E, pool, mp, sc.x_pairs, rows_as_steps);
  for (int64_t t = 0; t < n; ++t) {
    SoftmaxRow(sc.scores + t * E, E);
    SelectExperts(sc.scores + t * E, E, K, w.expert_scale, sc.choice + t * K, sc.weight + t * K);
  }
  GroupByExpert(s, n, sc);
  ops::RmsNorm(h, H, w.pre_ffw_norm_2, s.norm_offset, s.eps, n, H, sc.normed, H);
  std::memset(out, 0, static_cast<size_t>(n * H) * sizeof(float));
  int64_t chosen = 0;  // experts with tokens
  for (int64_t e = 0; e < E; ++e) chosen += sc.start[e + 1] > sc.start[e];
  if (n <= MoeScratch::kBatchedTokens && 2 * chosen <= ops::kMaxLinearJobs) {
    ExpertsBatched(w, s, n, mp, rows_as_steps, pool, sc, out);
  } else {
    ExpertsOneByOne(w, s, mp, rows_as_steps, pool, sc, out);
  }
  ops::RmsNorm(out, H, w.post_ffw_norm_2, s.norm_offset, s.eps, n, H, out, H);
}

void MoeReference(const LayerWeights& w, const MoeShape& s, const float* h, int64_t n, ops::MatmulPrecision mp,
                  float* out, int32_t* choice_out, float* weight_out) {
  const int64_t H = s.hidden, E = s.experts, K = s.top_k, I = s.inter;
  std::vector<double> hd(H), r(H), acc(H), y(H);
  std::vector<float> rf(H), xf(H), logits(E), g(I), u(I), act(I), yf(H);
  std::vector<double> p(E);
  std::vector<int32_t> idx(E);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < H; ++i) hd[i] = h[t * H + i];
    NormRow(hd.data(), H, nullptr, 0.0f, s.eps, r.data());
    for (int64_t i = 0; i < H; ++i) rf[i] = static_cast<float>(r[i] * w.router_scale[i] / std::sqrt(double(H)));
    ops::LinearReference(w.router, rf.data(), 1, H, logits.data(), E, mp);
    double m = logits[0], sum = 0.0;
    for (int64_t e = 1; e < E; ++e) m = std::max(m, double(logits[e]));
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[e] - m));
    for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(p[e] / sum);  // probabilities as f32 values
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double top = 0.0;
    for (int64_t k = 0; k < K; ++k) top += p[idx[k]];
    NormRow(hd.data(), H, w.pre_ffw_norm_2, s.norm_offset, s.eps, r.data());
    for (int64_t i = 0; i < H; ++i) xf[i] = static_cast<float>(r[i]);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = idx[k];
      const double wt = p[e] / top * w.expert_scale[e];
      if (choice_out) choice_out[t * K + k] = e, weight_out[t * K + k] = static_cast<float>(wt);
      ops::LinearReference(w.expert_gate[e], xf.data(), 1, H, g.data(), I, mp);
      ops::LinearReference(w.expert_up[e], xf.data(), 1, H, u.data(), I, mp);
      for (int64_t i = 0; i < I; ++i) act[i] = static_cast<float>(GeluTanh(g[i]) * u[i]);
      ops::LinearReference(w.expert_down[e], act.data(), 1, I, yf.data(), H, mp);
      for (int64_t i = 0; i < H; ++i) acc[i] += wt * yf[i];
    }
    NormRow(acc.data(), H, w.post_ffw_norm_2, s.norm_offset, s.eps, y.data());
    for (int64_t i = 0; i < H; ++i) out[t * H + i] = static_cast<float>(y[i]);
  }
}

}  // namespace tessera::model
