// Micro-kernels on AVX-512-BF16's dot-product instruction for attention and Linear at precision
// bf16.
// vdpbf16ps adds, per f32 lane, a[2i] b[2i] + a[2i+1] b[2i+1] over bf16 pairs: the products are
// exact in f32 and it does twice the multiply-adds of an f32 FMA per instruction. Operands are bf16
// pairs packed in 32-bit words (low half first), so a bf16 row of even length is already a row of
// words. Results differ from f32 kernels fed the same bf16 values only in f32 summation order.
#pragma once

#include <cstdint>

#include "ops/prefetch_rows.h"

namespace tessera::ops {

struct Bf16DotKernels {
  // Scores of one 16-row query panel against n <= 64 keys read in place (`ahead`: lines to
  // prefetch meanwhile, or null):
  //   out[t * 16 + r] = sum_{p < pairs} dot2(qp[p * 16 + r], word p of k_rows[t])
  // qp: [pairs][16] words, 64-byte aligned (row r's pair p = (q[r][2p], q[r][2p+1])); k_rows[t]:
  // a bf16 row of 2 * pairs elements. Sums run in chunks of 32 pairs added in order (as the f32
  // score path's 64-term chains).
  void (*score_rows16)(const uint32_t* qp, int64_t pairs, const uint16_t* const* k_rows, int n, float* out,
                       const PrefetchRows* ahead);
  // Transposes score_rows16's key-major scores into rows, scaled: for r < rows <= 16, t < n <= 64,
  //   s[r * s_stride + t] = scale * st[t * 16 + r]
  void (*scores_to_rows)(const float* st, int n, float scale, float* s, int64_t s_stride, int rows);
  // Values (q rows, softmax weights) rounded to bf16 (nearest, ties to even; magnitudes below
  // 2^-126 to a signed zero) as pair words: w[p] = (x[2p], x[2p + 1]), 0 past n.
  void (*pairs_from_f32)(const float* x, int64_t n, uint32_t* w);
  // The online softmax step of one 16-row panel over a tile of n <= 64 keys, key-major (masked
  // keys hold -inf scores and get weight 0; with all_visible, no key is masked and -inf is a
  // non-finite score like NaN and +inf): for rows r < mr <= 16 with scores
  // s[t][r] = scale * st[t * 16 + r] (st 64-byte aligned),
  //   m_new[r] = max(m[r], max_t s[t][r]);  alpha[r] = m_new[r] == m[r] ? 1 : exp(m[r] - m_new[r])
  //   e[t][r] = exp(s[t][r] - m_new[r]) (0 while m_new[r] is -inf);  l[r] = l[r] alpha[r] + sum_t e[t][r]
  // writes m[r] = m_new[r] and l[r] for r < mr, alpha[0..16) (lanes past mr: don't care), and the
  // weights rounded to bf16 as pair words, key-major: w[p * 16 + r] = (e[2p][r], e[2p + 1][r]), 0 past
  // n, for p < ceil(n / 2) (64-byte aligned; lanes past mr: don't care). The caller scales each row's
  // output by alpha[r] (pv_rows16 does, as it adds the tile's P.V). A row with a non-finite score
  // (NaN; with all_visible also +-inf) or a NaN m[r] gets m, l, alpha and weights NaN instead
  // (docs/reliability.md: a visible non-finite score makes the row NaN).
  void (*softmax_panel16)(const float* st, int n, float scale, float* m, float* l, int mr, bool all_visible,
                          float* alpha, uint32_t* w);
  // Pair panels times token rows, up to 8 rows x 128 columns (Linear's GEMM: w = token rows of x
  // as pairs, vp = pack_weight_pairs16's panels): for r < mr, j < nr <= 128,
  //   c[r * cs + j] += sum_{p < pairs} dot2(w[r][p], vp[(j / 16) * vp_stride + p * 16 + j % 16])
  // each sum one chain over p in order, so a row's result does not depend on mr, nr or its place.
  // w: 8 row pointers of `pairs` words (rows >= mr may alias row 0; their results are discarded);
  // vp: ceil(nr / 16) column blocks of panels, vp_stride words apart (pairs * 16 when consecutive;
  // blocks past that are not read).
  // ahead: lines to prefetch meanwhile, or null.
  void (*pv_tile)(const uint32_t* const* w, const uint32_t* vp, int64_t pairs, int64_t vp_stride, float* c,
                  int64_t cs, int mr, int nr, const PrefetchRows* ahead);
  // P.V with V read in place (no packed copy), up to 16 rows x all columns of n <= 64 keys, and the
  // online softmax's rescale of the rows it adds to: for r < mr <= 16, j < cols,
  //   c[r * cs + j] = alpha[r] c[r * cs + j] + sum_{p < ceil(n / 2)} dot2(w[p * 16 + r], (v'[2p][j], v'[2p + 1][j]))
  // (alpha null: 1) with v'[t] = the bf16 row v + t * v_stride where bit t of `keys` is set and
  // t < n, else zeros (a key no row sees is never read: its row may hold anything, even NaN). w:
  // softmax_panel16's key-major weight pairs (lanes >= mr may be read, their results discarded).
  // ahead: lines to prefetch meanwhile, or null.
  void (*pv_rows16)(const uint32_t* w, const uint16_t* v, int64_t v_stride, int n, uint64_t keys, float* c,
                    int64_t cs, int mr, const float* alpha, int64_t cols, const PrefetchRows* ahead);
  // Rows of a [rows, cols] bf16 matrix as pair panels (a weight's: pv_tile's vp for y = x W^T;
  // attention's q rows: score_rows16's panel): for block c < ceil(rows / 16), pair
  // p < pairs = ceil(cols / 2), lane j < 16:
  //   dst[(c * pairs + p) * 16 + j] = (w[16c + j][2p], w[16c + j][2p + 1])
  // with 0 past rows and cols; w[r] = src + r * src_stride. dst 64-byte aligned. (A transpose of
  // 32-bit words: each pair is already one word of a weight row.)
  void (*pack_weight_pairs16)(const uint16_t* src, int64_t src_stride, int64_t rows, int64_t cols, uint32_t* dst);
};

// The kernels, or null where the CPU lacks AVX-512 (F, BW, VL, BF16), TESSERA_SIMD asks for
// generic or avx2, or EnableBf16Dot(false) was called.
const Bf16DotKernels* Bf16Dot();
// For tests and benchmarks: off makes precision bf16 run its rounded operands through the f32
// kernels, the path every other CPU takes. On by default.
void EnableBf16Dot(bool on);

// Compiled with the ISA flags; call only when the CPU has them (Bf16Dot() checks).
const Bf16DotKernels& Bf16DotAvx512();

}  // namespace tessera::ops
