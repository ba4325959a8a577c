// Grouped-query attention whose mask is structured data (docs/attention.md).
//
// Visible(q, k) = valid(k) AND window(q_pos - k_pos)
//                 AND ((k_pos <= q_pos if causal else true) OR (q_block >= 0 AND q_block == k_block))
//                 AND dense mask allows it.
// With blocks_ignore_window (the mask transformers' Gemma4UnifiedModel.forward builds for its
// sliding layers, reproduced for comparison; no Gemma generation uses it) the block term bypasses
// the window instead:
//   Visible(q, k) = valid(k) AND ((window AND causal-part) OR same block) AND dense.
// A query row with no visible key yields zeros. Scores: s = (q.k) * scale, then softcap
// c*tanh(s/c) if c > 0, then the additive dense bias, then softmax in f32 (a per-head sink logit,
// when given, joins every denominator), then P.V.
// AttentionPrecision::kBf16 rounds q and the softmax weights to bf16 before their products (what a
// bf16 model computes in transformers); products stay exact and sums f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/dtype.h"
#include "tessera/status.h"
#include "tessera/tensor_view.h"
#include "tessera/thread_pool.h"

namespace tessera {

class Arena;

// Largest head_dim (for Q/K and for V) the kernels accept.
inline constexpr int64_t kMaxHeadDim = 512;

// Optional dense mask for interop and as a baseline. Logical shape [B, Hq, S_q, S_kv];
// a stride of 0 broadcasts that dimension. Keys at or beyond kv_valid[b] are never read, so the
// mask may have only kv_valid columns.
struct DenseMask {
  enum class Kind { kNone, kAdditive /* float, -inf = masked */, kBool /* uint8, nonzero = attend */ };
  Kind kind = Kind::kNone;
  const void* data = nullptr;
  int64_t stride_batch = 0, stride_head = 0, stride_q = 0, stride_k = 1;  // in elements

