#include "model/activations.h"

#include <algorithm>

#include "model/moe.h"
#include "tessera/gemm.h"

namespace tessera::model {

void Activations::Sizes(const GemmaArch& a, int64_t n, int64_t logit_rows, size_t out[kBuffers]) {
  int64_t kv_width = 1;
  for (const LayerArch& l : a.layers) kv_width = std::max(kv_width, l.kv_heads * l.head_dim);
  const int64_t q_width = a.q_heads * a.max_head_dim();
  // Every Linear input: hidden (q/k/v, gate/up, PLE), q heads x head dim (o), intermediate (down),
  // the PLE width (its projection), an expert's width (its down projection).
  const int64_t widest_in = std::max({a.hidden, q_width, a.max_intermediate(), std::max<int64_t>(1, a.ple_dim),
                                      a.expert_intermediate});
  const int64_t floats[kBuffers] = {n * a.hidden,
                                    n * a.hidden,
                                    n * q_width,
                                    n * kv_width,
                                    n * kv_width,
                                    n * q_width,
                                    n * a.max_intermediate(),
                                    n * a.max_intermediate(),
                                    n * std::max<int64_t>(1, a.num_layers() * a.ple_dim),
                                    n * std::max<int64_t>(1, a.ple_dim),
                                    logit_rows * a.vocab,
                                    ops::GemmScratchWords(n, widest_in),
                                    3 * n,
                                    a.experts > 0 ? MoeScratch::Words(MoeShapeOf(a), n) : 1};
  for (int i = 0; i < kBuffers; ++i) out[i] = static_cast<size_t>(floats[i]) * 4;
}

void Activations::Allocate(const GemmaArch& a, int64_t n, int64_t logit_rows) {
  max_tokens = n;
  size_t sz[kBuffers];
  Sizes(a, n, logit_rows, sz);
  AlignedBuffer* bufs[kBuffers] = {&h, &x, &q, &k, &v, &attn, &gate, &up, &ple, &ple_tmp, &logits, &x_pairs, &tail, &moe};
  for (int i = 0; i < kBuffers; ++i) bufs[i]->Resize(sz[i]);
}

size_t Activations::PlannedBytes(const GemmaArch& a, int64_t n, int64_t logit_rows) {
  size_t sz[kBuffers], total = 0;
  Sizes(a, n, logit_rows, sz);
  for (size_t b : sz) total += (b + AlignedBuffer::kAlignment - 1) / AlignedBuffer::kAlignment * AlignedBuffer::kAlignment;
  return total;
}

size_t Activations::bytes() const {
  return h.size() + x.size() + q.size() + k.size() + v.size() + attn.size() + gate.size() + up.size() + ple.size() +
         ple_tmp.size() + logits.size() + x_pairs.size() + tail.size() + moe.size();
}

int64_t GemmaArch::max_head_dim() const {
  int64_t m = 1;
  for (const LayerArch& l : layers) m = std::max(m, l.head_dim);
  return m;
}

int64_t GemmaArch::kv_writers_end() const {
  int64_t l = num_layers();
  while (l > 0 && layers[l - 1].shared_kv) --l;
  return l;
}

int64_t GemmaArch::max_intermediate() const {
  int64_t m = 1;
  for (const LayerArch& l : layers) m = std::max(m, l.intermediate);
  return m;
}

}  // namespace tessera::model
