#include "tessera/onnx/group_query_attention.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "onnx/gqa_plan.h"
#include "onnx/heads_layout.h"
#include "onnx/rotary.h"

namespace tessera::onnx {
namespace {

using gqa::kOp;
using gqa::PastOf;
using gqa::Plan;
using gqa::TotalOf;

Status Bad(const std::string& msg) { return InvalidArgument(std::string(kOp) + ": " + msg); }
std::string Str(int64_t x) { return std::to_string(x); }

ElemType ElemTypeOf(DType t) {
  return t == DType::kF32 ? ElemType::kFloat32 : t == DType::kBF16 ? ElemType::kBFloat16 : ElemType::kFloat16;
}

StatusOr<GroupQueryAttentionShapes> ShapesOf(const Plan& p, bool in_place) {
  if (in_place && !p.has_past)
    return Bad("present can only share the past buffer when past_key/past_value are given");
  if (in_place && !p.windowed && p.C < p.total)
    return Bad("in place, past_key capacity " + Str(p.C) + " must be >= total_sequence_length " + Str(p.total) +
               " (or a windowed cache: sliding_window_cache = 1)");
  const int64_t cap = in_place || p.windowed ? p.C : std::max(p.total, p.C);
  GroupQueryAttentionShapes s;
  s.output = {p.B, p.S, p.Hq * p.D};
  s.present_key = {p.B, p.Hkv, cap, p.D};
  s.present_value = s.present_key;
  s.output_qk = {p.B, p.Hq, p.S, p.total};
  return s;
}

bool Overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

Status CheckOutput(const char* name, const MutableTensorRef& t, const std::vector<int64_t>& want, ElemType type) {
  if (t.type != type)
    return Bad(std::string(name) + " must be " + ElemTypeName(type) + ", got " + ElemTypeName(t.type));
  if (t.shape != want) return Bad(std::string(name) + " must be " + ShapeString(want) + ", got " + ShapeString(t.shape));
  if (t.data == nullptr && NumElements(want) > 0) return Bad(std::string(name) + " has no data");
  return Status::Ok();
}

// Checks the outputs; returns whether present is the past buffer (in place).
StatusOr<bool> CheckOutputs(const Plan& p, const GroupQueryAttentionAttrs& a, const GroupQueryAttentionOutputs& out) {
  // Sharing is decided by identity of the data pointers (an empty cache never shares).
  const bool k_shared = p.has_past && p.past_k.data != nullptr && out.present_key.data == p.past_k.data;
  const bool v_shared = p.has_past && p.past_v.data != nullptr && out.present_value.data == p.past_v.data;
  if (k_shared != v_shared)
    return Bad("present_key and present_value must both share the past buffers or both be separate");
  StatusOr<GroupQueryAttentionShapes> shapes = ShapesOf(p, k_shared);
  if (!shapes.ok()) return shapes.status();
  const GroupQueryAttentionShapes& s = shapes.value();
  TESSERA_RETURN_IF_ERROR(CheckOutput("output", out.output, s.output, ElemType::kFloat32));
  TESSERA_RETURN_IF_ERROR(CheckOutput("present_key", out.present_key, s.present_key, ElemTypeOf(p.cache_dtype)));
  TESSERA_RETURN_IF_ERROR(CheckOutput("present_value", out.present_value, s.present_value, ElemTypeOf(p.cache_dtype)));
  if (out.output_qk) {
    if (a.qk_output == 0) return Bad("output_qk is requested but qk_output is 0 (set 1 for scores, 2 for weights)");
    TESSERA_RETURN_IF_ERROR(CheckOutput("output_qk", *out.output_qk, s.output_qk, ElemType::kFloat32));
  }
  const int64_t es = static_cast<int64_t>(DTypeSize(p.cache_dtype));
  const int64_t cache_bytes = NumElements(s.present_key) * es, past_bytes = p.B * p.Hkv * p.C * p.D * es;
  if (!k_shared && p.has_past)
    for (const void* present : {out.present_key.data, out.present_value.data})
      for (const void* past : {p.past_k.data, p.past_v.data})
        if (Overlaps(present, cache_bytes, past, past_bytes))
          return Bad("present_key/present_value partly overlap past_key/past_value: share them exactly or not at all");
  return k_shared;
}

// Writes one cache (K or V): new rows [0, Q_b) at [P_b, T_b); when not in place also past rows
// [0, P_b) and zeros in rows [T_b, capacity).
void WriteCache(const Plan& p, const HeadsView& past, const HeadsView& fresh, const CacheView& dst, bool in_place) {
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t T = TotalOf(p, b), P = PastOf(p, b);
    for (int64_t h = 0; h < p.Hkv; ++h) {
      if (!in_place) {
        if (P > 0) CopyRowsToCache(past, 0, dst, 0, b, h, P);
        ZeroCacheRows(dst, T, b, h, dst.capacity - T);
      }
      CopyRowsToCache(fresh, 0, dst, P, b, h, T - P);
    }
  }
}

// Windowed (sliding_window_cache): the resident past rows [0, L(P_b)) and then the new rows into
// `dst` (present, or the staging buffer); the past rows are copied unless dst is the past buffer.
void WriteWindowKeys(const Plan& p, const HeadsView& past, const HeadsView& fresh, const CacheView& dst,
                     bool dst_is_past) {
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t resident = gqa::NewSlotOf(p, b), fresh_rows = TotalOf(p, b) - PastOf(p, b);
    for (int64_t h = 0; h < p.Hkv; ++h) {
      if (!dst_is_past && resident > 0) CopyRowsToCache(past, 0, dst, 0, b, h, resident);
      CopyRowsToCache(fresh, 0, dst, resident, b, h, fresh_rows);
    }
  }
}

