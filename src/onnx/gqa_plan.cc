#include "onnx/gqa_plan.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "onnx/heads_layout.h"
#include "onnx/mask_broadcast.h"

namespace tessera::onnx::gqa {
namespace {

Status Bad(const std::string& msg) { return InvalidArgument(std::string(kOp) + ": " + msg); }
std::string Str(int64_t x) { return std::to_string(x); }

Status CheckOneOf(const char* name, int64_t v, std::initializer_list<int64_t> allowed) {
  for (int64_t a : allowed)
    if (v == a) return Status::Ok();
  std::string list;
  for (int64_t a : allowed) list += (list.empty() ? "" : ", ") + Str(a);
  return Bad(std::string(name) + " must be one of " + list + ", got " + Str(v));
}

Status CheckAttrs(const GroupQueryAttentionAttrs& a) {
  if (a.num_heads <= 0 || a.kv_num_heads <= 0)
    return Bad("num_heads " + Str(a.num_heads) + " and kv_num_heads " + Str(a.kv_num_heads) + " must be > 0");
  if (a.num_heads % a.kv_num_heads != 0)
    return Bad("num_heads " + Str(a.num_heads) + " is not a multiple of kv_num_heads " + Str(a.kv_num_heads));
  if (a.local_window_size < -1) return Bad("local_window_size must be -1 or >= 0, got " + Str(a.local_window_size));
  if (a.local_window_size > std::numeric_limits<int32_t>::max())
    return Bad("local_window_size " + Str(a.local_window_size) + " exceeds int32");
  if (!std::isfinite(a.softcap) || a.softcap < 0)
    return Bad("softcap must be finite and >= 0, got " + FloatString(a.softcap));
  if (!std::isfinite(a.scale)) return Bad("scale must be finite, got " + FloatString(a.scale));
  TESSERA_RETURN_IF_ERROR(CheckOneOf("causal", a.causal, {0, 1}));
  TESSERA_RETURN_IF_ERROR(CheckOneOf("do_rotary", a.do_rotary, {0, 1}));
  TESSERA_RETURN_IF_ERROR(CheckOneOf("rotary_interleaved", a.rotary_interleaved, {0, 1}));
  TESSERA_RETURN_IF_ERROR(CheckOneOf("smooth_softmax", a.smooth_softmax, {-1, 0, 1}));
  TESSERA_RETURN_IF_ERROR(CheckOneOf("qk_output", a.qk_output, {0, 1, 2}));
  TESSERA_RETURN_IF_ERROR(CheckOneOf("blocks_ignore_window", a.blocks_ignore_window, {0, 1}));
  TESSERA_RETURN_IF_ERROR(CheckOneOf("sliding_window_cache", a.sliding_window_cache, {0, 1}));
  if (a.sliding_window_cache == 1 && a.local_window_size <= 0)
    return Bad("sliding_window_cache = 1 needs local_window_size > 0, got " + Str(a.local_window_size));
  if (a.sliding_window_cache == 1 && a.qk_output != 0)
    return Bad("qk_output must be 0 with sliding_window_cache = 1, got " + Str(a.qk_output));
  if (a.causal == 0 && a.local_window_size != -1)
    return Bad("local_window_size must be -1 when causal is 0, got " + Str(a.local_window_size));
  return Status::Ok();
}

Status CheckFloat(const char* name, const TensorRef& t, int64_t rank) {
  if (t.type != ElemType::kFloat32) return Bad(std::string(name) + " must be float32, got " + ElemTypeName(t.type));
  if (t.rank() != rank)
    return Bad(std::string(name) + " must be " + Str(rank) + "-D, got shape " + ShapeString(t.shape));
  for (int64_t d : t.shape)
    if (d < 0) return Bad(std::string(name) + " has a negative dim in shape " + ShapeString(t.shape));
  if (t.data == nullptr && NumElements(t.shape) > 0) return Bad(std::string(name) + " has no data");
  return Status::Ok();
}

Status PlanQkv(const GroupQueryAttentionInputs& in, Plan& p) {
  TESSERA_RETURN_IF_ERROR(CheckFloat("query", in.query, 3));
  p.B = in.query.dim(0);
  p.S = in.query.dim(1);
  if (p.B <= 0) return Bad("batch_size must be > 0, got query shape " + ShapeString(in.query.shape));
  if (in.key.has_value() != in.value.has_value())
    return Bad("key and value must both be given, or both be absent for packed QKV");
  p.packed = !in.key;
  const int64_t hidden = in.query.dim(2);
  const int64_t q_parts = p.packed ? p.Hq + 2 * p.Hkv : p.Hq;
  if (hidden % q_parts != 0)
    return Bad(std::string("query hidden size ") + Str(hidden) + " is not a multiple of " +
               (p.packed ? "num_heads + 2 * kv_num_heads = " : "num_heads = ") + Str(q_parts));
  p.D = hidden / q_parts;
  if (p.D <= 0 || p.D > kMaxHeadDim)
    return Bad("head size " + Str(p.D) + " is outside [1, " + Str(kMaxHeadDim) + "]");
  if (p.packed) {
    const float* base = in.query.f32();
    p.q = BshdView(base, p.B, p.S, p.Hq, p.D, hidden);
    p.k_new = BshdView(base ? base + p.Hq * p.D : nullptr, p.B, p.S, p.Hkv, p.D, hidden);
    p.v_new = BshdView(base ? base + (p.Hq + p.Hkv) * p.D : nullptr, p.B, p.S, p.Hkv, p.D, hidden);
    return Status::Ok();
  }
  TESSERA_RETURN_IF_ERROR(CheckFloat("key", *in.key, 3));
  TESSERA_RETURN_IF_ERROR(CheckFloat("value", *in.value, 3));
  const std::vector<int64_t> want = {p.B, p.S, p.Hkv * p.D};
  if (in.key->shape != want)
    return Bad("key must be " + ShapeString(want) + " (kv_num_heads " + Str(p.Hkv) + " x head size " + Str(p.D) +
               "), got " + ShapeString(in.key->shape));
  if (in.value->shape != want) return Bad("value must be " + ShapeString(want) + ", got " + ShapeString(in.value->shape));
  p.q = BshdView(in.query.f32(), p.B, p.S, p.Hq, p.D, p.Hq * p.D);
  p.k_new = BshdView(in.key->f32(), p.B, p.S, p.Hkv, p.D, p.Hkv * p.D);
  p.v_new = BshdView(in.value->f32(), p.B, p.S, p.Hkv, p.D, p.Hkv * p.D);
  return Status::Ok();
}

Status PlanPast(const GroupQueryAttentionInputs& in, Plan& p) {
  if (in.past_key.has_value() != in.past_value.has_value())
    return Bad("past_key and past_value must be given together");
  if (!in.past_key) return Status::Ok();
  p.has_past = true;
  const TensorRef& pk = *in.past_key;
  const TensorRef& pv = *in.past_value;
  if (pk.type != ElemType::kFloat32 && pk.type != ElemType::kBFloat16 && pk.type != ElemType::kFloat16)
    return Bad(std::string("past_key must be float32, bfloat16 or float16, got ") + ElemTypeName(pk.type));
  if (pv.type != pk.type)
    return Bad(std::string("past_value must have past_key's type ") + ElemTypeName(pk.type) + ", got " +
               ElemTypeName(pv.type));
  p.cache_dtype = pk.type == ElemType::kFloat32 ? DType::kF32 : pk.type == ElemType::kBFloat16 ? DType::kBF16 : DType::kF16;
  if (pk.rank() != 4 || pk.dim(0) != p.B || pk.dim(1) != p.Hkv || pk.dim(3) != p.D || pk.dim(2) < 0)
    return Bad("past_key must be [" + Str(p.B) + ", " + Str(p.Hkv) + ", capacity, " + Str(p.D) + "], got " +
               ShapeString(pk.shape));
  if (pv.shape != pk.shape)
    return Bad("past_value must have past_key's shape " + ShapeString(pk.shape) + ", got " + ShapeString(pv.shape));
  p.C = pk.dim(2);
  for (const TensorRef* t : {&pk, &pv})
    if (t->data == nullptr && NumElements(t->shape) > 0) return Bad(std::string(t == &pk ? "past_key" : "past_value") + " has no data");
  p.past_k = {pk.data, p.cache_dtype, p.B, p.Hkv, p.C, p.D, p.Hkv * p.C * p.D, p.C * p.D, p.D};
  p.past_v = {pv.data, p.cache_dtype, p.B, p.Hkv, p.C, p.D, p.Hkv * p.C * p.D, p.C * p.D, p.D};
  return Status::Ok();
}

Status PlanLengths(const GroupQueryAttentionInputs& in, Plan& p) {
  const TensorRef& t = in.total_sequence_length;
  if (t.type != ElemType::kInt32)
    return Bad(std::string("total_sequence_length must be int32, got ") + ElemTypeName(t.type));
  if (NumElements(t.shape) != 1 || t.rank() > 1)
    return Bad("total_sequence_length must be a scalar or [1], got shape " + ShapeString(t.shape));
  if (t.data == nullptr) return Bad("total_sequence_length has no data");
  p.total = t.i32()[0];
  if (p.total < 1) return Bad("total_sequence_length must be >= 1, got " + Str(p.total));
  if (p.total + p.S > std::numeric_limits<int32_t>::max())
    return Bad("total_sequence_length " + Str(p.total) + " + sequence_length " + Str(p.S) + " exceeds int32");
  const TensorRef& s = in.seqlens_k;
  if (s.type != ElemType::kInt32) return Bad(std::string("seqlens_k must be int32, got ") + ElemTypeName(s.type));
  if (s.rank() != 1 || s.dim(0) != p.B)
    return Bad("seqlens_k must be [" + Str(p.B) + "], got " + ShapeString(s.shape));
  if (s.data == nullptr) return Bad("seqlens_k has no data");
  p.seqlens_k = s.i32();
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t T = TotalOf(p, b);
    if (T < 1 || T > p.total)
      return Bad("seqlens_k[" + Str(b) + "] = " + Str(p.seqlens_k[b]) + " is outside [0, " + Str(p.total - 1) +
                 "] (total_sequence_length - 1)");
    const int64_t P = PastOf(p, b);
    if (!in.past_key && P > 0)
      return Bad("seqlens_k[" + Str(b) + "] = " + Str(p.seqlens_k[b]) + " means " + Str(P) +
                 " cached tokens before this step of " + Str(p.S) + ", but past_key is absent");
    if (!p.windowed && P > p.C)
      return Bad("seqlens_k[" + Str(b) + "] = " + Str(p.seqlens_k[b]) + " means " + Str(P) +
                 " cached tokens before this step, but past_key holds only " + Str(p.C));
  }
  return Status::Ok();
}

Status PlanBias(const GroupQueryAttentionInputs& in, Plan& p) {
  if (!in.attention_bias) return Status::Ok();
  const TensorRef& b = *in.attention_bias;
  if (b.type != ElemType::kFloat32)
    return Bad(std::string("attention_bias must be float32, got ") + ElemTypeName(b.type));
  if (b.rank() != 4 || b.dim(2) != p.S || b.dim(3) != p.total)
    return Bad("attention_bias must be [" + Str(p.B) + " or 1, " + Str(p.Hq) + " or 1, " + Str(p.S) + ", " +
               Str(p.total) + "] (total_sequence_length), got " + ShapeString(b.shape));
  StatusOr<BroadcastMask> m = BroadcastOnnxMask(kOp, "attention_bias", b, p.B, p.Hq, p.S, p.total);
  if (!m.ok()) return m.status();
  p.bias = m.value().dense;
  return Status::Ok();
}

// position_ids[b][s], or its first element + s in a first prompt (onnxruntime reads no other
// element there), or P_b + s without position_ids.
int64_t UnclampedPosition(const Plan& p, int64_t b, int64_t s) {
  if (!p.position_ids) return PastOf(p, b) + s;
  return p.first_prompt ? p.position_ids[0] + s : p.position_ids[b * p.S + s];
}

Status PlanTables(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& a, Plan& p) {
  if (!in.cos_cache || !in.sin_cache) return Bad("do_rotary=1 needs the cos_cache and sin_cache inputs");
  TESSERA_RETURN_IF_ERROR(CheckFloat("cos_cache", *in.cos_cache, 2));
  TESSERA_RETURN_IF_ERROR(CheckFloat("sin_cache", *in.sin_cache, 2));
  const TensorRef& c = *in.cos_cache;
  if (in.sin_cache->shape != c.shape)
    return Bad("sin_cache must have cos_cache's shape " + ShapeString(c.shape) + ", got " +
               ShapeString(in.sin_cache->shape));
  if (c.dim(1) < 1 || 2 * c.dim(1) > p.D)
    return Bad("cos_cache must be [max_position, R / 2] with 2 <= R <= head size " + Str(p.D) + ", got " +
               ShapeString(c.shape));
  if (c.dim(0) < 1) return Bad("cos_cache has no rows (shape " + ShapeString(c.shape) + ")");
  p.rotary = true;
  p.tables = {c.f32(), in.sin_cache->f32(), c.dim(0), c.dim(1), a.rotary_interleaved == 1};
  return Status::Ok();
}

// The rotary inputs; positions of valid rows must index the tables.
Status PlanRotary(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& a, Plan& p) {
  if (a.do_rotary == 0) return Status::Ok();  // (cos/sin caches and position_ids are then unused, as in onnxruntime)
  TESSERA_RETURN_IF_ERROR(PlanTables(in, a, p));
  p.first_prompt = p.S == p.total;
  if (in.position_ids) {
    const TensorRef& ids = *in.position_ids;
    if (ids.type != ElemType::kInt64)
      return Bad(std::string("position_ids must be int64, got ") + ElemTypeName(ids.type));
    // (onnxruntime accepts a wider array but indexes it as [B, S]: refused rather than guessed)
    if (ids.shape != std::vector<int64_t>{p.B, p.S})
      return Bad("position_ids must be [" + Str(p.B) + ", " + Str(p.S) + "] (batch_size, sequence_length), got " +
                 ShapeString(ids.shape));
    if (ids.data == nullptr) return Bad("position_ids has no data");
    p.position_ids = ids.i64();
    // Every element must index the tables, read or not (onnxruntime checks them all too).
    for (int64_t i = 0; i < p.B * p.S; ++i)
      if (p.position_ids[i] < 0 || p.position_ids[i] >= p.tables.rows)
        return Bad("position_ids[" + Str(i / p.S) + "][" + Str(i % p.S) + "] = " +
                   Str(p.position_ids[i]) + " is outside the cos_cache rows [0, " + Str(p.tables.rows) + ")");
  }
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t valid = TotalOf(p, b) - PastOf(p, b);
    for (int64_t s = 0; s < valid; ++s) {
      const int64_t pos = UnclampedPosition(p, b, s);
      if (pos < 0 || pos >= p.tables.rows)
        return Bad("the rotary position of token " + Str(s) + " of batch row " + Str(b) + " is " + Str(pos) +
                   ", outside the cos_cache rows [0, " + Str(p.tables.rows) + ")");
    }
  }
  return Status::Ok();
}

