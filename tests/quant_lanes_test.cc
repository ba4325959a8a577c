// The AVX-512 sixteen-row Q4_K kernel (ops/quant_dot_avx512.cc, LanesQ4K16) against the AVX2
// eight-row one (ops/quant_dot_avx2.cc, GroupK45), whose steps it repeats per lane: the same exact
// integer sums (codes times activations per sub-block, times the 6-bit scale; the minimums against
// the sub-block sums) and the same f32 operations in the same order, so each output must be the
// AVX2 kernel's bit for bit. The AVX2 kernel is itself checked against the int8 reference within the
// bound in linear_quant_test.cc; agreement bit for bit also pins down the new kernel's unpacking of
// the packed 6-bit scales and minimums, the sixteen-row transposes and the partial last group.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/quant_act.h"
#include "ops/quant_dot.h"
#include "quant_blocks.h"
#include "tessera/aligned_buffer.h"
#include "tessera/quant.h"

namespace tessera {
namespace {

using testing::MakeQuantProblem;
using testing::QuantProblem;

// out[i * rows + r] for `tokens` tokens through k's dot_rows_tokens, max_tokens at a time
// (dot_rows for one token).
std::vector<float> KernelRows(const ops::QuantDotKernels& k, const QuantProblem& p, int tokens) {
  const QuantType t = p.t;
  const int64_t ab = ops::ActRowBytes(t, p.in), nb = p.in / QuantBlockElems(t), rb = QuantRowBytes(t, p.in);
  AlignedBuffer xq(tokens * ab);
  for (int i = 0; i < tokens; ++i) k.quantize_act(t, p.x.data() + i * p.xs, p.in, xq.as<uint8_t>() + i * ab);
  std::vector<float> y(tokens * p.out);
  if (tokens == 1) {
    k.dot_rows(t, p.w.data(), rb, p.out, xq.as<uint8_t>(), nb, y.data());
    return y;
  }
  for (int i = 0; i < tokens; i += k.max_tokens)
    k.dot_rows_tokens(t, p.w.data(), rb, p.out, xq.as<uint8_t>() + i * ab, ab, std::min(k.max_tokens, tokens - i),
                      nb, y.data() + i * p.out, p.out);
  return y;
}

// Row o's blocks at the extremes: every code 15, every scale and minimum 63, d = dmin = 1.
void MakeRowExtreme(QuantProblem& p, int64_t o) {
  const int64_t nb = p.in / 256;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = p.w.data() + o * QuantRowBytes(p.t, p.in) + b * sizeof(BlockQ4_K);
    std::memset(blk, 0xff, sizeof(BlockQ4_K));
    const uint16_t one[2] = {0x3c00, 0x3c00};
    std::memcpy(blk, one, 4);
  }
}

TEST(QuantLanes, SixteenRowQ4KIsTheAvx2KernelsBits) {
  const ops::QuantDotKernels* avx512 = ops::QuantDotAvx512();
  const ops::QuantDotKernels* avx2 = ops::QuantDotAvx2();
  if (avx512 == nullptr || avx2 == nullptr) GTEST_SKIP() << "needs AVX-512 VNNI and AVX2";
  std::mt19937 rng(41);
  // Rows: one, a partial group, whole groups, whole groups and a partial one; blocks 1 .. 5.
  for (int64_t rows : {1, 7, 16, 32, 37}) {
    for (int64_t nb : {1, 2, 5}) {
      QuantProblem p = MakeQuantProblem(rng, QuantType::kQ4_K, 16, nb * 256, rows);
      MakeRowExtreme(p, rows - 1);
      // Token 3: every activation 127 once quantized, against the extreme row the largest sums.
      for (int64_t i = 0; i < p.in; ++i) p.x[3 * p.xs + i] = 1.0f;
      for (int tokens : {1, 2, 5, 8, 9, 16}) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " nb=" + std::to_string(nb) + " tokens=" + std::to_string(tokens));
        const std::vector<float> a = KernelRows(*avx512, p, tokens), b = KernelRows(*avx2, p, tokens);
        for (size_t j = 0; j < a.size(); ++j) ASSERT_EQ(a[j], b[j]) << "token " << j / rows << " row " << j % rows;
      }
    }
  }
}

}  // namespace
}  // namespace tessera
