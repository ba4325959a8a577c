// Internal kernel entry points. Params are already validated by Attention().
#pragma once

#include <cstddef>

#include "tessera/attention.h"

namespace tessera::attn {

// Plain loops with double accumulation: the executable specification.
void ReferenceAttention(const AttentionParams& p);

// Tiled online-softmax kernel for any S_q; all query heads of a KV group share each K/V tile.
size_t PrefillScratchBytes(const AttentionParams& p, int num_threads);
void PrefillAttention(const AttentionParams& p, ThreadPool* pool, Arena& scratch);

// Keys split across threads, partial softmax states merged by log-sum-exp. Meant for S_q = 1;
// any S_q is correct, each query position computed on its own (AttentionParams::rows_as_steps).
size_t DecodeScratchBytes(const AttentionParams& p, int num_threads);
void DecodeAttention(const AttentionParams& p, ThreadPool* pool, Arena& scratch);

}  // namespace tessera::attn
