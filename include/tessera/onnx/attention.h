// The ONNX `Attention` operator, opsets 23, 24 and 25, on tessera::Attention.
//
// Semantics follow the ONNX specification and its reference implementation
// (onnx/reference/ops/op_attention.py); onnxruntime's CPU kernel agrees wherever it accepts the
// input. The node maps onto one structured-mask call:
//   present = concat(past, new K/V) along the sequence; keys j = 0 .. T-1, T = P + S_kv, k_pos = j.
//   Query i has position offset + i, where offset = P (past_key given), nonpad_kv_seqlen[b] - S_q
//     (opset 24 external cache), else 0 (top-left even when S_q < S_kv).
//   is_causal: query i sees keys j <= offset + i. A negative offset leaves leading rows with no key.
//   left_window_size L / right_window_size R (opset 25, -1 = unbounded): query i sees keys
//     offset + i - L <= j <= offset + i + R: the mask's window, composed with everything else.
//   nonpad_kv_seqlen[b]: keys >= nonpad[b] are invisible (kv_valid).
//   attn_mask: bool (true = attend) or float (added after softcap), broadcast right-aligned to
//     [B, Hq, S_q, L] with strides 0 on broadcast dims. A mask with L < T key columns is padded
//     with -inf / false by ONNX, i.e. keys >= L are invisible (kv_valid = min(nonpad, L)).
//   scores = (q.k) * scale, scale default 1/sqrt(D); softcap c > 0: c*tanh(s/c); softmax in f32,
//     or at softmax_precision: double (11) in double; float16 (10) / bfloat16 (16) with the softmax
//     input and output rounded to that type (both on the reference kernel).
//   A query row with no visible key yields zeros.
//   GQA: query head h reads KV head h / (Hq / Hkv).
//   qk_matmul_output [B, Hq, S_q, T], by qk_matmul_output_mode: 0 the scaled q.k of every pair, 1
//     after softcap, 2 plus the mask (-inf where a key is invisible), 3 the softmax weights (rows
//     with no visible key are zeros).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/onnx/op_context.h"
#include "tessera/onnx/tensor_ref.h"
#include "tessera/status.h"

namespace tessera::onnx {

struct AttentionInputs {
  TensorRef q;  // [B, Hq, S_q, D] or [B, S_q, Hq*D] f32
  TensorRef k;  // [B, Hkv, S_kv, D] or [B, S_kv, Hkv*D] f32 (same rank as q)
  TensorRef v;  // [B, Hkv, S_kv, Dv] or [B, S_kv, Hkv*Dv] f32 (same rank as q)
  std::optional<TensorRef> attn_mask;         // broadcastable to [B, Hq, S_q, L], L <= T; bool or f32
  std::optional<TensorRef> past_key;          // [B, Hkv, P, D] f32
  std::optional<TensorRef> past_value;        // [B, Hkv, P, Dv] f32
  std::optional<TensorRef> nonpad_kv_seqlen;  // [B] int64, opset >= 24, not with past_key
};

struct AttentionAttrs {
  int opset = 25;                      // 23, 24 or 25
  int64_t is_causal = 0;               // 0 or 1
  std::optional<int64_t> q_num_heads;  // required for 3-D inputs; 4-D: must match the shape (opset 25: absent)
  std::optional<int64_t> kv_num_heads;
  std::optional<float> scale;  // absent = 1/sqrt(D)
  float softcap = 0.0f;        // 0 = off; must be >= 0
  int64_t qk_matmul_output_mode = 0;         // 0..3: what qk_matmul_output holds
  std::optional<int64_t> softmax_precision;  // ONNX data type: 1 float, 10 float16, 11 double, 16 bfloat16
  int64_t left_window_size = -1;             // opset 25; -1 = unbounded, else >= 0
  int64_t right_window_size = -1;            // opset 25; -1 = unbounded, else >= 0
};

// Output shapes of a node; present_* also when the node does not request them.
struct AttentionShapes {
  std::vector<int64_t> y;                 // [B, Hq, S_q, Dv] or [B, S_q, Hq*Dv]
  std::vector<int64_t> present_key;       // [B, Hkv, T, D]
  std::vector<int64_t> present_value;     // [B, Hkv, T, Dv]
  std::vector<int64_t> qk_matmul_output;  // [B, Hq, S_q, T]
};

struct AttentionOutputs {
  MutableTensorRef y;                             // AttentionShapes::y, f32
  std::optional<MutableTensorRef> present_key;    // AttentionShapes::present_key, f32; required with past_key
  std::optional<MutableTensorRef> present_value;  // AttentionShapes::present_value, f32; required with past_value
  std::optional<MutableTensorRef> qk_matmul_output;  // AttentionShapes::qk_matmul_output, f32
};

// Validates the inputs and attributes (everything that does not need output buffers) and
// returns the output shapes.
StatusOr<AttentionShapes> InferAttentionShapes(const AttentionInputs& in, const AttentionAttrs& attrs);

// Runs the node. Every bad input returns InvalidArgument naming the operator, the argument and
// the value. Output buffers must not overlap the inputs. qk_matmul_output costs
// O(B * Hq * S_q * T * D) in plain loops: a debugging output.
Status Attention(const AttentionInputs& in, const AttentionAttrs& attrs, const AttentionOutputs& out,
                 OpContext& ctx);

}  // namespace tessera::onnx
