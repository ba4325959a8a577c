// Public entry: validate, choose a kernel, reserve scratch (first call for a shape only), run.
#include <new>
#include <string>

#include "attention/kernels.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"

namespace tessera {

const char* AttentionKernelName(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kAuto: return "auto";
    case AttentionKernel::kReference: return "reference";
    case AttentionKernel::kPrefill: return "prefill";
    case AttentionKernel::kDecode: return "decode";
  }
  return "?";
}

bool ParseAttentionKernel(const std::string& name, AttentionKernel* out) {
  for (AttentionKernel k : {AttentionKernel::kAuto, AttentionKernel::kReference, AttentionKernel::kPrefill,
                            AttentionKernel::kDecode})
    if (name == AttentionKernelName(k)) {
      *out = k;
      return true;
    }
  return false;
}

const char* AttentionPrecisionName(AttentionPrecision p) {
  return p == AttentionPrecision::kBf16 ? "bf16" : "f32";
}

bool ParseAttentionPrecision(const std::string& name, AttentionPrecision* out) {
  for (AttentionPrecision p : {AttentionPrecision::kF32, AttentionPrecision::kBf16})
    if (name == AttentionPrecisionName(p)) {
      *out = p;
      return true;
    }
  return false;
}

const char* SoftmaxPrecisionName(SoftmaxPrecision p) {
  switch (p) {
    case SoftmaxPrecision::kF32: return "f32";
    case SoftmaxPrecision::kF64: return "f64";
    case SoftmaxPrecision::kF16: return "f16";
    case SoftmaxPrecision::kBf16: return "bf16";
  }
  return "?";
}

// Every input ValidateAttention() accepts is supported by all three kernels (head_dim up to
// kMaxHeadDim, any strides, any mask) except a softmax precision other than f32, which only the
// reference kernel implements. Otherwise dispatch is a pure cost choice: the split-K decode kernel
// when one query row per head must spread the keys over threads, the tiled kernel otherwise. The
// reference kernel runs only on request. rows_as_steps takes the decode kernel at any S_q: it
// computes each query position on its own, as the one-row step it must reproduce.
AttentionKernel ChooseAttentionKernel(const AttentionParams& p) {
  if (p.softmax_precision != SoftmaxPrecision::kF32) return AttentionKernel::kReference;
  return p.q.seq == 1 || p.rows_as_steps ? AttentionKernel::kDecode : AttentionKernel::kPrefill;
}

size_t AttentionScratchBytes(const AttentionParams& p, int num_threads, AttentionKernel kernel) {
  if (kernel == AttentionKernel::kAuto) kernel = ChooseAttentionKernel(p);
  switch (kernel) {
    case AttentionKernel::kDecode: return attn::DecodeScratchBytes(p, num_threads);
    case AttentionKernel::kPrefill: return attn::PrefillScratchBytes(p, num_threads);
    default: return 0;
  }
}

Status Attention(const AttentionParams& p, AttentionContext& ctx, AttentionKernel kernel) {
  TESSERA_RETURN_IF_ERROR(ValidateAttention(p));
  if (kernel == AttentionKernel::kAuto) kernel = ChooseAttentionKernel(p);
  if (p.q.seq == 0) return Status::Ok();
  if (kernel == AttentionKernel::kReference) {
    attn::ReferenceAttention(p);
    return Status::Ok();
  }
  if (p.softmax_precision != SoftmaxPrecision::kF32)
    return InvalidArgument(std::string("Attention: softmax precision ") + SoftmaxPrecisionName(p.softmax_precision) +
                           " runs on the reference kernel only, not " + AttentionKernelName(kernel));
  if (p.rows_as_steps && kernel == AttentionKernel::kPrefill)
    return InvalidArgument("Attention: rows_as_steps runs on the decode or reference kernel, not prefill");
  if (ctx.scratch == nullptr) return InvalidArgument("Attention: context has no scratch arena");
  const int threads = ctx.pool ? ctx.pool->num_threads() : 1;
  const size_t need = AttentionScratchBytes(p, threads, kernel);
  try {
    ctx.scratch->Reserve(need);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("Attention: out of memory reserving " + std::to_string(need) + " bytes of scratch");
  }
  ctx.scratch->Reset();
  if (kernel == AttentionKernel::kDecode) {
    attn::DecodeAttention(p, ctx.pool, *ctx.scratch);
  } else {
    attn::PrefillAttention(p, ctx.pool, *ctx.scratch);
  }
  return Status::Ok();
}

}  // namespace tessera
