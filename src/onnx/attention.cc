#include "tessera/onnx/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "onnx/heads_layout.h"
#include "onnx/mask_broadcast.h"

namespace tessera::onnx {
namespace {

constexpr char kOp[] = "onnx::Attention";

Status Bad(const std::string& msg) { return InvalidArgument(std::string(kOp) + ": " + msg); }
std::string Str(int64_t x) { return std::to_string(x); }

// Everything derived from the inputs and attributes: sizes, input views, the mask mapping.
struct Plan {
  bool rank3 = false;
  int64_t B = 0, Hq = 0, Hkv = 0, S_q = 0, S_kv = 0, P = 0, T = 0, D = 0, Dv = 0;
  int64_t key_columns = 0;  // keys at or beyond are masked out by a short attn_mask (T without one)
  HeadsView q, k_new, v_new;      // q [B, Hq, S_q, D], k_new [B, Hkv, S_kv, D], v_new [B, Hkv, S_kv, Dv]
  HeadsView past_k, past_v;       // [B, Hkv, P, D], [B, Hkv, P, Dv]; only with past_key
  DenseMask dense;                // from attn_mask; kind kNone without one
  float scale = 1.0f;
};

Status CheckFloatInput(const char* name, const TensorRef& t) {
  if (t.type != ElemType::kFloat32)
    return Bad(std::string(name) + " must be float32, got " + ElemTypeName(t.type));
  for (int64_t d : t.shape)
    if (d < 0) return Bad(std::string(name) + " has a negative dim in shape " + ShapeString(t.shape));
  if (t.data == nullptr && NumElements(t.shape) > 0) return Bad(std::string(name) + " has no data");
  return Status::Ok();
}

Status CheckWindow(const char* name, int64_t w, int opset) {
  if (w != -1 && opset < 25) return Bad(std::string(name) + " needs opset 25, the node has opset " + Str(opset));
  if (w < -1 || w > std::numeric_limits<int32_t>::max())
    return Bad(std::string(name) + " must be -1 (unbounded) or in [0, 2^31), got " + Str(w));
  return Status::Ok();
}

Status CheckAttrs(const AttentionAttrs& a) {
  if (a.opset < 23 || a.opset > 25) return Bad("opset " + Str(a.opset) + " is not supported (23, 24 or 25)");
  if (a.is_causal != 0 && a.is_causal != 1) return Bad("is_causal must be 0 or 1, got " + Str(a.is_causal));
  if (a.qk_matmul_output_mode < 0 || a.qk_matmul_output_mode > 3)
    return Bad("qk_matmul_output_mode must be 0..3, got " + Str(a.qk_matmul_output_mode));
  if (!std::isfinite(a.softcap) || a.softcap < 0)
    return Bad("softcap must be finite and >= 0, got " + FloatString(a.softcap));
  if (a.scale && !std::isfinite(*a.scale)) return Bad("scale must be finite, got " + FloatString(*a.scale));
  if (a.scale && *a.scale < 0)
    return Bad("scale must be >= 0 (Q and K are scaled by sqrt(scale)), got " + FloatString(*a.scale));
  if (a.softmax_precision) {
    const int64_t sp = *a.softmax_precision;
    if (sp != 1 && sp != 10 && sp != 11 && sp != 16)
      return Bad("softmax_precision must be 1 (float), 10 (float16), 11 (double) or 16 (bfloat16), got " + Str(sp));
  }
  TESSERA_RETURN_IF_ERROR(CheckWindow("left_window_size", a.left_window_size, a.opset));
  TESSERA_RETURN_IF_ERROR(CheckWindow("right_window_size", a.right_window_size, a.opset));
  return Status::Ok();
}

SoftmaxPrecision SoftmaxPrecisionOf(const AttentionAttrs& a) {
  switch (a.softmax_precision.value_or(1)) {
    case 10: return SoftmaxPrecision::kF16;
    case 11: return SoftmaxPrecision::kF64;
    case 16: return SoftmaxPrecision::kBf16;
    default: return SoftmaxPrecision::kF32;
  }
}

// Shapes of Q, K, V (and heads): fills rank3, B, Hq, Hkv, S_q, S_kv, D, Dv and the input views.
Status PlanQkv(const AttentionInputs& in, const AttentionAttrs& a, Plan& p) {
  TESSERA_RETURN_IF_ERROR(CheckFloatInput("Q", in.q));
  TESSERA_RETURN_IF_ERROR(CheckFloatInput("K", in.k));
  TESSERA_RETURN_IF_ERROR(CheckFloatInput("V", in.v));
  const int64_t rank = in.q.rank();
  if (rank != 3 && rank != 4) return Bad("Q must be 3-D or 4-D, got shape " + ShapeString(in.q.shape));
  if (in.k.rank() != rank || in.v.rank() != rank)
    return Bad("Q, K and V must have the same rank, got Q " + ShapeString(in.q.shape) + ", K " +
               ShapeString(in.k.shape) + ", V " + ShapeString(in.v.shape));
  p.rank3 = rank == 3;
  p.B = in.q.dim(0);
  if (p.B <= 0) return Bad("batch_size must be > 0, got Q shape " + ShapeString(in.q.shape));
  if (in.k.dim(0) != p.B || in.v.dim(0) != p.B)
    return Bad("batch_size differs: Q " + ShapeString(in.q.shape) + ", K " + ShapeString(in.k.shape) + ", V " +
               ShapeString(in.v.shape));
  if (p.rank3) {
    if (!a.q_num_heads || !a.kv_num_heads) return Bad("3-D inputs need the q_num_heads and kv_num_heads attributes");
    p.Hq = *a.q_num_heads;
    p.Hkv = *a.kv_num_heads;
    if (p.Hq <= 0 || p.Hkv <= 0)
      return Bad("q_num_heads " + Str(p.Hq) + " and kv_num_heads " + Str(p.Hkv) + " must be > 0");
    if (in.q.dim(2) % p.Hq != 0)
      return Bad("Q hidden size " + Str(in.q.dim(2)) + " is not a multiple of q_num_heads " + Str(p.Hq));
    if (in.k.dim(2) % p.Hkv != 0)
      return Bad("K hidden size " + Str(in.k.dim(2)) + " is not a multiple of kv_num_heads " + Str(p.Hkv));
    if (in.v.dim(2) % p.Hkv != 0)
      return Bad("V hidden size " + Str(in.v.dim(2)) + " is not a multiple of kv_num_heads " + Str(p.Hkv));
    p.S_q = in.q.dim(1);
    p.S_kv = in.k.dim(1);
    p.D = in.q.dim(2) / p.Hq;
    p.Dv = in.v.dim(2) / p.Hkv;
    if (in.k.dim(2) / p.Hkv != p.D)
      return Bad("K head size " + Str(in.k.dim(2) / p.Hkv) + " (hidden " + Str(in.k.dim(2)) + " / kv_num_heads " +
                 Str(p.Hkv) + ") differs from Q head size " + Str(p.D));
    if (in.v.dim(1) != p.S_kv)
      return Bad("K has " + Str(p.S_kv) + " keys but V has " + Str(in.v.dim(1)) + " values");
  } else {
    p.Hq = in.q.dim(1);
    p.Hkv = in.k.dim(1);
    if (a.opset >= 25 && (a.q_num_heads || a.kv_num_heads))
      return Bad("q_num_heads and kv_num_heads must not be given with 4-D inputs (opset 25)");
    p.S_q = in.q.dim(2);
    p.S_kv = in.k.dim(2);
    p.D = in.q.dim(3);
    p.Dv = in.v.dim(3);
    if (a.q_num_heads && *a.q_num_heads != p.Hq)
      return Bad("q_num_heads " + Str(*a.q_num_heads) + " differs from Q shape " + ShapeString(in.q.shape));
    if (a.kv_num_heads && *a.kv_num_heads != p.Hkv)
      return Bad("kv_num_heads " + Str(*a.kv_num_heads) + " differs from K shape " + ShapeString(in.k.shape));
    if (in.v.dim(1) != p.Hkv)
      return Bad("K has " + Str(p.Hkv) + " heads but V has " + Str(in.v.dim(1)) + " (shapes " +
                 ShapeString(in.k.shape) + ", " + ShapeString(in.v.shape) + ")");
    if (in.k.dim(3) != p.D)
      return Bad("K head size " + Str(in.k.dim(3)) + " differs from Q head size " + Str(p.D));
    if (in.v.dim(2) != p.S_kv)
      return Bad("K has " + Str(p.S_kv) + " keys but V has " + Str(in.v.dim(2)) + " values");
    if (p.Hq <= 0 || p.Hkv <= 0)
      return Bad("head counts must be > 0, got Q " + ShapeString(in.q.shape) + ", K " + ShapeString(in.k.shape));
  }
  if (p.Hq % p.Hkv != 0)
    return Bad("q_num_heads " + Str(p.Hq) + " is not a multiple of kv_num_heads " + Str(p.Hkv));
  if (p.D <= 0 || p.Dv <= 0) return Bad("head sizes must be > 0, got D " + Str(p.D) + ", Dv " + Str(p.Dv));
  if (p.D > kMaxHeadDim || p.Dv > kMaxHeadDim)
    return Bad("head size " + Str(std::max(p.D, p.Dv)) + " exceeds the supported maximum " + Str(kMaxHeadDim));
  if (p.rank3) {
    p.q = BshdView(in.q.f32(), p.B, p.S_q, p.Hq, p.D, p.Hq * p.D);
    p.k_new = BshdView(in.k.f32(), p.B, p.S_kv, p.Hkv, p.D, p.Hkv * p.D);
    p.v_new = BshdView(in.v.f32(), p.B, p.S_kv, p.Hkv, p.Dv, p.Hkv * p.Dv);
  } else {
    p.q = HeadsView::Dense(in.q.data, DType::kF32, p.B, p.Hq, p.S_q, p.D);
    p.k_new = HeadsView::Dense(in.k.data, DType::kF32, p.B, p.Hkv, p.S_kv, p.D);
    p.v_new = HeadsView::Dense(in.v.data, DType::kF32, p.B, p.Hkv, p.S_kv, p.Dv);
  }
  return Status::Ok();
}

Status PlanPast(const AttentionInputs& in, Plan& p) {
  if (in.past_key.has_value() != in.past_value.has_value())
    return Bad("past_key and past_value must be given together");
  if (!in.past_key) return Status::Ok();
  const TensorRef& pk = *in.past_key;
  const TensorRef& pv = *in.past_value;
  TESSERA_RETURN_IF_ERROR(CheckFloatInput("past_key", pk));
  TESSERA_RETURN_IF_ERROR(CheckFloatInput("past_value", pv));
  if (pk.rank() != 4 || pk.dim(0) != p.B || pk.dim(1) != p.Hkv || pk.dim(3) != p.D)
    return Bad("past_key must be [" + Str(p.B) + ", " + Str(p.Hkv) + ", past_sequence_length, " + Str(p.D) +
               "], got " + ShapeString(pk.shape));
  p.P = pk.dim(2);
  if (pv.rank() != 4 || pv.dim(0) != p.B || pv.dim(1) != p.Hkv || pv.dim(2) != p.P || pv.dim(3) != p.Dv)
    return Bad("past_value must be [" + Str(p.B) + ", " + Str(p.Hkv) + ", " + Str(p.P) + ", " + Str(p.Dv) +
               "], got " + ShapeString(pv.shape));
  p.past_k = HeadsView::Dense(pk.data, DType::kF32, p.B, p.Hkv, p.P, p.D);
  p.past_v = HeadsView::Dense(pv.data, DType::kF32, p.B, p.Hkv, p.P, p.Dv);
  return Status::Ok();
}

Status PlanNonpad(const AttentionInputs& in, const AttentionAttrs& a, const Plan& p) {
  if (!in.nonpad_kv_seqlen) return Status::Ok();
  const TensorRef& n = *in.nonpad_kv_seqlen;
  if (a.opset < 24) return Bad("nonpad_kv_seqlen needs opset 24, the node has opset " + Str(a.opset));
  if (in.past_key) return Bad("nonpad_kv_seqlen cannot be combined with past_key/past_value");
  if (n.type != ElemType::kInt64) return Bad(std::string("nonpad_kv_seqlen must be int64, got ") + ElemTypeName(n.type));
  if (n.rank() != 1 || n.dim(0) != p.B)
    return Bad("nonpad_kv_seqlen must be [" + Str(p.B) + "], got " + ShapeString(n.shape));
  if (n.data == nullptr) return Bad("nonpad_kv_seqlen has no data");
  for (int64_t b = 0; b < p.B; ++b)
    if (n.i64()[b] < 0 || n.i64()[b] > p.T)
      return Bad("nonpad_kv_seqlen[" + Str(b) + "] = " + Str(n.i64()[b]) + " is outside [0, " + Str(p.T) +
                 "] (total_sequence_length)");
  return Status::Ok();
}

StatusOr<Plan> MakePlan(const AttentionInputs& in, const AttentionAttrs& a) {
  TESSERA_RETURN_IF_ERROR(CheckAttrs(a));
  Plan p;
  TESSERA_RETURN_IF_ERROR(PlanQkv(in, a, p));
  TESSERA_RETURN_IF_ERROR(PlanPast(in, p));
  p.T = p.P + p.S_kv;
  // Positions are int32 in the kernels: offset + i and j must fit.
  if (p.T + p.S_q > std::numeric_limits<int32_t>::max())
    return Bad("total_sequence_length " + Str(p.T) + " + q_sequence_length " + Str(p.S_q) + " exceeds int32");
  TESSERA_RETURN_IF_ERROR(PlanNonpad(in, a, p));
  p.key_columns = p.T;
  if (in.attn_mask) {
    StatusOr<BroadcastMask> m = BroadcastOnnxMask(kOp, "attn_mask", *in.attn_mask, p.B, p.Hq, p.S_q, p.T);
    if (!m.ok()) return m.status();
    p.key_columns = m.value().key_columns;
    if (p.key_columns > 0) p.dense = m.value().dense;
  }
  p.scale = a.scale ? *a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.D)));
  return p;
}

