// y = x W^T for a weight stored [out, in] row-major in f32, bf16 or f16 (as checkpoints store
// nn.Linear), on the runtime-dispatched SIMD dot (src/ops/simd.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/dtype.h"
#include "tessera/quant.h"
#include "tessera/precision.h"
#include "tessera/thread_pool.h"

namespace tessera::ops {

// The most x elements (tokens x in) one row-dot call at precision bf16 rounds at once, on the
// calling thread's stack (576 KiB reserved, the rows written touched: the 9 tokens of a
// verification step with 8 drafts at up to 16384 features); larger calls are rounded in groups of
// tokens, each group streaming the weights once, so only in <= this is required.
constexpr int64_t kMaxRoundedRowDotFloats = 9 * 16384;

// The most features (in) of a block-quantized weight on the row-dot path: each token's x is
// quantized to int8 blocks on the calling thread's stack once per call (Gemma's widest
// intermediate sizes with room to spare).
constexpr int64_t kMaxQuantRowDotIn = 4 * 16384;

// out[i] = x[i] rounded to bf16 (F32ToBf16), as an f32 value. out may alias x.
void RoundBf16(const float* x, int64_t n, float* out);

struct WeightView {
  const void* data = nullptr;  // [out, in] row-major
  DType dtype = DType::kF32;
  int64_t out = 0, in = 0;
  // Where not kNone, `data` holds GGUF-layout blocks (tessera/quant.h): row r starts at byte
  // r * QuantRowBytes(quant, in), and `dtype` is unused. `pairs` and `panels` are never set then.
  QuantType quant = QuantType::kNone;
  // The same bf16 matrix prepacked for precision bf16's dot-product kernels, or null: pair panels
  // [ceil(out / 16)][ceil(in / 2)][16] words, 64-byte aligned (tessera/gemm.h PackPairPanels). Where
  // set, Linear at precision bf16 with an x_pairs scratch on a CPU with the dot product reads them
  // for every n (no per-call packing; decode streams them too) and never touches `data`, which
  // stays the matrix for every other path.
  const uint32_t* pairs = nullptr;
  // The same matrix widened to f32 panels for precision f32's GEMM micro-tile, or null:
  // [ceil(out / 16)][in][16] floats, 64-byte aligned (tessera/gemm.h PackF32Panels). Where set, Linear
  // at precision f32 reads them for every n (no per-call packing; decode streams them) and never
  // touches `data`.
  const float* panels = nullptr;
};

// x: [n, in] f32 with row stride x_stride; y: [n, out] f32 with row stride y_stride.
// Picks the row-dot path for a few tokens (decode: each weight row is read once, memory-bound) and
// the blocked GEMM (tessera/gemm.h) for more (prefill: compute-bound).
// precision kBf16 needs w.dtype bf16 and in <= kMaxRoundedRowDotFloats (checked), or quantized weights.
// Quantized weights (w.quant): a few tokens take the int8 row-dot path (x quantized per block,
// in <= kMaxQuantRowDotIn, checked; any precision), more the int8 GEMM where the CPU has
// AVX-512 VNNI and x_pairs is given (x as two int8 bytes per value, near f32, at precisions f32
// and bf16; one byte, the row-dot's quantization, at precision int8; docs/quantization.md), else
// the GEMM on dequantized panels (at precision bf16 both x and the dequantized weights rounded to
// bf16, see tessera/gemm.h); without the int8 GEMM, at precision int8 a type whose row-dot kernel
// unpacks blocks once for several tokens (AVX2: Q4_0) stays on the row-dot for any n. Weights that
// are not block-quantized take precision int8 as f32.
// x_pairs: optional scratch for the GEMM at precision bf16 and the quantized int8 GEMM
// (tessera/gemm.h: GemmScratchWords(n, in) words; x rounded into it once per call instead of once
// per block of output columns); needed for w.pairs to be used. At precision f32, w.panels (where
// set) serve every n.
// rows_as_steps: every token's row gets the bits it gets alone (n = 1), at any n: the GEMMs Linear
// switches to from a token count on are skipped (decode batches and speculative verification,
// whose rows must equal one-token steps; tests/linear_batch_invariance_test.cc).
void Linear(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool* pool, MatmulPrecision precision = MatmulPrecision::kF32, uint32_t* x_pairs = nullptr,
            bool rows_as_steps = false);

// One matrix product of a LinearBatch: y [n, w.out] (row stride y_stride) = x [n, w.in] W^T.
struct LinearJob {
  WeightView w;
  const float* x = nullptr;
  int64_t n = 0, x_stride = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
};

// The most jobs one LinearBatch takes (a MoE layer's experts, two matrices each, at top_k <= 32).
inline constexpr int64_t kMaxLinearJobs = 64;

// Each job's y as Linear(job.w, job.x, ..., precision, x_pairs, rows_as_steps) computes it, bit for
// bit, with the jobs that take the quantized row-dot path run as one parallel loop over all their
// rows: many small matrices (a MoE layer's chosen experts in decode) cost one dispatch, not one
// each. The other jobs run as Linear calls of their own, in order; jobs in a row on one x on the
// int8 GEMM quantize it once. The jobs are independent: no job's y may overlap another's x.
// count <= kMaxLinearJobs (checked).
void LinearBatch(const LinearJob* jobs, int64_t count, ThreadPool* pool,
                 MatmulPrecision precision = MatmulPrecision::kF32, uint32_t* x_pairs = nullptr,
                 bool rows_as_steps = false);

// The row-dot path alone: a few row ranges per thread, four weight rows share each token-row load.
void LinearRowDot(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                  ThreadPool* pool, MatmulPrecision precision = MatmulPrecision::kF32);

// The quantized int8 GEMM alone, at any n (Linear runs it from its crossover token count on):
// false, computing nothing, where it does not run (weights not block-quantized, a CPU without
// AVX-512 VNNI). x_pairs: GemmScratchWords(n, w.in) words. Activations in two bytes, or in one at
// precision kInt8, as Linear quantizes them. For the crossover benchmark.
bool LinearQuantGemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                     ThreadPool* pool, uint32_t* x_pairs, MatmulPrecision precision = MatmulPrecision::kF32);

// Plain loops with double accumulation: the reference the tests compare Linear against (at kBf16
// over x rounded by F32ToBf16). Quantized weights are dequantized by DequantizeRow (tessera/quant.h):
// the exact product of the stored weights (the row-dot path's int8 numerics: ops/quant_linear.h);
// at kInt8 they are multiplied by x quantized as precision int8 quantizes it (LinearReferenceInt8).
void LinearReference(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                     MatmulPrecision precision = MatmulPrecision::kF32);

}  // namespace tessera::ops