// After the attention of a windowed step: present rows [0, L(T_b)) = the last L(T_b) of the row's
// keys in `keys` (present itself or the staging buffer), rows beyond zeroed when present is a
// separate buffer.
void SettleWindow(const Plan& p, const CacheView& keys, const CacheView& present, bool in_place) {
  const int64_t row_bytes = p.D * static_cast<int64_t>(DTypeSize(p.cache_dtype));
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t resident = gqa::ResidentRows(TotalOf(p, b), p.C, p.window), from = gqa::KeysOf(p, b) - resident;
    for (int64_t h = 0; h < p.Hkv; ++h) {
      if (keys.data != present.data || from > 0)
        std::memmove(present.At(b, h, 0), keys.At(b, h, from), static_cast<size_t>(resident * row_bytes));
      if (!in_place) ZeroCacheRows(present, resident, b, h, present.capacity - resident);
    }
  }
}

// Index arrays and rotated rows of one call, carved from ctx.index_scratch.
struct Scratch {
  int32_t* q_pos;    // [B, S]
  int32_t* k_pos;    // [B, kv_len]
  int32_t* kv_valid; // [B]
  int32_t* rot_pos;  // [B, S] rotary positions
  int32_t* q_block;  // [B, S] with block_ids
  int32_t* k_block;  // [B, kv_len] with block_ids
  float* sink;       // [Hq] zeros (smooth_softmax)
  float* q_rot;      // [B, S, Hq, D] with rotary
  float* k_rot;      // [B, S, Hkv, D] with rotary
  void* stage_k;     // [B, Hkv, kv_len, D] in the cache dtype, when staged
  void* stage_v;
};

