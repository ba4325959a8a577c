// One query row of the executable specification: its scores under the full predicate and its
// softmax weights, in double. The reference kernel and AttentionScores (the ONNX score outputs)
// both run on it, so the debugging scores and the reference output have one definition.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/attention.h"

namespace tessera::attn {

// Buffers of one row, sized once per call.
struct RowScratch {
  explicit RowScratch(const AttentionParams& p);
  std::vector<float> q, k, v;                // [D], [D], [Dv]: f32 operands
  std::vector<double> raw, scores, weights;  // [S_kv]
  std::vector<char> visible;                 // [S_kv]
  std::vector<int64_t> order;                // visible key slots by position (ties by slot)
};

// Query row (b, h, i): raw[j] = (q.k) * scale for the visible keys (visible[j] = 1) and, with
// `all_keys`, for the others too; scores[j] = softcap(raw[j]) + dense bias for visible keys; fills
// `order`. Returns the largest visible score (-inf when none is visible). *finite becomes false
// when a visible key's raw score is not finite: the row is NaN (docs/reliability.md).
double ScoreRow(const AttentionParams& p, int64_t b, int64_t h, int64_t i, bool all_keys, RowScratch& rs,
                bool* finite);

// weights[j] for j in `order`: the softmax of scores[j] with head h's sink, at p.softmax_precision
// (kF16/kBf16 round the scores and the normalized weights), then rounded to bf16 at precision bf16.
// `max_score` is ScoreRow's result; the row must have a visible key.
void SoftmaxRow(const AttentionParams& p, int64_t h, double max_score, RowScratch& rs);

}  // namespace tessera::attn
