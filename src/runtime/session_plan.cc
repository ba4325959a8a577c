#include "runtime/session_plan.h"

#include <algorithm>
#include <string>

#include "platform/memory_info.h"
#include "tessera/attention.h"

namespace tessera::runtime {
namespace {

Status ValidateOptions(const model::GemmaModel& model, const SessionOptions& o) {
  if (o.max_batch < 1 || o.max_chunk < 1 || o.max_context < 1 || o.max_chunk > o.max_context)
    return InvalidArgument("Session: need max_batch >= 1 and 1 <= max_chunk <= max_context (got " +
                           std::to_string(o.max_batch) + ", " + std::to_string(o.max_chunk) + ", " +
                           std::to_string(o.max_context) + ")");
  // Bounds that keep every size product below int64 overflow; real sessions are far inside them.
  if (o.max_batch > (int64_t{1} << 16) || o.max_context > (int64_t{1} << 30))
    return InvalidArgument("Session: max_batch " + std::to_string(o.max_batch) + " or max_context " +
                           std::to_string(o.max_context) + " is beyond the supported range (2^16 rows, 2^30 tokens)");
  if (o.verify_tokens < 0 || o.verify_tokens > o.max_chunk)
    return InvalidArgument("Session: verify_tokens " + std::to_string(o.verify_tokens) + " outside [0, max_chunk " +
                           std::to_string(o.max_chunk) + "]");
  if (o.attention_precision == AttentionPrecision::kBf16 && o.kv_dtype != DType::kBF16)
    return InvalidArgument(std::string("Session: attention precision bf16 needs a bf16 KV cache, got kv_dtype ") +
                           DTypeName(o.kv_dtype));
  return CheckMatmulPrecision(model, o.matmul_precision);
}

// Scratch of the largest prefill and decode step of every layer, over the planned store sizes.
size_t ScratchBytes(const model::GemmaArch& a, const SessionOptions& o, const kv::KvMemoryPlan& kv, int threads) {
  size_t need = 0;
  for (int64_t l = 0; l < a.num_layers(); ++l) {
    const model::LayerArch& la = a.layers[l];
    const int64_t slots = kv.layers[kv.layers[l].owner].slots;
    AttentionParams p;
    p.q = {nullptr, DType::kF32, o.max_batch, a.q_heads, o.max_chunk, la.head_dim, 0, 0, 0};
    p.k = {nullptr, o.kv_dtype, o.max_batch, la.kv_heads, slots, la.head_dim, 0, 0, 0};
    p.v = p.k;
    p.precision = o.attention_precision;
    need = std::max(need, AttentionScratchBytes(p, threads, AttentionKernel::kPrefill));
    p.q.seq = std::max<int64_t>(1, o.verify_tokens);  // a verification step decodes every row
    need = std::max(need, AttentionScratchBytes(p, threads, AttentionKernel::kDecode));
  }
  return need;
}

}  // namespace

std::string SessionMemoryPlan::Describe() const {
  std::string s = FormatBytes(total()) + " (KV cache " + FormatBytes(kv_bytes);
  if (baseline_bytes) s += ", bias-mode caches and mask " + FormatBytes(baseline_bytes);
  return s + ", activations " + FormatBytes(activation_bytes) + ", attention scratch " + FormatBytes(scratch_bytes) +
         ", staging " + FormatBytes(staging_bytes) + ")";
}

StatusOr<SessionMemoryPlan> PlanSession(const model::GemmaModel& model, const SessionOptions& o, int threads) {
  TESSERA_RETURN_IF_ERROR(ValidateOptions(model, o));
  const model::GemmaArch& a = model.arch();
  StatusOr<kv::KvMemoryPlan> kv = kv::KvCache::Plan(KvCacheConfigFor(a, o));
  if (!kv.ok()) return kv.status();
  SessionMemoryPlan plan;
  plan.kv_bytes = kv.value().total_bytes;
  const int64_t n = o.max_batch * o.max_chunk;
  plan.activation_bytes = model::Activations::PlannedBytes(a, n, o.all_logits ? n : std::max(o.max_batch, o.verify_tokens));
  plan.scratch_bytes = ScratchBytes(a, o, kv.value(), std::max(1, threads));
  plan.staging_bytes = static_cast<size_t>(n) * (4 * sizeof(int32_t) + 1 + sizeof(float) * a.hidden) +
                       static_cast<size_t>(o.max_batch) * (sizeof(int64_t) + sizeof(int32_t));
  if (o.mode != Mode::kUnified) {
    // The concat caches hold every owning layer's K/V at full context, twice during an append
    // (old and new), and each step's dense mask is [B, S, S_kv] floats.
    size_t dense_kv = 0;
    const size_t es = DTypeSize(o.kv_dtype);
    for (size_t l = 0; l < a.layers.size(); ++l)
      if (kv.value().layers[l].store != kv::StoreKind::kShared)
        dense_kv += static_cast<size_t>(o.max_batch) * a.layers[l].kv_heads * o.max_context * a.layers[l].head_dim * 2 * es;
    plan.baseline_bytes = 2 * dense_kv + static_cast<size_t>(n) * o.max_context * sizeof(float);
  }
  return plan;
}

Status CheckSessionFits(const SessionMemoryPlan& plan, const SessionOptions& o) {
  const MemoryBudget budget = AvailableMemory();
  if (plan.total() <= budget.bytes) return Status::Ok();
  return ResourceExhausted("Session: max_batch " + std::to_string(o.max_batch) + ", max_context " +
                           std::to_string(o.max_context) + ", max_chunk " + std::to_string(o.max_chunk) + ", kv_dtype " +
                           DTypeName(o.kv_dtype) + ", mode " + ModeName(o.mode) + " needs " + plan.Describe() +
                           "; this process can use " + FormatBytes(budget.bytes) + " more (" + budget.source +
                           "). Lower max_context or max_batch, or use a bf16 KV cache");
}

}  // namespace tessera::runtime