Scratch TakeScratch(const Plan& p, Arena& arena) {
  const int64_t rot_floats = p.rotary ? p.B * p.S * (p.Hq + p.Hkv) * p.D : 0;
  const int64_t blocked = p.block_ids ? 1 : 0;
  const int64_t stage_bytes = p.staged ? p.B * p.Hkv * p.kv_len * p.D * static_cast<int64_t>(DTypeSize(p.cache_dtype)) : 0;
  arena.Reserve((2 + blocked) * Arena::Bytes<int32_t>(p.B * p.S) + (1 + blocked) * Arena::Bytes<int32_t>(p.B * p.kv_len) +
                Arena::Bytes<int32_t>(p.B) + Arena::Bytes<float>(p.Hq) + Arena::Bytes<float>(rot_floats) +
                2 * Arena::Bytes<uint8_t>(stage_bytes));
  arena.Reset();
  Scratch s;
  s.q_pos = arena.Take<int32_t>(p.B * p.S);
  s.k_pos = arena.Take<int32_t>(p.B * p.kv_len);
  s.kv_valid = arena.Take<int32_t>(p.B);
  s.rot_pos = arena.Take<int32_t>(p.B * p.S);
  s.q_block = arena.Take<int32_t>(blocked * p.B * p.S);
  s.k_block = arena.Take<int32_t>(blocked * p.B * p.kv_len);
  s.sink = arena.Take<float>(p.Hq);
  std::fill_n(s.sink, p.Hq, 0.0f);
  s.q_rot = arena.Take<float>(rot_floats);
  s.k_rot = s.q_rot + p.B * p.S * p.Hq * p.D;
  s.stage_k = arena.Take<uint8_t>(stage_bytes);
  s.stage_v = arena.Take<uint8_t>(stage_bytes);
  return s;
}

// With do_rotary: the query and new key rows rotated into scratch; the plan's views then read them.
void Rotate(Plan& p, const Scratch& s) {
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.S; ++i) s.rot_pos[b * p.S + i] = static_cast<int32_t>(gqa::RotaryPosition(p, b, i));
  RotateRows(p.tables, p.q, s.rot_pos, s.q_rot);
  RotateRows(p.tables, p.k_new, s.rot_pos, s.k_rot);
  p.q = BshdView(s.q_rot, p.B, p.S, p.Hq, p.D, p.Hq * p.D);
  p.k_new = BshdView(s.k_rot, p.B, p.S, p.Hkv, p.D, p.Hkv * p.D);
}

// Block ids as MaskSpec wants them: -1 for text; cached keys are in no block, the step's new key
// j of row b (key slot NewSlotOf(b) + j) has its token's id.
void FillBlocks(const Plan& p, const Scratch& s) {
  for (int64_t b = 0; b < p.B; ++b) {
    const int32_t* ids = p.block_ids + b * p.S;
    for (int64_t i = 0; i < p.S; ++i) s.q_block[b * p.S + i] = ids[i] > 0 ? ids[i] : -1;
    const int64_t first = gqa::NewSlotOf(p, b), end = gqa::KeysOf(p, b);
    for (int64_t j = 0; j < p.kv_len; ++j)
      s.k_block[b * p.kv_len + j] = j >= first && j < end && ids[j - first] > 0 ? ids[j - first] : -1;
  }
}

MaskSpec BuildMask(const Plan& p, const GroupQueryAttentionAttrs& a, const Scratch& s) {
  const int64_t W = a.local_window_size;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t P = PastOf(p, b), first_pos = P - gqa::NewSlotOf(p, b);  // (the position of key slot 0)
    for (int64_t i = 0; i < p.S; ++i) s.q_pos[b * p.S + i] = static_cast<int32_t>(P + i);
    for (int64_t j = 0; j < p.kv_len; ++j) s.k_pos[b * p.kv_len + j] = static_cast<int32_t>(first_pos + j);
    s.kv_valid[b] = W == 0 ? 0 : static_cast<int32_t>(gqa::KeysOf(p, b));  // a window of 0 keys sees nothing
  }
  MaskSpec mask;
  mask.q_pos = s.q_pos;
  mask.k_pos = s.k_pos;
  mask.kv_valid = s.kv_valid;
  mask.causal = a.causal == 1;
  mask.window_left = W > 0 ? static_cast<int32_t>(W - 1) : -1;
  mask.dense = p.bias;
  if (p.block_ids) {
    FillBlocks(p, s);
    mask.q_block = s.q_block;
    mask.k_block = s.k_block;
    mask.blocks_ignore_window = a.blocks_ignore_window == 1;
  }
  return mask;
}

