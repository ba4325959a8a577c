// com.microsoft.GroupQueryAttention as onnxruntime's CPU kernel computes it, on tessera::Attention.
//
// Per batch row b: T_b = seqlens_k[b] + 1 tokens are in the cache after this step. The step's
// S query rows hold Q_b = min(S, T_b) valid tokens (rows >= Q_b are right padding of a first
// prompt), at absolute positions P_b + s with P_b = T_b - Q_b tokens cached before the step.
//   Cache: the new K/V rows [0, Q_b) are written to present rows [P_b, T_b); padding rows are not
//     written. present may be the past buffer itself (in place, capacity >= total_sequence_length;
//     rows >= T_b are left as they are) or a separate buffer of capacity
//     max(total_sequence_length, past capacity) that receives past rows [0, P_b), the new rows,
//     and zeros in rows >= T_b.
//   Mask: query s sees keys j < T_b with j <= P_b + s (causal), and with local_window_size W > 0
//     only the W most recent of those (P_b + s - j < W, i.e. window_left = W - 1); W = -1 is off,
//     W = 0 leaves no key visible (zero output, as onnxruntime). Padding query rows see the whole
//     cache of their row (onnxruntime leaves their output unspecified).
//   scores = (q.k) * scale (scale 0 = 1/sqrt(D)); softcap c > 0: c*tanh(s/c); then attention_bias
//     [B|1, Hq|1, S, total_sequence_length] indexed by absolute key position; softmax in f32.
//   GQA: query head h reads KV head h / (Hq / Hkv).
// Not supported: do_rotary (Unimplemented), cos/sin caches, position_ids, head_sink,
// smooth_softmax, query_seqlens, sliding_window_cache, quantized caches, output_qk.
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
  std::optional<TensorRef> past_key;    // [B, Hkv, C, D] f32 (BNSH)
  std::optional<TensorRef> past_value;  // [B, Hkv, C, D] f32 (BNSH)
  TensorRef seqlens_k;                  // [B] int32, total tokens - 1 per batch row
  TensorRef total_sequence_length;      // scalar or [1] int32, >= max_b(seqlens_k[b] + 1)
  std::optional<TensorRef> attention_bias;  // [B|1, Hq|1, S, total_sequence_length] f32
};

struct GroupQueryAttentionAttrs {
  int64_t num_heads = 0;     // Hq
  int64_t kv_num_heads = 0;  // Hkv, divides Hq
  int64_t local_window_size = -1;
  float scale = 0.0f;    // 0 = 1/sqrt(D)
  float softcap = 0.0f;  // 0 = off; must be >= 0
  int64_t do_rotary = 0;  // 1 returns Unimplemented
};

struct GroupQueryAttentionShapes {
  std::vector<int64_t> output;       // [B, S, Hq*D]
  std::vector<int64_t> present_key;  // [B, Hkv, C', D]: C' = C in place, else max(total, C)
  std::vector<int64_t> present_value;
};

struct GroupQueryAttentionOutputs {
  MutableTensorRef output;         // [B, S, Hq*D] f32
  MutableTensorRef present_key;    // f32; data == past_key data: updated in place
  MutableTensorRef present_value;  // f32; data == past_value data: updated in place
};

// Validates everything that needs no output buffer; returns the output shapes for in-place
// (present aliases past) or separate present buffers.
StatusOr<GroupQueryAttentionShapes> InferGroupQueryAttentionShapes(const GroupQueryAttentionInputs& in,
                                                                   const GroupQueryAttentionAttrs& attrs,
                                                                   bool in_place);

// Runs the node: writes the cache, then attends. Bad input returns InvalidArgument naming the
// operator, the argument and the value. present must either alias past exactly or not overlap
// any input.
Status GroupQueryAttention(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& attrs,
                           const GroupQueryAttentionOutputs& out, OpContext& ctx);

}  // namespace tessera::onnx