AttentionShapes ShapesOf(const Plan& p) {
  AttentionShapes s;
  s.y = p.rank3 ? std::vector<int64_t>{p.B, p.S_q, p.Hq * p.Dv} : std::vector<int64_t>{p.B, p.Hq, p.S_q, p.Dv};
  s.present_key = {p.B, p.Hkv, p.T, p.D};
  s.present_value = {p.B, p.Hkv, p.T, p.Dv};
  s.qk_matmul_output = {p.B, p.Hq, p.S_q, p.T};
  return s;
}

Status CheckOutput(const char* name, const MutableTensorRef& t, const std::vector<int64_t>& want) {
  if (t.type != ElemType::kFloat32) return Bad(std::string(name) + " must be float32, got " + ElemTypeName(t.type));
  if (t.shape != want) return Bad(std::string(name) + " must be " + ShapeString(want) + ", got " + ShapeString(t.shape));
  if (t.data == nullptr && NumElements(want) > 0) return Bad(std::string(name) + " has no data");
  return Status::Ok();
}

Status CheckOutputs(const AttentionInputs& in, const Plan& p, const AttentionOutputs& out) {
  const AttentionShapes shapes = ShapesOf(p);
  TESSERA_RETURN_IF_ERROR(CheckOutput("Y", out.y, shapes.y));
  if (out.present_key) TESSERA_RETURN_IF_ERROR(CheckOutput("present_key", *out.present_key, shapes.present_key));
  if (out.present_value)
    TESSERA_RETURN_IF_ERROR(CheckOutput("present_value", *out.present_value, shapes.present_value));
  if (out.qk_matmul_output)
    TESSERA_RETURN_IF_ERROR(CheckOutput("qk_matmul_output", *out.qk_matmul_output, shapes.qk_matmul_output));
  if (in.past_key && (!out.present_key || !out.present_value))
    return Bad("past_key/past_value need the present_key and present_value outputs");
  return Status::Ok();
}