  bool present() const { return kind != Kind::kNone; }
};

// The mask as structured data. All arrays are contiguous and row-major per batch row.
struct MaskSpec {
  const int32_t* q_pos = nullptr;     // [B, S_q]  absolute query positions (required)
  const int32_t* k_pos = nullptr;     // [B, S_kv] absolute key positions, any order (required)
  const int32_t* kv_valid = nullptr;  // [B] key slots [0, kv_valid[b]) hold data; null = all S_kv
  bool causal = true;
  int32_t window_left = -1;   // keys at most this many positions before the query; -1 = unbounded
  int32_t window_right = -1;  // keys at most this many positions after the query; -1 = unbounded
  const int32_t* q_block = nullptr;  // [B, S_q] block id, -1 = in no block; null = no blocks
  const int32_t* k_block = nullptr;  // [B, S_kv] block id, -1 = in no block; null = no blocks
  bool blocks_ignore_window = false;  // same-block pairs are visible even outside the window
  DenseMask dense;
};

// What the products of q.k and P.V are computed from (sums are f32 in both).
//   kF32:  q and the softmax weights as f32: the faithful default.
//   kBf16: q rounded to bf16 (before the scale), and each softmax weight rounded to bf16 before
//          it multiplies V: the operands a bf16 model has in transformers (which rounds the
//          normalized weights; the kernels round the running numerators, the same relative
//          error). K/V must be bf16. On CPUs with AVX-512-BF16 the tiled kernels then use its
//          bf16 dot-product instruction (twice the f32 FMA rate); elsewhere the same rounded
//          values go through the f32 kernels, so every CPU forms the same products (results
//          differ by f32 summation order, and the dot path flushes operands below 2^-126).
enum class AttentionPrecision { kF32, kBf16 };
const char* AttentionPrecisionName(AttentionPrecision p);
// "f32", "bf16"; false for anything else.
bool ParseAttentionPrecision(const std::string& name, AttentionPrecision* out);

// What the softmax is computed in (ONNX Attention's softmax_precision).
//   kF32:  every kernel, the default.
//   kF64:  scores, softmax and P.V accumulated in double: the reference kernel.
//   kF16, kBf16: the softmax input (scores after softcap and bias) and its output (the normalized
//          weights) are rounded to that type, as ONNX casts them around the softmax; the softmax
//          itself runs in double: the reference kernel.
// The tiled kernels implement kF32 only; kAuto picks the reference kernel for the others.
enum class SoftmaxPrecision { kF32, kF64, kF16, kBf16 };
const char* SoftmaxPrecisionName(SoftmaxPrecision p);

struct AttentionParams {
  HeadsView q;  // [B, Hq, S_q, D] f32
  HeadsView k;  // [B, Hkv, S_kv, D] f32 | bf16 | f16
  HeadsView v;  // [B, Hkv, S_kv, Dv] same dtype as k
  OutView out;  // [B, Hq, S_q, Dv] f32
  MaskSpec mask;
  float scale = 1.0f;    // multiplies q.k
  float softcap = 0.0f;  // 0 = off
  AttentionPrecision precision = AttentionPrecision::kF32;
  // [Hq] per-head sink logits (attention sinks; onnxruntime's head_sink and smooth_softmax, whose
  // sink is 0): row weights become exp(s_j) / (exp(sink_h) + sum_k exp(s_k)). null = none; -inf
  // entries are no sink. A row with no visible key still yields zeros.
  const float* sink = nullptr;
  SoftmaxPrecision softmax_precision = SoftmaxPrecision::kF32;
  // Each query row gets the bits a one-query step at its position would get, whatever else the
  // call holds (speculative verification must reproduce plain decoding exactly). For caches a
  // session fills: row i's keys are slots [0, min(kv_valid, q_pos + 1)), what the cache held once
  // its own token was appended, which holds when positions start at 0 with no gaps. No query may
  // be in a block (a one-query step cannot see later block members). Runs the decode kernel.
  bool rows_as_steps = false;
};

enum class AttentionKernel { kAuto, kReference, kPrefill, kDecode };
const char* AttentionKernelName(AttentionKernel k);
// "auto", "reference", "prefill", "decode"; false for anything else.
bool ParseAttentionKernel(const std::string& name, AttentionKernel* out);

// What the caller provides: threads and a scratch arena (grown on first use for a shape, then
// reused, so steady-state calls allocate nothing).
struct AttentionContext {
  ThreadPool* pool = nullptr;  // null = run on the calling thread
  Arena* scratch = nullptr;    // required for the tiled kernels
};

// Checks every shape, dtype, pointer and value the kernels rely on. Messages name the offending
// argument and value.
Status ValidateAttention(const AttentionParams& p);

// The kernel kAuto would pick for these params.
AttentionKernel ChooseAttentionKernel(const AttentionParams& p);

// Bytes of scratch arena Attention() reserves for params of this shape run by `kernel` (kAuto:
// the one ChooseAttentionKernel picks; kReference needs none) with `num_threads` threads. Only
// shapes, dtypes and precision are read, so a planner may pass null data: sessions size their
// arena with it up front instead of growing it mid-run.
size_t AttentionScratchBytes(const AttentionParams& p, int num_threads,
                             AttentionKernel kernel = AttentionKernel::kAuto);

// Validates, then runs the requested kernel (kAuto: dispatch picks one).
Status Attention(const AttentionParams& p, AttentionContext& ctx,
                 AttentionKernel kernel = AttentionKernel::kAuto);

// How the prefill kernel's plan classifies the (query block, key tile) pairs of these params:
// empty tiles are skipped, full tiles run without per-element mask work.
struct TileCensus {
  int64_t empty = 0, full = 0, partial = 0;
};
TileCensus CensusPrefillTiles(const AttentionParams& p);

// Which intermediate AttentionScores writes (ONNX Attention's qk_matmul_output modes,
// onnxruntime GroupQueryAttention's output_qk).
enum class ScoreStage {
  kRaw,            // (q.k) * scale, for every key, visible or not
  kSoftcapped,     // then c*tanh(s/c) when softcap > 0, every key
  kMasked,         // then + the additive dense bias; invisible keys get `masked_value`
  kProbabilities,  // the softmax weights (sink included); invisible keys and rows with no visible key 0
};

// Writes the stage of every (query, key) pair to out [B, Hq, S_q, S_kv] f32, contiguous. The same
// predicate, rounding (precision, softmax_precision) and sink as the kernels; double sums. Costs
// O(B * Hq * S_q * S_kv * D): a debugging output, not a fast path.
Status AttentionScores(const AttentionParams& p, ScoreStage stage, float masked_value, float* out);

// Materializes the mask of `mask` as a dense additive bias out[b][0][i][j]: 0 where visible (plus
// the additive dense bias when present) and `masked_value` elsewhere (-inf, or a dtype minimum for
// runtimes that want finite values). out is [B, 1, S_q, S_kv] f32, contiguous.
Status AttentionBias(const MaskSpec& mask, int64_t batch, int64_t s_q, int64_t s_kv, float masked_value,
                     float* out);

}  // namespace tessera
