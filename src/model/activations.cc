#include "model/activations.h"

#include <algorithm>

#include "ops/gemm.h"

namespace tessera::model {

void Activations::Allocate(const GemmaArch& a, int64_t n, int64_t logit_rows) {
  max_tokens = n;
  int64_t kv_width = 1;
  for (const LayerArch& l : a.layers) kv_width = std::max(kv_width, l.kv_heads * l.head_dim);
  const int64_t q_width = a.q_heads * a.max_head_dim();
  h.Resize(n * a.hidden * 4);
  x.Resize(n * a.hidden * 4);
  q.Resize(n * q_width * 4);
  k.Resize(n * kv_width * 4);
  v.Resize(n * kv_width * 4);
  attn.Resize(n * q_width * 4);
  gate.Resize(n * a.max_intermediate() * 4);
  up.Resize(n * a.max_intermediate() * 4);
  ple.Resize(n * std::max<int64_t>(1, a.num_layers() * a.ple_dim) * 4);
  ple_tmp.Resize(n * std::max<int64_t>(1, a.ple_dim) * 4);
  logits.Resize(logit_rows * a.vocab * 4);
  // Every Linear input: hidden (q/k/v, gate/up, PLE), q heads x head dim (o), intermediate (down),
  // the PLE width (its projection).
  const int64_t widest_in = std::max({a.hidden, q_width, a.max_intermediate(), std::max<int64_t>(1, a.ple_dim)});
  x_pairs.Resize(ops::GemmScratchWords(n, widest_in) * 4);
}

size_t Activations::bytes() const {
  return h.size() + x.size() + q.size() + k.size() + v.size() + attn.size() + gate.size() + up.size() + ple.size() +
         ple_tmp.size() + logits.size() + x_pairs.size();
}

int64_t GemmaArch::max_head_dim() const {
  int64_t m = 1;
  for (const LayerArch& l : layers) m = std::max(m, l.head_dim);
  return m;
}

int64_t GemmaArch::max_intermediate() const {
  int64_t m = 1;
  for (const LayerArch& l : layers) m = std::max(m, l.intermediate);
  return m;
}

}  // namespace tessera::model