Status PlanSink(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& a, Plan& p) {
  if (in.head_sink) {
    TESSERA_RETURN_IF_ERROR(CheckFloat("head_sink", *in.head_sink, 1));
    if (in.head_sink->dim(0) != p.Hq)
      return Bad("head_sink must be [" + Str(p.Hq) + "] (num_heads), got " + ShapeString(in.head_sink->shape));
    p.head_sink = in.head_sink->f32();
    for (int64_t h = 0; h < p.Hq; ++h)
      if (std::isnan(p.head_sink[h]) || p.head_sink[h] == std::numeric_limits<float>::infinity())
        return Bad("head_sink[" + Str(h) + "] = " + FloatString(p.head_sink[h]) + " must be finite or -inf");
  }
  p.smooth = !in.head_sink && a.smooth_softmax == 1;
  return Status::Ok();
}

// sliding_window_cache = 1: window-sized past buffers (capacity >= W), keys per row, staging.
Status PlanWindow(const GroupQueryAttentionInputs& in, Plan& p) {
  p.kv_len = p.total;
  if (!p.windowed) return Status::Ok();
  if (!p.has_past) return Bad("sliding_window_cache = 1 needs past_key and past_value (the window-sized buffers)");
  if (p.C < p.window)
    return Bad("with sliding_window_cache = 1 the past_key capacity " + Str(p.C) + " must be >= local_window_size " +
               Str(p.window));
  if (in.attention_bias) return Bad("attention_bias is not supported with sliding_window_cache = 1");
  p.kv_len = 0;
  for (int64_t b = 0; b < p.B; ++b) p.kv_len = std::max(p.kv_len, KeysOf(p, b));
  p.staged = p.kv_len > p.C;
  return Status::Ok();
}

