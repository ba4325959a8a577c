#include "tessera/linear.h"

#include <algorithm>
#include <vector>

#include "ops/bf16_dot.h"
#include "ops/quant_dot.h"
#include "ops/quant_gemm.h"
#include "ops/quant_linear.h"
#include "ops/row_ranges.h"
#include "ops/simd.h"
#include "tessera/check.h"
#include "tessera/gemm.h"

namespace tessera::ops {
namespace {
// From this many tokens on, packing weight blocks for the GEMM micro-tile pays for itself; below it
// each weight row is streamed once through the row-dot path; the bf16 dot-product GEMM (twice the
// rate) overtakes it sooner (bench/results/kernel_choices.md, "Row-dot or GEMM").
constexpr int64_t kGemmMinTokens = 10;
constexpr int64_t kGemmMinTokensBf16 = 4;
constexpr int64_t kRowDotTokens = 16;  // tokens per call of the several-token row dot
// Quantized weights: below this many tokens the int8 row-dot (the blocks streamed once, the integer
// work redone per token) beats dequantizing them into GEMM panels; the two cross between 8 and 16
// tokens on the Gemma-4 MLP shapes (bench/results/quant_kernels.md). Against the int8 GEMM the row
// dots stay faster for more tokens, but they round activations to one byte where the GEMM keeps
// two, which short prompts' prefill accuracy does not allow (bench/results/quant_prefill.md,
// "Row dots or the int8 GEMM"; for Q4_0/Q8_0 too, though their AVX-512 row-dot is faster through
// 16 tokens: a 16-token prefill through it fails the q8_0 GGUF prefill bound, bench/results/serve.md).
constexpr int64_t kGemmMinTokensQuant = 12;
// The int8 GEMM's activation bytes: one at precision int8 (the row dots' numerics), else two.
QuantActBytes QuantActBytesFor(MatmulPrecision precision) {
  return precision == MatmulPrecision::kInt8 ? QuantActBytes::kOne : QuantActBytes::kTwo;
}

// Linear's choice for block-quantized weights: the int8 row-dot below the GEMM crossover, or for
// rows that must equal one-token steps. At precision int8 (one-byte activations, as the row-dot
// rounds them) on CPUs without the int8 GEMM, a type whose row-dot kernel unpacks each block once
// for several tokens stays on it for every n: its byte products outrun the f32 panels the prefill
// would otherwise dequantize into (on AVX2: bench/results/quant_prefill.md, the "AVX2:" sections;
// Q8_0's only draw level with them, and give each token its decode's bits).
bool TakesQuantRowDot(const WeightView& w, int64_t n, bool rows_as_steps, MatmulPrecision precision) {
  if (w.quant == QuantType::kNone) return false;
  if (rows_as_steps || n < kGemmMinTokensQuant) return true;
  const QuantDotKernels& k = QuantDot();
  return precision == MatmulPrecision::kInt8 && !QuantGemmAvailable(w.quant) && UnpacksOnce(k, w.quant, k.max_tokens);
}

// Prefill of block-quantized weights (past the row dots): the int8 GEMM where the CPU has it (its
// activations quantized as the row-dot's are, in the x_pairs scratch), else dequantized f32 panels
// (bench/results/quant_prefill.md). At precision bf16 on AMX CPUs, AMX tiles on dequantized bf16
// panels instead (Bf16AmxActive).
bool TakesQuantGemm(const WeightView& w, int64_t n, MatmulPrecision precision, const uint32_t* x_pairs) {
  if (w.quant == QuantType::kNone || n < kGemmMinTokensQuant || !x_pairs) return false;
  if (n >= QuantAmxMinTokens() && precision == MatmulPrecision::kBf16 && Bf16AmxActive()) return false;
  return QuantGemmAvailable(w.quant);
}

void RowDotF32(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
               ThreadPool* pool) {
  const size_t es = DTypeSize(w.dtype);
  const SimdKernels& simd = Simd();
  const DType dt = w.dtype;
  // Several tokens (verification steps) on the AVX-512 form where it gives dot_rows4's bits: each
  // weight element widened once for them all, at twice the FMA width (ops/simd.h).
  const DotRows4TokensFn tokens = n > 1 && dt != DType::kF16 ? DotRows4Tokens() : nullptr;
  // Each weight row is read from memory once (bf16/f16 widened in registers) and stays in L1 for
  // the n (< 10 from Linear, < 4 at precision bf16, any as steps) tokens that use it.
  auto run = [&](int64_t o0, int64_t o1) {
    // The range's rows are cut into four quarters walked side by side: four weight rows per pass
    // share each load of a token row, and each quarter is one long sequential stream. (Four
    // adjacent rows per pass are slower: four short streams jump every row and the hardware
    // prefetcher restarts each time; bench/results/kernel_choices.md, "Row-dot quarters".)
    const int64_t quarter = (o1 - o0) / 4;
    const char* base = static_cast<const char*>(w.data);
    for (int64_t j = 0; j < quarter; ++j) {
      const char* wrows = base + (o0 + j) * w.in * es;
      for (int64_t t0 = 0; t0 < n; t0 += kRowDotTokens) {
        const int64_t g = std::min(kRowDotTokens, n - t0);
        float out[kRowDotTokens * 4];  // [token][row of the four]
        if (tokens) {
          tokens(dt, x + t0 * x_stride, x_stride, static_cast<int>(g), wrows, quarter * w.in, w.in, out);
        } else {
          for (int64_t t = 0; t < g; ++t)
            simd.DotRows4(dt, x + (t0 + t) * x_stride, wrows, quarter * w.in, w.in, out + 4 * t);
        }
        for (int64_t t = 0; t < g; ++t)
          for (int u = 0; u < 4; ++u) y[(t0 + t) * y_stride + o0 + u * quarter + j] = out[4 * t + u];
      }
    }
    for (int64_t o = o0 + 4 * quarter; o < o1; ++o) {
      const char* wrow = base + o * w.in * es;
      for (int64_t t = 0; t < n; ++t) y[t * y_stride + o] = simd.Dot(dt, x + t * x_stride, wrow, w.in);
    }
  };
  // A few long contiguous ranges per thread (ops/row_ranges.h): a 262144-row LM head in 16-row
  // items would be 16384 hand-outs per token, and each range is one sequential stream.
  ParallelRowRanges(pool, w.out, w.in * static_cast<int64_t>(es), run);
}

}  // namespace

bool ParseMatmulPrecision(std::string_view name, MatmulPrecision* out) {
  if (name == "f32" || name == "float32") return *out = MatmulPrecision::kF32, true;
  if (name == "bf16" || name == "bfloat16") return *out = MatmulPrecision::kBf16, true;
  if (name == "int8") return *out = MatmulPrecision::kInt8, true;
  return false;
}

// Through the SIMD table's vectorized loops (in the baseline ISA, rounding had been most of a bf16
// prefill's time on CPUs without the bf16 dot product: bench/results/kernel_choices.md, "The wide
// f32 tile in Linear"). A chunk at a time via bf16 bits, so out may alias x.
void RoundBf16(const float* x, int64_t n, float* out) {
  const SimdKernels& simd = Simd();
  constexpr int64_t kChunk = 256;
  alignas(64) uint16_t bits[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    simd.round_bf16(x + i, m, bits);
    simd.widen_bf16(bits, m, out + i);
  }
}

void Linear(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool* pool, MatmulPrecision precision, uint32_t* x_pairs, bool rows_as_steps) {
  if (TakesQuantRowDot(w, n, rows_as_steps, precision))
    return QuantRowDot(w, x, n, x_stride, y, y_stride, pool, x_pairs);
  if (TakesQuantGemm(w, n, precision, x_pairs))
    return QuantGemm(w, x, n, x_stride, y, y_stride, pool, x_pairs, QuantActBytesFor(precision));
  if (w.quant != QuantType::kNone) return Gemm(w, x, n, x_stride, y, y_stride, pool, precision, x_pairs);
  precision = ForFloatWeights(precision);
  // Prepacked panels: one kernel for every n, so decode and prefill give each token the same
  // result. A panel streams at least as well as a row (bench/BENCHMARKS.md): bf16 pair panels
  // 1.1-1.7x the row-dot decode on the Gemma-4 weights, f32 panels level with it (0.95-1.05x).
  if (precision == MatmulPrecision::kBf16 && w.pairs && x_pairs && Bf16Dot())
    return Gemm(w, x, n, x_stride, y, y_stride, pool, precision, x_pairs);
  if (precision == MatmulPrecision::kF32 && w.panels) return Gemm(w, x, n, x_stride, y, y_stride, pool, precision);
  if (!rows_as_steps && n >= (precision == MatmulPrecision::kBf16 ? kGemmMinTokensBf16 : kGemmMinTokens))
    return Gemm(w, x, n, x_stride, y, y_stride, pool, precision, x_pairs);
  LinearRowDot(w, x, n, x_stride, y, y_stride, pool, precision);
}

void LinearBatch(const LinearJob* jobs, int64_t count, ThreadPool* pool, MatmulPrecision precision,
                 uint32_t* x_pairs, bool rows_as_steps) {
  TESSERA_CHECK(count >= 0 && count <= kMaxLinearJobs, "LinearBatch: at most kMaxLinearJobs jobs");
  LinearJob row_dot[kMaxLinearJobs];
  int64_t m = 0;
  for (int64_t j = 0; j < count; ++j)
    if (TakesQuantRowDot(jobs[j].w, jobs[j].n, rows_as_steps, precision)) row_dot[m++] = jobs[j];
  QuantRowDotBatch(row_dot, m, pool, x_pairs);
  // Jobs on one x (q/k/v, gate/up) in a row on the int8 GEMM quantize it once: the scratch keeps it.
  const QuantActBytes bytes = QuantActBytesFor(precision);
  const LinearJob* held = nullptr;  // the job whose x the scratch holds quantized, if any
  for (int64_t j = 0; j < count; ++j) {
    const LinearJob& job = jobs[j];
    if (TakesQuantRowDot(job.w, job.n, rows_as_steps, precision)) continue;
    if (!TakesQuantGemm(job.w, job.n, precision, x_pairs)) {
      Linear(job.w, job.x, job.n, job.x_stride, job.y, job.y_stride, pool, precision, x_pairs, rows_as_steps);
      held = nullptr;
      continue;
    }
    const bool ready = held && held->x == job.x && held->n == job.n && held->x_stride == job.x_stride &&
                       held->w.in == job.w.in && SameQuantizedX(held->w.quant, job.w.quant, bytes);
    QuantGemm(job.w, job.x, job.n, job.x_stride, job.y, job.y_stride, pool, x_pairs, bytes, ready);
    held = &job;
  }
}

void LinearRowDot(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                  ThreadPool* pool, MatmulPrecision precision) {
  if (w.quant != QuantType::kNone) return QuantRowDot(w, x, n, x_stride, y, y_stride, pool);
  if (ForFloatWeights(precision) == MatmulPrecision::kF32) return RowDotF32(w, x, n, x_stride, y, y_stride, pool);
  TESSERA_CHECK(w.dtype == DType::kBF16, "LinearRowDot: precision bf16 needs bf16 weights");
  TESSERA_CHECK(w.in <= kMaxRoundedRowDotFloats, "LinearRowDot: precision bf16 needs in <= kMaxRoundedRowDotFloats");
  // bf16 x bf16 products are exact in f32, so the f32 kernels on the rounded x (bf16 weights
  // widened in registers) compute precision bf16's result; decode streams the weights either way.
  alignas(64) float xr[kMaxRoundedRowDotFloats];  // [group, in] rounded token rows
  const int64_t group = kMaxRoundedRowDotFloats / w.in;
  for (int64_t t0 = 0; t0 < n; t0 += group) {
    const int64_t g = std::min(group, n - t0);
    for (int64_t t = 0; t < g; ++t) RoundBf16(x + (t0 + t) * x_stride, w.in, xr + t * w.in);
    RowDotF32(w, xr, g, w.in, y + t0 * y_stride, y_stride, pool);
  }
}

bool LinearQuantGemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                     ThreadPool* pool, uint32_t* x_pairs, MatmulPrecision precision) {
  if (w.quant == QuantType::kNone || !QuantGemmAvailable(w.quant)) return false;
  QuantGemm(w, x, n, x_stride, y, y_stride, pool, x_pairs, QuantActBytesFor(precision));
  return true;
}

void LinearReference(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                     MatmulPrecision precision) {
  if (precision == MatmulPrecision::kInt8 && w.quant != QuantType::kNone)
    return LinearReferenceInt8(w, x, n, x_stride, y, y_stride);
  std::vector<float> row(w.in);
  const size_t es = DTypeSize(w.dtype);
  for (int64_t o = 0; o < w.out; ++o) {
    if (w.quant != QuantType::kNone) {
      DequantizeRow(w.quant, static_cast<const char*>(w.data) + o * QuantRowBytes(w.quant, w.in), row.data(), w.in);
    } else {
      DecodeToF32(w.dtype, static_cast<const char*>(w.data) + o * w.in * es, row.data(), w.in);
    }
    for (int64_t t = 0; t < n; ++t) {
      double s = 0;
      for (int64_t i = 0; i < w.in; ++i) {
        const float xi = x[t * x_stride + i];
        s += static_cast<double>(row[i]) * (precision == MatmulPrecision::kBf16 ? Bf16ToF32(F32ToBf16(xi)) : xi);
      }
      y[t * y_stride + o] = static_cast<float>(s);
    }
  }
}

}  // namespace tessera::ops
