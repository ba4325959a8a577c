#include "tessera/onnx/group_query_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "onnx/heads_layout.h"
#include "onnx/mask_broadcast.h"

namespace tessera::onnx {
namespace {

constexpr char kOp[] = "onnx::GroupQueryAttention";

Status Bad(const std::string& msg) { return InvalidArgument(std::string(kOp) + ": " + msg); }
std::string Str(int64_t x) { return std::to_string(x); }

struct Plan {
  bool packed = false;
  bool has_past = false;
  int64_t B = 0, S = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t C = 0;      // past capacity (0 without past_key)
  int64_t total = 0;  // total_sequence_length
  HeadsView q, k_new, v_new;  // [B, Hq, S, D], [B, Hkv, S, D] x2 over the BSHD inputs
  HeadsView past_k, past_v;   // [B, Hkv, C, D] BNSH; only with past_key
  const int32_t* seqlens_k = nullptr;  // [B]
  DenseMask bias;                      // from attention_bias; kind kNone without one
  float scale = 1.0f;
};

// Tokens in the cache after the step, and before it.
int64_t TotalOf(const Plan& p, int64_t b) { return static_cast<int64_t>(p.seqlens_k[b]) + 1; }
int64_t PastOf(const Plan& p, int64_t b) { return TotalOf(p, b) - std::min(p.S, TotalOf(p, b)); }

Status CheckFloat(const char* name, const TensorRef& t, int64_t rank) {
  if (t.type != ElemType::kFloat32) return Bad(std::string(name) + " must be float32, got " + ElemTypeName(t.type));
  if (t.rank() != rank)
    return Bad(std::string(name) + " must be " + Str(rank) + "-D, got shape " + ShapeString(t.shape));
  for (int64_t d : t.shape)
    if (d < 0) return Bad(std::string(name) + " has a negative dim in shape " + ShapeString(t.shape));
  if (t.data == nullptr && NumElements(t.shape) > 0) return Bad(std::string(name) + " has no data");
  return Status::Ok();
}

Status CheckAttrs(const GroupQueryAttentionAttrs& a) {
  if (a.do_rotary == 1)
    return Unimplemented(std::string(kOp) + ": do_rotary=1 is not supported; apply rotary embeddings before the node");
  if (a.do_rotary != 0) return Bad("do_rotary must be 0 or 1, got " + Str(a.do_rotary));
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
  TESSERA_RETURN_IF_ERROR(CheckFloat("past_key", *in.past_key, 4));
  TESSERA_RETURN_IF_ERROR(CheckFloat("past_value", *in.past_value, 4));
  const std::vector<int64_t>& pk = in.past_key->shape;
  if (pk[0] != p.B || pk[1] != p.Hkv || pk[3] != p.D)
    return Bad("past_key must be [" + Str(p.B) + ", " + Str(p.Hkv) + ", capacity, " + Str(p.D) + "], got " +
               ShapeString(pk));
  if (in.past_value->shape != pk)
    return Bad("past_value must have past_key's shape " + ShapeString(pk) + ", got " +
               ShapeString(in.past_value->shape));
  p.C = pk[2];
  p.past_k = BhsdView(in.past_key->f32(), p.B, p.Hkv, p.C, p.D, p.C);
  p.past_v = BhsdView(in.past_value->f32(), p.B, p.Hkv, p.C, p.D, p.C);
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
    if (P > p.C)
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

StatusOr<Plan> MakePlan(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& a) {
  TESSERA_RETURN_IF_ERROR(CheckAttrs(a));
  Plan p;
  p.Hq = a.num_heads;
  p.Hkv = a.kv_num_heads;
  TESSERA_RETURN_IF_ERROR(PlanQkv(in, p));
  TESSERA_RETURN_IF_ERROR(PlanPast(in, p));
  TESSERA_RETURN_IF_ERROR(PlanLengths(in, p));
  TESSERA_RETURN_IF_ERROR(PlanBias(in, p));
  p.scale = a.scale != 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
  return p;
}

StatusOr<GroupQueryAttentionShapes> ShapesOf(const Plan& p, bool in_place) {
  if (in_place && !p.has_past)
    return Bad("present can only share the past buffer when past_key/past_value are given");
  if (in_place && p.C < p.total)
    return Bad("in place, past_key capacity " + Str(p.C) + " must be >= total_sequence_length " + Str(p.total));
  const int64_t cap = in_place ? p.C : std::max(p.total, p.C);
  GroupQueryAttentionShapes s;
  s.output = {p.B, p.S, p.Hq * p.D};
  s.present_key = {p.B, p.Hkv, cap, p.D};
  s.present_value = s.present_key;
  return s;
}

bool Overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

Status CheckOutput(const char* name, const MutableTensorRef& t, const std::vector<int64_t>& want) {
  if (t.shape != want) return Bad(std::string(name) + " must be " + ShapeString(want) + ", got " + ShapeString(t.shape));
  if (t.data == nullptr && NumElements(want) > 0) return Bad(std::string(name) + " has no data");
  return Status::Ok();
}

// Writes one cache (K or V): new rows [0, Q_b) at [P_b, T_b); when not in place also past rows
// [0, P_b) and zeros in rows [T_b, capacity).
void WriteCache(const Plan& p, const HeadsView& past, const HeadsView& fresh, float* present, int64_t cap,
                bool in_place) {
  const OutView dst = BhsdOut(present, p.B, p.Hkv, cap, p.D, cap);
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t T = TotalOf(p, b), P = PastOf(p, b);
    for (int64_t h = 0; h < p.Hkv; ++h) {
      if (!in_place) {
        if (P > 0) CopyHeadRows(past, 0, dst, 0, b, h, P);
        ZeroHeadRows(dst, T, b, h, cap - T);
      }
      CopyHeadRows(fresh, 0, dst, P, b, h, T - P);
    }
  }
}

}  // namespace

StatusOr<GroupQueryAttentionShapes> InferGroupQueryAttentionShapes(const GroupQueryAttentionInputs& in,
                                                                   const GroupQueryAttentionAttrs& attrs,
                                                                   bool in_place) {
  StatusOr<Plan> plan = MakePlan(in, attrs);
  if (!plan.ok()) return plan.status();
  return ShapesOf(plan.value(), in_place);
}

Status GroupQueryAttention(const GroupQueryAttentionInputs& in, const GroupQueryAttentionAttrs& attrs,
                           const GroupQueryAttentionOutputs& out, OpContext& ctx) {
  StatusOr<Plan> planned = MakePlan(in, attrs);
  if (!planned.ok()) return planned.status();
  const Plan& p = planned.value();
  // Sharing is decided by identity of the data pointers (an empty cache never shares).
  const bool k_shared = p.has_past && p.past_k.data != nullptr && out.present_key.data == p.past_k.data;
  const bool v_shared = p.has_past && p.past_v.data != nullptr && out.present_value.data == p.past_v.data;
  if (k_shared != v_shared)
    return Bad("present_key and present_value must both share the past buffers or both be separate");
  const bool in_place = k_shared;
  StatusOr<GroupQueryAttentionShapes> shapes = ShapesOf(p, in_place);
  if (!shapes.ok()) return shapes.status();
  TESSERA_RETURN_IF_ERROR(CheckOutput("output", out.output, shapes.value().output));
  TESSERA_RETURN_IF_ERROR(CheckOutput("present_key", out.present_key, shapes.value().present_key));
  TESSERA_RETURN_IF_ERROR(CheckOutput("present_value", out.present_value, shapes.value().present_value));
  const int64_t cap = shapes.value().present_key[2];
  const int64_t cache_bytes = p.B * p.Hkv * cap * p.D * static_cast<int64_t>(sizeof(float));
  const int64_t past_bytes = p.B * p.Hkv * p.C * p.D * static_cast<int64_t>(sizeof(float));
  if (!in_place && p.has_past &&
      (Overlaps(out.present_key.data, cache_bytes, p.past_k.data, past_bytes) ||
       Overlaps(out.present_key.data, cache_bytes, p.past_v.data, past_bytes) ||
       Overlaps(out.present_value.data, cache_bytes, p.past_k.data, past_bytes) ||
       Overlaps(out.present_value.data, cache_bytes, p.past_v.data, past_bytes)))
    return Bad("present_key/present_value partly overlap past_key/past_value: share them exactly or not at all");
  if (ctx.index_scratch == nullptr) return Bad("OpContext has no index_scratch arena");

  WriteCache(p, p.past_k, p.k_new, out.present_key.data, cap, in_place);
  WriteCache(p, p.past_v, p.v_new, out.present_value.data, cap, in_place);
  if (p.S == 0) return Status::Ok();

  Arena& arena = *ctx.index_scratch;
  arena.Reserve(Arena::Bytes<int32_t>(p.B * p.S) + Arena::Bytes<int32_t>(p.B * p.total) + Arena::Bytes<int32_t>(p.B));
  arena.Reset();
  int32_t* q_pos = arena.Take<int32_t>(p.B * p.S);      // [B, S]
  int32_t* k_pos = arena.Take<int32_t>(p.B * p.total);  // [B, total]
  int32_t* kv_valid = arena.Take<int32_t>(p.B);         // [B]
  const int64_t W = attrs.local_window_size;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t P = PastOf(p, b);
    for (int64_t s = 0; s < p.S; ++s) q_pos[b * p.S + s] = static_cast<int32_t>(P + s);
    for (int64_t j = 0; j < p.total; ++j) k_pos[b * p.total + j] = static_cast<int32_t>(j);
    kv_valid[b] = W == 0 ? 0 : static_cast<int32_t>(TotalOf(p, b));  // a window of 0 keys sees nothing
  }

  AttentionParams params;
  params.q = p.q;
  params.k = BhsdView(out.present_key.data, p.B, p.Hkv, p.total, p.D, cap);
  params.v = BhsdView(out.present_value.data, p.B, p.Hkv, p.total, p.D, cap);
  params.out = BshdOut(out.output.data, p.B, p.S, p.Hq, p.D);
  params.mask.q_pos = q_pos;
  params.mask.k_pos = k_pos;
  params.mask.kv_valid = kv_valid;
  params.mask.causal = true;
  params.mask.window_left = W > 0 ? static_cast<int32_t>(W - 1) : -1;
  params.mask.dense = p.bias;
  params.scale = p.scale;
  params.softcap = attrs.softcap;
  const Status st = tessera::Attention(params, ctx.attention, ctx.kernel);
  if (!st.ok()) return Status(st.code(), std::string(kOp) + ": " + st.message());
  return Status::Ok();
}

}  // namespace tessera::onnx
