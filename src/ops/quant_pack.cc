// The prefill GEMM's weight packing for quantized weights: each k block of 16 rows is dequantized
// (whole quant blocks) and transposed into the f32 panels the micro-tile reads, so prefill runs the
// f32 GEMM's tile at its FMA rate and the dequantization is paid once per block per token range.
#include <algorithm>

#include "ops/quant_dot.h"
#include "ops/quant_linear.h"
#include "ops/simd.h"
#include "tessera/check.h"
#include "tessera/dtype.h"
#include "tessera/quant.h"

namespace tessera::ops {

int64_t QuantBlockDepth(QuantType t, int64_t in, int64_t most) {
  const int64_t be = QuantBlockElems(t), blocks = (in + most - 1) / most;
  return ((in + blocks - 1) / blocks + be - 1) / be * be;
}

void PackQuantBlock(const WeightView& w, int64_t o0, int64_t nc, int64_t k0, int64_t kc, float* bp) {
  // Rows dequantized into a [16][kc] buffer, then the f32 panel packer transposes them; kc is at
  // most the f32 GEMM's block depth (1024).
  alignas(64) float rows[16 * 1024];
  TESSERA_CHECK(kc <= 1024, "PackQuantBlock: k blocks are at most 1024 deep");
  const SimdKernels& simd = Simd();
  const QuantDotKernels& dq = QuantDot();
  const int64_t row_bytes = QuantRowBytes(w.quant, w.in), be = QuantBlockElems(w.quant);
  const char* base = static_cast<const char*>(w.data) + k0 / be * QuantBlockBytes(w.quant);
  for (int64_t p = 0; p * 16 < nc; ++p) {
    const int r = static_cast<int>(std::min<int64_t>(16, nc - p * 16));
    for (int j = 0; j < r; ++j) dq.dequantize(w.quant, base + (o0 + p * 16 + j) * row_bytes, rows + j * kc, kc);
    simd.pack_panel16(DType::kF32, rows, kc, r, kc, bp + p * kc * 16);
  }
}

void PackQuantPairs(const Bf16DotKernels& dot, const WeightView& w, int64_t o0, int64_t nc, int64_t k0, int64_t kc,
                    uint32_t* bp) {
  // One row at a time dequantized (L1-resident) and rounded to bf16 by the dot product's vector
  // converter: the same bits as F32ToBf16 for every value a finite block dequantizes to (none is
  // NaN or below 2^-126 in magnitude, where the two would differ), and far cheaper than a scalar loop.
  alignas(64) float row[512];
  alignas(64) uint16_t half[16 * 512];
  TESSERA_CHECK(kc <= 512 && kc % 2 == 0, "PackQuantPairs: k blocks are at most 512 deep and even");
  const QuantDotKernels& dq = QuantDot();
  const int64_t row_bytes = QuantRowBytes(w.quant, w.in), be = QuantBlockElems(w.quant);
  const char* base = static_cast<const char*>(w.data) + k0 / be * QuantBlockBytes(w.quant);
  for (int64_t p = 0; p * 16 < nc; ++p) {
    const int r = static_cast<int>(std::min<int64_t>(16, nc - p * 16));
    for (int j = 0; j < r; ++j) {
      dq.dequantize(w.quant, base + (o0 + p * 16 + j) * row_bytes, row, kc);
      dot.pairs_from_f32(row, kc, reinterpret_cast<uint32_t*>(half + j * kc));
    }
    dot.pack_weight_pairs16(half, kc, r, kc, bp + p * (kc / 2) * 16);
  }
}

}  // namespace tessera::ops