// The step's attention over the keys in keys_k / keys_v (their first kv_len rows).
Status RunAttention(const Plan& p, const GroupQueryAttentionAttrs& attrs, const GroupQueryAttentionOutputs& out,
                    OpContext& ctx, const Scratch& scratch, const CacheView& keys_k, const CacheView& keys_v) {
  AttentionParams params;
  params.q = p.q;
  params.k = keys_k.Read(p.kv_len);
  params.v = keys_v.Read(p.kv_len);
  params.out = BshdOut(out.output.f32(), p.B, p.S, p.Hq, p.D);
  params.mask = BuildMask(p, attrs, scratch);
  params.scale = p.scale;
  params.softcap = attrs.softcap;
  params.sink = p.head_sink ? p.head_sink : p.smooth ? scratch.sink : nullptr;
  Status st = tessera::Attention(params, ctx.attention, ctx.kernel);
  if (st.ok() && out.output_qk)
    st = AttentionScores(params, attrs.qk_output == 1 ? ScoreStage::kMasked : ScoreStage::kProbabilities, 0.0f,
                         out.output_qk->f32());
  if (!st.ok()) return Status(st.code(), std::string(kOp) + ": " + st.message());
  return Status::Ok();
}

}  // namespace

StatusOr<GroupQueryAttentionShapes> InferGroupQueryAttentionShapes(const GroupQueryAttentionInputs& in,
                                                                   const GroupQueryAttentionAttrs& attrs,
                                                                   bool in_place) {
  StatusOr<Plan> plan = gqa::MakePlan(in, attrs);
  if (!plan.ok()) return plan.status();
  return ShapesOf(plan.value(), in_place);
}

Status GroupQueryAttention(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& attrs,
                           const GroupQueryAttentionOutputs& out, OpContext& ctx) {
  StatusOr<Plan> planned = gqa::MakePlan(in, attrs);
  if (!planned.ok()) return planned.status();
  Plan& p = planned.value();
  StatusOr<bool> shared = CheckOutputs(p, attrs, out);
  if (!shared.ok()) return shared.status();
  const bool in_place = shared.value();
  if (ctx.index_scratch == nullptr) return Bad("OpContext has no index_scratch arena");

  const Scratch scratch = TakeScratch(p, *ctx.index_scratch);
  if (p.rotary) Rotate(p, scratch);
  const int64_t cap = out.present_key.shape[2];
  const CacheView present_k{out.present_key.data, p.cache_dtype, p.B, p.Hkv, cap, p.D};
  const CacheView present_v{out.present_value.data, p.cache_dtype, p.B, p.Hkv, cap, p.D};
  // The keys the kernel reads: present, or with a windowed step larger than the free rows, staging.
  CacheView keys_k = present_k, keys_v = present_v;
  if (p.staged) {
    keys_k = {scratch.stage_k, p.cache_dtype, p.B, p.Hkv, p.kv_len, p.D};
    keys_v = {scratch.stage_v, p.cache_dtype, p.B, p.Hkv, p.kv_len, p.D};
  }
  if (p.windowed) {
    WriteWindowKeys(p, p.past_k, p.k_new, keys_k, in_place && !p.staged);
    WriteWindowKeys(p, p.past_v, p.v_new, keys_v, in_place && !p.staged);
  } else {
    WriteCache(p, p.past_k, p.k_new, present_k, in_place);
    WriteCache(p, p.past_v, p.v_new, present_v, in_place);
  }
  Status st = p.S == 0 ? Status::Ok() : RunAttention(p, attrs, out, ctx, scratch, keys_k, keys_v);
  if (st.ok() && p.windowed) {
    SettleWindow(p, keys_k, present_k, in_place);
    SettleWindow(p, keys_v, present_v, in_place);
  }
  return st;
}

}  // namespace tessera::onnx
