// Everything GroupQueryAttention derives from its inputs and attributes before it writes a byte:
// sizes, input views, per-row lengths, the bias mapping, rotary tables and positions, the sink.
// Every check of an input happens here, so a bad node leaves its outputs untouched.
#pragma once

#include <algorithm>
#include <cstdint>

#include "onnx/rotary.h"
#include "tessera/attention.h"
#include "tessera/onnx/group_query_attention.h"

namespace tessera::onnx::gqa {

inline constexpr char kOp[] = "onnx::GroupQueryAttention";

struct Plan {
  bool packed = false;
  bool has_past = false;
  int64_t B = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t C = 0;      // past capacity (0 without past_key)
  int64_t total = 0;  // total_sequence_length
  DType cache_dtype = DType::kF32;  // past_key's type (f32 without a past)
  HeadsView q, k_new, v_new;  // [B, Hq, S, D], [B, Hkv, S, D] x2 over the BSHD inputs
  HeadsView past_k, past_v;   // [B, Hkv, C, D] BNSH; only with past_key
  const int32_t* seqlens_k = nullptr;  // [B]
  DenseMask bias;                      // from attention_bias; kind kNone without one
  float scale = 1.0f;
  bool rotary = false;
  RotaryTables tables;                    // with rotary
  const int64_t* position_ids = nullptr;  // [B, S] with rotary, when given
  bool first_prompt = false;              // S == total_sequence_length
  const float* head_sink = nullptr;       // [Hq] when given
  bool smooth = false;                    // sink 0 for every head (smooth_softmax = 1 without head_sink)
  const int32_t* block_ids = nullptr;     // [B, S] with the block_ids extension input
  bool windowed = false;                  // sliding_window_cache = 1
  int64_t window = -1;                    // local_window_size
  int64_t kv_len = 0;                     // key slots the kernel reads: total, or max_b KeysOf when windowed
  bool staged = false;                    // windowed and some row's keys exceed the capacity C
};

// Tokens in the cache after the step, and before it.
inline int64_t TotalOf(const Plan& p, int64_t b) { return static_cast<int64_t>(p.seqlens_k[b]) + 1; }
inline int64_t PastOf(const Plan& p, int64_t b) { return TotalOf(p, b) - std::min(p.S, TotalOf(p, b)); }

// Rows a windowed cache of capacity C and window W holds after t tokens (onnxruntime's
// sliding_window_cache contract): all while t <= C, then evicted G = C - W + 1 at a time.
inline int64_t ResidentRows(int64_t t, int64_t C, int64_t W) {
  if (t <= C) return t;
  const int64_t g = C - W + 1;
  return t - g * ((t - C + g - 1) / g);
}
// The cache slot of row b's first new token (P_b, or the resident past rows when windowed), and
// the keys the kernel sees in row b (T_b, or resident past + new rows).
inline int64_t NewSlotOf(const Plan& p, int64_t b) {
  return p.windowed ? ResidentRows(PastOf(p, b), p.C, p.window) : PastOf(p, b);
}
inline int64_t KeysOf(const Plan& p, int64_t b) { return NewSlotOf(p, b) + TotalOf(p, b) - PastOf(p, b); }

// The rotary position of query row s of batch row b (header of group_query_attention.h); padding
// rows (s >= Q_b) are clamped into the tables, their output being unspecified.
int64_t RotaryPosition(const Plan& p, int64_t b, int64_t s);

StatusOr<Plan> MakePlan(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& a);

}  // namespace tessera::onnx::gqa
