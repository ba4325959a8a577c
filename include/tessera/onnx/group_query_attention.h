// com.microsoft.GroupQueryAttention as onnxruntime's CPU kernel computes it, on tessera::Attention.
//
// Per batch row b: T_b = seqlens_k[b] + 1 tokens are in the cache after this step. The step's
// S query rows hold Q_b = min(S, T_b) valid tokens (rows >= Q_b are right padding of a first
// prompt), at absolute positions P_b + s with P_b = T_b - Q_b tokens cached before the step.
//   Rotary (do_rotary = 1, cos_cache / sin_cache [max_position, R/2], R <= head size): query rows
//     and the new key rows rotate by the angle of their position (onnx/rotary.h), before the keys
//     enter the cache. The position is P_b + s, or position_ids[b][s] when given; in a first
//     prompt (S == total_sequence_length) onnxruntime reads only position_ids' first element p0,
//     and every row's row s sits at p0 + s.
//   Cache: the new K/V rows [0, Q_b) are written to present rows [P_b, T_b); padding rows are not
//     written. present may be the past buffer itself (in place, capacity >= total_sequence_length;
//     rows >= T_b are left as they are) or a separate buffer of capacity
//     max(total_sequence_length, past capacity) that receives past rows [0, P_b), the new rows,
//     and zeros in rows >= T_b. Caches are f32, bf16 or f16 (present has past's type); new rows
//     are rounded to it.
//   Mask: query s sees keys j < T_b; causal = 1 (default): only j <= P_b + s, and with
//     local_window_size W > 0 only the W most recent of those (P_b + s - j < W, i.e.
//     window_left = W - 1); W = -1 is off, W = 0 leaves no key visible (zero output, as
//     onnxruntime). causal = 0 needs W = -1. Padding query rows see the whole cache of their row
//     (onnxruntime leaves their output unspecified).
//   scores = (q.k) * scale (scale 0 = 1/sqrt(D)); softcap c > 0: c*tanh(s/c); then attention_bias
//     [B|1, Hq|1, S, total_sequence_length] indexed by absolute key position; softmax in f32.
//   Sinks: head_sink [Hq] (or, without it, smooth_softmax = 1: a sink of 0 for every head) joins
//     every softmax denominator: weights exp(s_j) / (exp(sink_h) + sum_k exp(s_k)).
//   GQA: query head h reads KV head h / (Hq / Hkv).
//   output_qk [B, Hq, S, total_sequence_length] (qk_output 1: the scores after softcap and bias, 0
//     for invisible keys; 2: the softmax weights).
//   Windowed cache (sliding_window_cache = 1, local_window_size W > 0, past capacity C >= W):
//     onnxruntime's contract: after a step of row b, cache rows [0, L(T_b)) hold positions
//     [T_b - L(T_b), T_b) in order, L(t) = t while t <= C, else t - G * ceil((t - C) / G) with
//     G = C - W + 1 (evicted G at a time); rows >= L are unspecified (zeros when present is a
//     separate buffer, which then also has capacity C). The step's keys are the L(P_b) resident
//     past rows and its new rows; a step larger than the free rows is staged in scratch.
//     No attention_bias or output_qk with it.
// Not supported (the Python adapter refuses them by name): query_seqlens, sliding_window_cache
// (the C++ adapter and com.tessera.TesseraGroupQueryAttention take it), quantized caches (k_scale,
// v_scale, kv_cache_bit_width, k/v_quant_type), q/k_norm_weight.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/onnx/op_context.h"
#include "tessera/onnx/tensor_ref.h"
#include "tessera/status.h"

namespace tessera::onnx {

struct GroupQueryAttentionInputs {
  TensorRef query;                 // [B, S, Hq*D] f32, or packed QKV [B, S, (Hq + 2*Hkv)*D] without key/value
  std::optional<TensorRef> key;    // [B, S, Hkv*D] f32
  std::optional<TensorRef> value;  // [B, S, Hkv*D] f32
  std::optional<TensorRef> past_key;    // [B, Hkv, C, D] f32, bf16 or f16 (BNSH)
  std::optional<TensorRef> past_value;  // [B, Hkv, C, D] past_key's type (BNSH)
  TensorRef seqlens_k;                  // [B] int32, total tokens - 1 per batch row
  TensorRef total_sequence_length;      // scalar or [1] int32, >= max_b(seqlens_k[b] + 1)
  std::optional<TensorRef> cos_cache;     // [max_position, R/2] f32, with do_rotary
  std::optional<TensorRef> sin_cache;     // [max_position, R/2] f32, with do_rotary
  std::optional<TensorRef> position_ids;  // [B, S] int64, with do_rotary; every entry < max_position
  std::optional<TensorRef> attention_bias;  // [B|1, Hq|1, S, total_sequence_length] f32
  std::optional<TensorRef> head_sink;       // [Hq] f32
  // Tessera extension (com.tessera.TesseraGroupQueryAttention, docs/onnxruntime.md; not an input of
  // com.microsoft.GroupQueryAttention): the step's tokens' image blocks, [B, S] int32, 0 = text,
  // > 0 = block id. Tokens of one block see each other both ways; cached tokens are in no block.
  std::optional<TensorRef> block_ids;
};

struct GroupQueryAttentionAttrs {
  int64_t num_heads = 0;     // Hq
  int64_t kv_num_heads = 0;  // Hkv, divides Hq
  int64_t local_window_size = -1;
  float scale = 0.0f;    // 0 = 1/sqrt(D)
  float softcap = 0.0f;  // 0 = off; must be >= 0
  int64_t causal = 1;               // 0 or 1
  int64_t do_rotary = 0;            // 0 or 1
  int64_t rotary_interleaved = 0;   // 0 or 1
  int64_t smooth_softmax = -1;      // -1 (unset), 0 or 1
  int64_t qk_output = 0;            // 0 (no output_qk), 1 (scores), 2 (softmax weights)
  int64_t blocks_ignore_window = 0;  // with block_ids: 1 = same-block pairs visible outside the window
  int64_t sliding_window_cache = 0;  // 1 = window-sized caches evicted inside the node (above)
};

struct GroupQueryAttentionShapes {
  std::vector<int64_t> output;       // [B, S, Hq*D]
  std::vector<int64_t> present_key;  // [B, Hkv, C', D]: C' = C in place, else max(total, C)
  std::vector<int64_t> present_value;
  std::vector<int64_t> output_qk;    // [B, Hq, S, total_sequence_length]
};

struct GroupQueryAttentionOutputs {
  MutableTensorRef output;         // [B, S, Hq*D] f32
  MutableTensorRef present_key;    // past_key's type (f32 without a past); data == past_key data: in place
  MutableTensorRef present_value;  // likewise
  std::optional<MutableTensorRef> output_qk;  // [B, Hq, S, total] f32; requires qk_output 1 or 2
};

// Validates everything that needs no output buffer; returns the output shapes for in-place
// (present aliases past) or separate present buffers.
StatusOr<GroupQueryAttentionShapes> InferGroupQueryAttentionShapes(const GroupQueryAttentionInputs& in,
                                                                   const GroupQueryAttentionAttrs& attrs,
                                                                   bool in_place);

// Runs the node: writes the cache, then attends. Bad input returns InvalidArgument naming the
// operator, the argument and the value. present must either alias past exactly or not overlap
// any input. ctx.index_scratch also holds the rotated query and key rows with do_rotary.
Status GroupQueryAttention(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& attrs,
                           const GroupQueryAttentionOutputs& out, OpContext& ctx);

}  // namespace tessera::onnx