// present[:, :, 0:P] = past, present[:, :, P:T] = new rows.
void WritePresent(const HeadsView& past, const HeadsView& fresh, float* present, const Plan& p, int64_t dim) {
  const OutView dst = BhsdOut(present, p.B, p.Hkv, p.T, dim, p.T);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hkv; ++h) {
      if (p.P > 0) CopyHeadRows(past, 0, dst, 0, b, h, p.P);
      CopyHeadRows(fresh, 0, dst, p.P, b, h, p.S_kv);
    }
}

// The structured mask of the node in `arena`: query i of row b at offset + i, keys at 0..T-1,
// valid below min(nonpad[b], mask columns), causal and window from the attributes.
MaskSpec BuildMask(const AttentionInputs& in, const AttentionAttrs& a, const Plan& p, Arena& arena) {
  arena.Reserve(Arena::Bytes<int32_t>(p.B * p.S_q) + Arena::Bytes<int32_t>(p.B * p.T) + Arena::Bytes<int32_t>(p.B));
  arena.Reset();
  int32_t* q_pos = arena.Take<int32_t>(p.B * p.S_q);  // [B, S_q]
  int32_t* k_pos = arena.Take<int32_t>(p.B * p.T);    // [B, T]
  int32_t* kv_valid = arena.Take<int32_t>(p.B);       // [B]
  const int64_t* nonpad = in.nonpad_kv_seqlen ? in.nonpad_kv_seqlen->i64() : nullptr;
  for (int64_t b = 0; b < p.B; ++b) {
    // The offset of causal and window: past length, nonpad - S_q for an external cache, else 0.
    const int64_t offset = in.past_key ? p.P : nonpad ? nonpad[b] - p.S_q : 0;
    for (int64_t i = 0; i < p.S_q; ++i) q_pos[b * p.S_q + i] = static_cast<int32_t>(offset + i);
    for (int64_t j = 0; j < p.T; ++j) k_pos[b * p.T + j] = static_cast<int32_t>(j);
    kv_valid[b] = static_cast<int32_t>(std::min(nonpad ? nonpad[b] : p.T, p.key_columns));
  }
  MaskSpec mask;
  mask.q_pos = q_pos;
  mask.k_pos = k_pos;
  mask.kv_valid = kv_valid;
  mask.causal = a.is_causal != 0;
  mask.window_left = static_cast<int32_t>(a.left_window_size);
  mask.window_right = static_cast<int32_t>(a.right_window_size);
  mask.dense = p.dense;
  return mask;
}

