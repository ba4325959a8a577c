// Input validation for Attention(): every user-reachable mistake becomes a Status naming the
// argument and the offending value.
#include <cmath>
#include <limits>
#include <string>

#include "attention/mask.h"
#include "tessera/attention.h"

namespace tessera {
namespace {

std::string Shape(const HeadsView& v) {
  return "[" + std::to_string(v.batch) + ", " + std::to_string(v.heads) + ", " + std::to_string(v.seq) +
         ", " + std::to_string(v.dim) + "]";
}

Status CheckView(const char* name, const HeadsView& v) {
  if (v.data == nullptr && v.batch * v.heads * v.seq * v.dim > 0)
    return InvalidArgument(std::string("Attention: ") + name + " has no data");
  if (v.batch <= 0 || v.heads <= 0 || v.seq < 0 || v.dim <= 0)
    return InvalidArgument(std::string("Attention: ") + name + " has invalid shape " + Shape(v));
  if (v.dim > kMaxHeadDim)
    return InvalidArgument(std::string("Attention: ") + name + " head_dim " + std::to_string(v.dim) +
                           " exceeds the supported maximum " + std::to_string(kMaxHeadDim));
  return Status::Ok();
}

}  // namespace

Status ValidateAttention(const AttentionParams& p) {
  TESSERA_RETURN_IF_ERROR(CheckView("q", p.q));
  TESSERA_RETURN_IF_ERROR(CheckView("k", p.k));
  TESSERA_RETURN_IF_ERROR(CheckView("v", p.v));
  if (p.q.dtype != DType::kF32) return InvalidArgument("Attention: q must be f32");
  if (p.k.dtype != p.v.dtype)
    return InvalidArgument(std::string("Attention: k dtype ") + DTypeName(p.k.dtype) + " differs from v dtype " +
                           DTypeName(p.v.dtype));
  if (p.precision != AttentionPrecision::kF32 && p.precision != AttentionPrecision::kBf16)
    return InvalidArgument("Attention: precision " + std::to_string(static_cast<int>(p.precision)) + " is unknown");
  if (p.precision == AttentionPrecision::kBf16 && p.k.dtype != DType::kBF16)
    return InvalidArgument(std::string("Attention: precision bf16 needs bf16 K/V, got ") + DTypeName(p.k.dtype));
  if (static_cast<int>(p.softmax_precision) < 0 || static_cast<int>(p.softmax_precision) > 3)
    return InvalidArgument("Attention: softmax precision " + std::to_string(static_cast<int>(p.softmax_precision)) +
                           " is unknown");
  if (p.sink)
    for (int64_t h = 0; h < p.q.heads; ++h)
      if (std::isnan(p.sink[h]) || p.sink[h] == std::numeric_limits<float>::infinity())
        return InvalidArgument("Attention: sink[" + std::to_string(h) + "] is " + std::to_string(p.sink[h]) +
                               " (must be finite or -inf)");
  const int64_t B = p.q.batch, S_kv = p.k.seq;
  if (p.k.batch != B || p.v.batch != B)
    return InvalidArgument("Attention: batch mismatch: q " + Shape(p.q) + ", k " + Shape(p.k) + ", v " + Shape(p.v));
  if (p.k.heads != p.v.heads)
    return InvalidArgument("Attention: k heads " + std::to_string(p.k.heads) + " != v heads " +
                           std::to_string(p.v.heads));
  if (p.q.heads % p.k.heads != 0)
    return InvalidArgument("Attention: q heads " + std::to_string(p.q.heads) +
                           " is not a multiple of kv heads " + std::to_string(p.k.heads));
  if (p.q.dim != p.k.dim)
    return InvalidArgument("Attention: q head_dim " + std::to_string(p.q.dim) + " != k head_dim " +
                           std::to_string(p.k.dim));
  if (p.v.seq != S_kv)
    return InvalidArgument("Attention: k has " + std::to_string(S_kv) + " keys but v has " + std::to_string(p.v.seq));
  if ((p.out.data == nullptr && p.q.seq > 0) || p.out.batch != B || p.out.heads != p.q.heads || p.out.seq != p.q.seq ||
      p.out.dim != p.v.dim)
    return InvalidArgument("Attention: out must be [" + std::to_string(B) + ", " + std::to_string(p.q.heads) +
                           ", " + std::to_string(p.q.seq) + ", " + std::to_string(p.v.dim) + "]");
  if (!std::isfinite(p.scale)) return InvalidArgument("Attention: scale " + std::to_string(p.scale) + " is not finite");
  if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap))
    return InvalidArgument("Attention: softcap " + std::to_string(p.softcap) + " must be finite and >= 0");

  const MaskSpec& m = p.mask;
  if (p.q.seq > 0 && m.q_pos == nullptr) return InvalidArgument("Attention: mask.q_pos is required");
  if (S_kv > 0 && m.k_pos == nullptr) return InvalidArgument("Attention: mask.k_pos is required");
  if (m.window_left < -1 || m.window_right < -1)
    return InvalidArgument("Attention: window (" + std::to_string(m.window_left) + ", " +
                           std::to_string(m.window_right) + ") must have entries >= -1");
  if ((m.q_block == nullptr) != (m.k_block == nullptr))
    return InvalidArgument("Attention: q_block and k_block must be given together");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t valid = attn::KvValid(m, b, S_kv);
    if (valid < 0 || valid > S_kv)
      return InvalidArgument("Attention: kv_valid[" + std::to_string(b) + "] = " + std::to_string(valid) +
                             " is outside [0, " + std::to_string(S_kv) + "]");
  }
  if (m.q_block) {
    for (int64_t i = 0; i < B * p.q.seq; ++i)
      if (m.q_block[i] < -1) return InvalidArgument("Attention: q_block[" + std::to_string(i) + "] = " + std::to_string(m.q_block[i]) + " < -1");
    for (int64_t i = 0; i < B * S_kv; ++i)
      if (m.k_block[i] < -1) return InvalidArgument("Attention: k_block[" + std::to_string(i) + "] = " + std::to_string(m.k_block[i]) + " < -1");
  }
  if (p.rows_as_steps && m.q_block)
    for (int64_t i = 0; i < B * p.q.seq; ++i)
      if (m.q_block[i] >= 0)
        return InvalidArgument("Attention: rows_as_steps with query " + std::to_string(i) + " in block " +
                               std::to_string(m.q_block[i]) + " (a one-query step cannot see later block members)");
  if (m.dense.present()) {
    if (m.dense.data == nullptr) return InvalidArgument("Attention: dense mask has no data");
    // Keys at or beyond kv_valid[b] are never read, so the mask may stop there (ONNX short masks).
    if (m.dense.kind == DenseMask::Kind::kAdditive) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < (m.dense.stride_head ? p.q.heads : 1); ++h)
          for (int64_t i = 0; i < p.q.seq; ++i)
            for (int64_t j = 0; j < attn::KvValid(m, b, S_kv); ++j) {
              const float x = attn::DenseTerm(m.dense, b, h, i, j);
              if (std::isnan(x))
                return InvalidArgument("Attention: bias is NaN at [" + std::to_string(b) + ", " + std::to_string(h) +
                                       ", " + std::to_string(i) + ", " + std::to_string(j) + "]");
              if (x == std::numeric_limits<float>::infinity())
                return InvalidArgument("Attention: bias is +inf at [" + std::to_string(b) + ", " + std::to_string(h) +
                                       ", " + std::to_string(i) + ", " + std::to_string(j) + "]");
            }
    }
  }
  return Status::Ok();
}

}  // namespace tessera
