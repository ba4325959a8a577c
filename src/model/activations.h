// Every activation buffer of one forward pass, sized once for the session's largest step
// (max_batch x max_chunk tokens). The forward pass only indexes into these.
#pragma once

#include <cstdint>

#include "model/gemma_arch.h"
#include "tessera/aligned_buffer.h"

namespace tessera::model {

struct Activations {
  int64_t max_tokens = 0;
  AlignedBuffer h;       // [N, hidden]  residual stream
  AlignedBuffer x;       // [N, hidden]  normed input / sublayer output
  AlignedBuffer q;       // [N, q_heads * max_head_dim]
  AlignedBuffer k, v;    // [N, max_kv_heads * max_head_dim]
  AlignedBuffer attn;    // [N, q_heads * max_head_dim]  attention output, token-major
  AlignedBuffer gate, up;  // [N, max_intermediate]
  AlignedBuffer ple;     // [N, layers * ple_dim]  per-layer inputs (Gemma 4 PLE)
  AlignedBuffer ple_tmp; // [N, max(ple_dim, 1)]
  AlignedBuffer logits;  // [logit_rows, vocab]
  AlignedBuffer x_pairs; // [N, widest Linear input / 2, padded] u32: x as bf16 pairs, the GEMM's
                         // scratch at matmul precision bf16 (ops::GemmScratchWords)
  AlignedBuffer tail;    // [3, N] i32: positions, block ids and counts (1) of the rows the layers
                         // after the last KV writer run on (GemmaModel::Forward, ForwardBatch::skip_unread)
  AlignedBuffer moe;     // the mixture-of-experts block's scratch (model/moe.h MoeScratch), 1 word without one

  void Allocate(const GemmaArch& arch, int64_t max_tokens, int64_t logit_rows);
  size_t bytes() const;
  // What Allocate(arch, max_tokens, logit_rows) will allocate, for planning.
  static size_t PlannedBytes(const GemmaArch& arch, int64_t max_tokens, int64_t logit_rows);

 private:
  // The byte size of every buffer above, in member order.
  static constexpr int kBuffers = 14;
  static void Sizes(const GemmaArch& arch, int64_t n, int64_t logit_rows, size_t out[kBuffers]);
};

}  // namespace tessera::model