ScoreStage StageOf(int64_t mode) {
  switch (mode) {
    case 0: return ScoreStage::kRaw;
    case 1: return ScoreStage::kSoftcapped;
    case 2: return ScoreStage::kMasked;
    default: return ScoreStage::kProbabilities;
  }
}

}  // namespace

StatusOr<AttentionShapes> InferAttentionShapes(const AttentionInputs& in, const AttentionAttrs& attrs) {
  StatusOr<Plan> plan = MakePlan(in, attrs);
  if (!plan.ok()) return plan.status();
  return ShapesOf(plan.value());
}

Status Attention(const AttentionInputs& in, const AttentionAttrs& attrs, const AttentionOutputs& out,
                 OpContext& ctx) {
  StatusOr<Plan> planned = MakePlan(in, attrs);
  if (!planned.ok()) return planned.status();
  const Plan& p = planned.value();
  TESSERA_RETURN_IF_ERROR(CheckOutputs(in, p, out));
  if (ctx.index_scratch == nullptr) return Bad("OpContext has no index_scratch arena");

  if (out.present_key) WritePresent(p.past_k, p.k_new, out.present_key->f32(), p, p.D);
  if (out.present_value) WritePresent(p.past_v, p.v_new, out.present_value->f32(), p, p.Dv);
  if (p.S_q == 0) return Status::Ok();

  // Keys the kernel sees: the present cache with a past, the new K/V otherwise.
  AttentionParams params;
  params.q = p.q;
  params.k = in.past_key ? BhsdView(out.present_key->f32(), p.B, p.Hkv, p.T, p.D, p.T) : p.k_new;
  params.v = in.past_key ? BhsdView(out.present_value->f32(), p.B, p.Hkv, p.T, p.Dv, p.T) : p.v_new;
  params.out = p.rank3 ? BshdOut(out.y.f32(), p.B, p.S_q, p.Hq, p.Dv) : OutView::Dense(out.y.f32(), p.B, p.Hq, p.S_q, p.Dv);
  params.mask = BuildMask(in, attrs, p, *ctx.index_scratch);
  params.scale = p.scale;
  params.softcap = attrs.softcap;
  params.softmax_precision = SoftmaxPrecisionOf(attrs);
  Status st = tessera::Attention(params, ctx.attention, ctx.kernel);
  if (st.ok() && out.qk_matmul_output)
    st = AttentionScores(params, StageOf(attrs.qk_matmul_output_mode), -std::numeric_limits<float>::infinity(),
                         out.qk_matmul_output->f32());
  if (!st.ok()) return Status(st.code(), std::string(kOp) + ": " + st.message());
  return Status::Ok();
}

}  // namespace tessera::onnx