Status PlanBlocks(const GroupQueryAttentionInputs& in, Plan& p) {
  if (!in.block_ids) return Status::Ok();
  const TensorRef& t = *in.block_ids;
  if (t.type != ElemType::kInt32) return Bad(std::string("block_ids must be int32, got ") + ElemTypeName(t.type));
  if (t.shape != std::vector<int64_t>{p.B, p.S})
    return Bad("block_ids must be [" + Str(p.B) + ", " + Str(p.S) + "] (batch_size, sequence_length), got " +
               ShapeString(t.shape));
  if (t.data == nullptr && p.B * p.S > 0) return Bad("block_ids has no data");
  p.block_ids = t.i32();
  for (int64_t i = 0; i < p.B * p.S; ++i)
    if (p.block_ids[i] < 0)
      return Bad("block_ids[" + Str(i / p.S) + "][" + Str(i % p.S) + "] = " + Str(p.block_ids[i]) +
                 " is negative (0 = text, > 0 = an image block's id)");
  return Status::Ok();
}

}  // namespace

int64_t RotaryPosition(const Plan& p, int64_t b, int64_t s) {
  return std::clamp<int64_t>(UnclampedPosition(p, b, s), 0, p.tables.rows - 1);
}

StatusOr<Plan> MakePlan(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& a) {
  TESSERA_RETURN_IF_ERROR(CheckAttrs(a));
  Plan p;
  p.Hq = a.num_heads;
  p.Hkv = a.kv_num_heads;
  p.windowed = a.sliding_window_cache == 1;
  p.window = a.local_window_size;
  TESSERA_RETURN_IF_ERROR(PlanQkv(in, p));
  TESSERA_RETURN_IF_ERROR(PlanPast(in, p));
  TESSERA_RETURN_IF_ERROR(PlanLengths(in, p));
  TESSERA_RETURN_IF_ERROR(PlanBias(in, p));
  TESSERA_RETURN_IF_ERROR(PlanWindow(in, p));
  TESSERA_RETURN_IF_ERROR(PlanRotary(in, a, p));
  TESSERA_RETURN_IF_ERROR(PlanSink(in, a, p));
  TESSERA_RETURN_IF_ERROR(PlanBlocks(in, p));
  p.scale = a.scale != 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
  return p;
}

}  // namespace tessera::onnx::gqa
