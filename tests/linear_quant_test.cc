// Linear on block-quantized weights (ops::WeightView::quant): every GGUF type, both matmul
// precisions, the int8 row-dot path (n <= 3) on every quantized dot kernel this CPU runs (AVX-512
// VNNI, AVX2, generic) and the GEMM on dequantized panels (n >= 4), each against the plain
// references within the bounds derived below, each token's result the same whatever n, and
// non-finite activations giving NaN. Weights are random blocks written directly (random codes,
// random f16 scales in a sane range), which covers every bit pattern a file can hold.
//
// The bounds (u = 2^-24, the f32 unit roundoff):
// - Row-dot against LinearReferenceInt8 (the same int8 activations, exact block products): every
//   kernel forms exact integer sums per block (and per 32-bit lane), converts them exactly
//   (|sum| < 2^24) and scales them in f32 (one rounding for the scale, one for the product), then
//   adds the nb blocks' terms in f32 (per lane chains plus a lane reduction, at most nb + 8 adds).
//   The terms' magnitudes add up to at most S = sum_i M_i |x^_i| where x^ = d q is the quantized
//   activation and M_i bounds the magnitude of the integer decomposition the kernels use for
//   weight i: |w_i| plus the format's offset counted twice (it is taken off through the activation
//   sums): Q4_0 16|d|, Q5_0 32|d|, Q6_K 64|d sc|, Q4_K/Q5_K 2 * 63 |dmin| (the minimum's part),
//   Q4_1/Q5_1 2|m| (the minimum's part), Q8_0 nothing. So |y - ref| <= (nb + 10) u S + u |ref| (the reference's rounding to f32 and the
//   dequantized K-quant weights' rounding are the last terms).
// - Row-dot against LinearReference (exact dequantized product in double): the above plus the
//   activation quantization's error, |x_i - x^_i| <= amax_b / 254 (per activation block b, amax
//   computed here from x), times |w_i|, plus an ulp of amax for the division's rounding.
// - GEMM against LinearReference: the f32 micro-tile is one FMA chain per output over in, on the
//   same dequantized weights (DequantizeRow), so |y - ref| <= (in + 2) u sum_i |w_i x_i| + u |ref|.
//   At precision bf16 on CPUs with the bf16 dot product the GEMM rounds the dequantized weights to
//   bf16 too (8 significant bits: |w - bf16(w)| <= 2^-8 |w|) and sums exact products in f32 chains,
//   so the bound gains 2^-8 sum_i |w_i x_i| (x as the reference rounds it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "linear_check.h"
#include "ops/bf16_dot.h"
#include "ops/quant_act.h"
#include "ops/quant_dot.h"
#include "ops/quant_gemm.h"
#include "ops/quant_linear.h"
#include "quant_blocks.h"
#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"
#include "tessera/quant.h"

namespace tessera {
namespace {

using ops::MatmulPrecision;
using testing::kUnwritten;
using testing::LinearRowsMatch;

using testing::MakeQuantProblem;
using testing::Magnitudes;
using testing::QuantProblem;
using testing::RandomBlocks;

constexpr QuantType kTypes[] = {QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ8_0, QuantType::kQ4_K,
                                QuantType::kQ5_K, QuantType::kQ6_K, QuantType::kQ4_1, QuantType::kQ5_1};
constexpr double kU = 1.0 / (1 << 24);

// x rounded to bf16 at precision bf16, as the references see it.
float XAt(const QuantProblem& p, int64_t t, int64_t i, MatmulPrecision prec) {
  const float v = p.x[t * p.xs + i];
  return prec == MatmulPrecision::kBf16 ? Bf16ToF32(F32ToBf16(v)) : v;
}

// Per-output tolerances of the row-dot path (header comment): against LinearReferenceInt8 (int8)
// and against LinearReference (exact), given both references.
void RowDotTolerances(const QuantProblem& p, const std::vector<float>& ref_int8, const std::vector<float>& ref,
                      std::vector<double>* tol_int8, std::vector<double>* tol_exact) {
  const int64_t be = ops::ActBlockElems(p.t), nb = p.in / QuantBlockElems(p.t);
  tol_int8->assign(p.n * p.ys, 0), tol_exact->assign(p.n * p.ys, 0);
  for (int64_t o = 0; o < p.out; ++o) {
    const std::vector<double> m = Magnitudes(p.t, p.Row(o), p.in);
    std::vector<float> w(p.in);
    DequantizeRow(p.t, p.Row(o), w.data(), p.in);
    for (int64_t t = 0; t < p.n; ++t) {
      double s = 0, qerr = 0;
      for (int64_t b = 0; b < p.in / be; ++b) {
        double amax = 0, wsum = 0;
        for (int64_t i = b * be; i < (b + 1) * be; ++i) amax = std::max(amax, std::fabs(double(p.x[t * p.xs + i])));
        for (int64_t i = b * be; i < (b + 1) * be; ++i) {
          s += m[i] * (std::fabs(double(p.x[t * p.xs + i])) + amax / 254), wsum += std::fabs(w[i]);
        }
        qerr += wsum * (amax / 254) * (1 + 1e-6);
      }
      const size_t k = t * p.ys + o;
      (*tol_int8)[k] = (nb + 10) * kU * s + kU * std::fabs(ref_int8[k]);
      (*tol_exact)[k] = (*tol_int8)[k] + qerr + kU * std::fabs(ref[k]);
    }
  }
}

// Both row-dot references of a problem and the bounds against each (RowDotTolerances).
struct RowDotRefs {
  std::vector<float> ref_int8, ref;
  std::vector<double> tol_int8, tol_exact;
};

RowDotRefs MakeRowDotRefs(const QuantProblem& p) {
  RowDotRefs r{std::vector<float>(p.n * p.ys), std::vector<float>(p.n * p.ys), {}, {}};
  ops::LinearReferenceInt8(p.View(), p.x.data(), p.n, p.xs, r.ref_int8.data(), p.ys);
  ops::LinearReference(p.View(), p.x.data(), p.n, p.xs, r.ref.data(), p.ys);
  RowDotTolerances(p, r.ref_int8, r.ref, &r.tol_int8, &r.tol_exact);
  return r;
}

double GemmTolerance(const QuantProblem& p, MatmulPrecision prec, bool bf16_weights, const std::vector<float>& ref,
                     int64_t t, int64_t o) {
  std::vector<float> w(p.in);
  DequantizeRow(p.t, p.Row(o), w.data(), p.in);
  double s = 0;
  for (int64_t i = 0; i < p.in; ++i) s += std::fabs(double(w[i]) * XAt(p, t, i, prec));
  return ((p.in + 2) * kU + (bf16_weights ? 1.0 / 256 * (1 + 1e-6) : 0.0)) * s + kU * std::fabs(ref[t * p.ys + o]);
}

enum class Path { kLinear, kRowDot, kGemm, kGemmScratch };  // kGemmScratch: with x_pairs

std::vector<float> RunLinear(const QuantProblem& p, int64_t n, ThreadPool* pool, MatmulPrecision prec, Path path,
                             int64_t t0 = 0) {
  std::vector<float> y(n * p.ys, kUnwritten);
  const float* x = p.x.data() + t0 * p.xs;
  if (path == Path::kRowDot) {
    ops::LinearRowDot(p.View(), x, n, p.xs, y.data(), p.ys, pool, prec);
  } else if (path == Path::kGemm) {
    ops::Gemm(p.View(), x, n, p.xs, y.data(), p.ys, pool, prec);
  } else if (path == Path::kGemmScratch) {
    AlignedBuffer x_pairs(ops::GemmScratchWords(n, p.in) * sizeof(uint32_t));
    ops::Gemm(p.View(), x, n, p.xs, y.data(), p.ys, pool, prec, x_pairs.as<uint32_t>());
  } else {
    ops::Linear(p.View(), x, n, p.xs, y.data(), p.ys, pool, prec);
  }
  return y;
}

::testing::AssertionResult WithinTolerances(const std::vector<float>& y, const std::vector<float>& ref,
                                            const std::vector<double>& tol, const QuantProblem& p) {
  for (int64_t t = 0; t < p.n; ++t)
    for (int64_t o = 0; o < p.ys; ++o) {
      const size_t k = t * p.ys + o;
      if (o >= p.out && y[k] != kUnwritten) return ::testing::AssertionFailure() << "wrote past the row at t=" << t;
      if (o < p.out && !(std::fabs(double(y[k]) - ref[k]) <= tol[k]))
        return ::testing::AssertionFailure() << "t=" << t << " o=" << o << ": " << y[k] << " vs " << ref[k]
                                             << " (tolerance " << tol[k] << ")";
    }
  return ::testing::AssertionSuccess();
}

// y (p.n tokens) within the row-dot's bounds against both references.
::testing::AssertionResult WithinRowDotBounds(const std::vector<float>& y, const RowDotRefs& r, const QuantProblem& p) {
  ::testing::AssertionResult int8 = WithinTolerances(y, r.ref_int8, r.tol_int8, p);
  if (!int8) return int8 << " (against LinearReferenceInt8)";
  ::testing::AssertionResult exact = WithinTolerances(y, r.ref, r.tol_exact, p);
  if (!exact) return exact << " (against LinearReference)";
  return ::testing::AssertionSuccess();
}

TEST(LinearQuant, ActivationQuantizationIsPerBlockNearest) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (QuantType t : {QuantType::kQ8_0, QuantType::kQ6_K}) {
    const int64_t be = ops::ActBlockElems(t), in = 4 * be;
    std::vector<float> x(in);
    for (float& v : x) v = nd(rng) * (rng() % 4 == 0 ? 100.0f : 1.0f);
    std::fill(x.begin(), x.begin() + be, 0.0f);  // an all-zero block: d = 0, q = 0
    std::vector<unsigned char> xq(ops::ActRowBytes(t, in));
    ops::QuantizeActivations(t, x.data(), in, xq.data());
    for (int64_t b = 0; b < in / be; ++b) {
      float d;
      const int8_t* q;
      int64_t sum = 0;
      std::vector<int64_t> sums;
      if (be == 32) {
        const auto& blk = reinterpret_cast<const ops::ActBlock32*>(xq.data())[b];
        d = blk.d, q = blk.q, sums = {blk.sum};
      } else {
        const auto& blk = reinterpret_cast<const ops::ActBlock256*>(xq.data())[b];
        d = blk.d, q = blk.q, sums.assign(blk.bsums, blk.bsums + 16);
      }
      double amax = 0;
      for (int64_t i = 0; i < be; ++i) amax = std::max(amax, std::fabs(double(x[b * be + i])));
      EXPECT_NEAR(d, amax / 127, amax / 127 * 1e-6);
      const int64_t group = be == 32 ? 32 : 16;
      for (int64_t i = 0; i < be; ++i) {
        EXPECT_LE(std::abs(int(q[i])), 127);
        EXPECT_LE(std::fabs(double(x[b * be + i]) - double(d) * q[i]), d / 2 * (1 + 1e-5) + 1e-30) << i;
        sum += q[i];
        if ((i + 1) % group == 0) {
          EXPECT_EQ(sum, sums[i / group]);
          sum = 0;
        }
      }
    }
  }
}

// Every kernel table's activation quantization and dequantization give the portable code's bytes
// and values exactly (the GEMM's panels then hold DequantizeRow's values, and the row-dot path's
// activations are LinearReferenceInt8's).
TEST(LinearQuant, KernelConversionsMatchPortableCodeExactly) {
  const ops::QuantDotKernels* kernels[4];
  const int n_kernels = ops::AvailableQuantDot(kernels, 4);
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  for (QuantType t : kTypes) {
    const int64_t in = 6 * QuantBlockElems(t);
    const std::vector<uint8_t> w = RandomBlocks(rng, t, 1, in);
    std::vector<float> ref(in), got(in);
    DequantizeRow(t, w.data(), ref.data(), in);
    std::vector<float> x(in);
    for (float& v : x) v = nd(rng) * (rng() % 5 == 0 ? 1e3f : 1.0f);
    std::fill(x.begin(), x.begin() + 32, 0.0f);
    x[in - 3] = std::numeric_limits<float>::infinity();
    std::vector<unsigned char> xq_ref(ops::ActRowBytes(t, in)), xq(xq_ref.size());
    ops::QuantizeActivations(t, x.data(), in, xq_ref.data());
    for (int k = 0; k < n_kernels; ++k) {
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " " + kernels[k]->name);
      kernels[k]->dequantize(t, w.data(), got.data(), in);
      for (int64_t i = 0; i < in; ++i) ASSERT_EQ(std::memcmp(&got[i], &ref[i], 4), 0) << i << ": " << got[i] << " vs " << ref[i];
      std::fill(xq.begin(), xq.end(), 0xAB);
      kernels[k]->quantize_act(t, x.data(), in, xq.data());
      // Bytes compared block by block: the last block's NaN scale compares by bits too.
      EXPECT_EQ(std::memcmp(xq.data(), xq_ref.data(), xq.size()), 0);
    }
  }
}

// The bf16 pair panels of a quantized k block (the AMX and dot-product GEMMs' weights at precision
// bf16) are the reference dequantization rounded by F32ToBf16 and laid out pair by pair, bit for
// bit, zero past the block's rows: random blocks of every type, random row and depth ranges.
TEST(LinearQuant, PairPanelsAreTheDequantizedBlocksRoundedToBf16) {
  const ops::Bf16DotKernels* dot = ops::Bf16Dot();
  if (dot == nullptr) GTEST_SKIP() << "no AVX-512-BF16 on this CPU: no pair panels";
  std::mt19937 rng(33);
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t), in = (t == QuantType::kQ4_0 || t == QuantType::kQ8_0 ? 40 : 4) * be;
    const int64_t out = 150;
    const std::vector<uint8_t> blocks = RandomBlocks(rng, t, out, in);
    std::vector<float> w(out * in);
    for (int64_t o = 0; o < out; ++o) DequantizeRow(t, blocks.data() + o * QuantRowBytes(t, in), w.data() + o * in, in);
    ops::WeightView view{blocks.data(), DType::kF32, out, in};
    view.quant = t;
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t nc = 1 + static_cast<int64_t>(rng() % 128), o0 = static_cast<int64_t>(rng() % (out - nc + 1));
      const int64_t kc = be * (1 + static_cast<int64_t>(rng() % std::min<int64_t>(512 / be, in / be)));
      const int64_t k0 = be * static_cast<int64_t>(rng() % (in / be - kc / be + 1));
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " rows " + std::to_string(o0) + "+" + std::to_string(nc) +
                   " depth " + std::to_string(k0) + "+" + std::to_string(kc));
      const int64_t panels = (nc + 15) / 16, words = panels * (kc / 2) * 16;
      std::vector<uint32_t> got(words, 0xDEADBEEFu), want(words);
      ops::PackQuantPairs(*dot, view, o0, nc, k0, kc, got.data());
      for (int64_t p = 0; p < panels; ++p)
        for (int64_t q = 0; q < kc / 2; ++q)
          for (int64_t j = 0; j < 16; ++j) {
            const int64_t r = p * 16 + j;
            const float* row = w.data() + (o0 + r) * in + k0 + 2 * q;
            want[(p * (kc / 2) + q) * 16 + j] =
                r < nc ? uint32_t{F32ToBf16(row[0])} | uint32_t{F32ToBf16(row[1])} << 16 : 0u;
          }
      ASSERT_EQ(got, want);
    }
  }
}

// Every dot kernel this CPU runs, the row-dot path (n = 1..3), both precisions, 1 and 2 threads.
TEST(LinearQuant, RowDotMatchesReferencesOnEveryKernel) {
  const ops::QuantDotKernels* kernels[4];
  const int n_kernels = ops::AvailableQuantDot(kernels, 4);
  ASSERT_GE(n_kernels, 1);
  EXPECT_STREQ(kernels[n_kernels - 1]->name, "generic");
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t);
    for (int64_t blocks : {1, 2, 3, 7, 12, 16, 37}) {
      for (int64_t out : {1, 5, 17, 40}) {
        const int64_t n = 1 + (rng() % 3), in = blocks * be;
        SCOPED_TRACE(std::string(QuantTypeName(t)) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
                     " n=" + std::to_string(n));
        const QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
        const RowDotRefs refs = MakeRowDotRefs(p);
        for (int k = 0; k < n_kernels; ++k) {
          SCOPED_TRACE(kernels[k]->name);
          ops::SetQuantDotForTesting(kernels[k]);
          for (MatmulPrecision prec : {MatmulPrecision::kF32, MatmulPrecision::kBf16})
            for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
              const std::vector<float> y = RunLinear(p, n, tp, prec, Path::kLinear);
              EXPECT_EQ(y, RunLinear(p, n, tp, prec, Path::kRowDot));  // a few tokens: Linear's row-dot
              EXPECT_TRUE(WithinRowDotBounds(y, refs, p));
              // Each token alone gives its result in the batch, bit for bit.
              for (int64_t i = 0; i < n; ++i) {
                const std::vector<float> one = RunLinear(p, 1, tp, prec, Path::kRowDot, i);
                for (int64_t o = 0; o < out; ++o) ASSERT_EQ(one[o], y[i * p.ys + o]) << "token " << i << " o=" << o;
              }
            }
        }
        ops::SetQuantDotForTesting(nullptr);
      }
    }
  }
}

// Runs f(kernels) with each quantized-dot table this CPU has set for testing, then the default again
// (also after a failed ASSERT inside f, which returns from f alone).
template <typename F>
void OnEveryKernel(F&& f) {
  const ops::QuantDotKernels* kernels[4];
  const int n_kernels = ops::AvailableQuantDot(kernels, 4);
  for (int k = 0; k < n_kernels; ++k) {
    SCOPED_TRACE(kernels[k]->name);
    ops::SetQuantDotForTesting(kernels[k]);
    f(*kernels[k]);
  }
  ops::SetQuantDotForTesting(nullptr);
}

// With the kernel table set for testing: the row dot of p's n tokens within its bounds, and each
// token's row equal to that token decoded alone, bit for bit.
void ExpectBatchIsDecodeAlone(const QuantProblem& p, int64_t n, const RowDotRefs& refs, ThreadPool* pool) {
  const std::vector<float> y = RunLinear(p, n, pool, MatmulPrecision::kF32, Path::kRowDot);
  EXPECT_TRUE(WithinRowDotBounds(y, refs, p));
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> one = RunLinear(p, 1, nullptr, MatmulPrecision::kF32, Path::kRowDot, i);
    for (int64_t o = 0; o < p.out; ++o) ASSERT_EQ(one[o], y[i * p.ys + o]) << "token " << i << " o=" << o;
  }
}

// The row-dot for every small batch n = 1..17 (tokens go to the kernels max_tokens at a time,
// the last group partial): each kernel matches the references, and each token alone gives its
// result in the batch bit for bit.
TEST(LinearQuant, RowDotEverySmallBatchMatchesDecode) {
  std::mt19937 rng(12);
  ThreadPool pool(2);
  for (QuantType t : kTypes) {
    // Block counts that reach every loop of the kernels and an odd last block: 32-value formats 37
    // (16-block groups, 4 and 2 blocks, 1), 256-value formats 5 (pairs, 1).
    const int64_t in = (QuantBlockElems(t) == 32 ? 37 : 5) * QuantBlockElems(t), out = 21;
    for (int64_t n = 1; n <= 17; ++n) {
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " n=" + std::to_string(n));
      const QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
      const RowDotRefs refs = MakeRowDotRefs(p);
      OnEveryKernel([&](const ops::QuantDotKernels& k) {
        ExpectBatchIsDecodeAlone(p, n, refs, &pool);
        if (k.dot_rows_tokens == nullptr || n > k.max_tokens) return;
        // The multi-token kernel is each token's dot_rows, bit for bit.
        const int64_t ab = ops::ActRowBytes(t, in), nb = in / QuantBlockElems(t);
        AlignedBuffer xq(n * ab);
        for (int64_t i = 0; i < n; ++i) k.quantize_act(t, p.x.data() + i * p.xs, in, xq.as<uint8_t>() + i * ab);
        std::vector<float> multi(n * out), single(out);
        k.dot_rows_tokens(t, p.w.data(), QuantRowBytes(t, in), out, xq.as<uint8_t>(), ab, static_cast<int>(n), nb,
                          multi.data(), out);
        for (int64_t i = 0; i < n; ++i) {
          k.dot_rows(t, p.w.data(), QuantRowBytes(t, in), out, xq.as<uint8_t>() + i * ab, nb, single.data());
          for (int64_t o = 0; o < out; ++o) ASSERT_EQ(single[o], multi[i * out + o]) << "token " << i << " o=" << o;
        }
      });
    }
  }
}

// Decode-sized calls over many rows, where the row dots walk chunks: QuantRowDot's calls of more
// tokens than one kernel call takes (AVX2 9, 10; AVX-512 17: 256 KiB chunks of an item). Across
// every chunk edge each token's row is its decode alone, bit for bit, and within the row-dot's bounds.
TEST(LinearQuant, RowDotAcrossChunksMatchesDecode) {
  std::mt19937 rng(22);
  ThreadPool pool(2);
  for (QuantType t : kTypes) {
    const int64_t in = 5 * 256, out = 2 * 256 * 1024 / QuantRowBytes(t, in) + 37;  // two chunks and a part
    for (int64_t n : {5, 8, 9, 10, 17}) {
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " n=" + std::to_string(n));
      const QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
      const RowDotRefs refs = MakeRowDotRefs(p);
      OnEveryKernel([&](const ops::QuantDotKernels&) { ExpectBatchIsDecodeAlone(p, n, refs, &pool); });
    }
  }
}

// A serving batch of up to 11 streams: Linear keeps Q4_0 and Q8_0 on the AVX-512 row-dot (one pass
// for up to 16 tokens), so each token's result equals its decode alone, bit for bit, and is within the
// row-dot's bounds; from 12 tokens on it is the int8 GEMM's (two-byte activations: prefill accuracy).
TEST(LinearQuant, LinearKeepsElevenTokensOnTheRowDot) {
  if (ops::QuantDotAvx512() == nullptr) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(21);
  ThreadPool pool(2);
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ8_0}) {
    for (int64_t n : {9, 11, 12, 16}) {
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " n=" + std::to_string(n));
      const QuantProblem p = MakeQuantProblem(rng, t, n, 37 * 32, 35);
      const RowDotRefs refs = MakeRowDotRefs(p);
      std::vector<float> y(n * p.ys, kUnwritten);
      AlignedBuffer x_pairs(ops::GemmScratchWords(n, p.in) * sizeof(uint32_t));
      ops::Linear(p.View(), p.x.data(), n, p.xs, y.data(), p.ys, &pool, MatmulPrecision::kF32, x_pairs.as<uint32_t>());
      bool all_equal = true;
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> one = RunLinear(p, 1, nullptr, MatmulPrecision::kF32, Path::kRowDot, i);
        for (int64_t o = 0; o < p.out; ++o) all_equal = all_equal && one[o] == y[i * p.ys + o];
      }
      if (n < 12) {
        EXPECT_TRUE(all_equal);
        EXPECT_TRUE(WithinRowDotBounds(y, refs, p));
      } else {
        EXPECT_FALSE(all_equal);  // the int8 GEMM: a different summation order
      }
    }
  }
}

// The GEMM on dequantized panels (n = 4..64; Linear sends it 12 tokens or more), both precisions
// (precision bf16 with and without the bf16 dot product's pair panels), 1 and 2 threads; a token's
// result is the same in every batch. AMX off: with the x pairs scratch the GEMM would take the AMX
// tiles (AmxGemmMatchesReference below), and here both calls must run the same kernels.
TEST(LinearQuant, GemmMatchesReference) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  ops::EnableBf16Amx(false);
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t);
    for (int64_t blocks : {1, 3, be == 32 ? 40 : 5}) {
      for (int64_t out : {3, 33, 70}) {
        const int64_t n = 4 + rng() % 61, in = blocks * be;
        SCOPED_TRACE(std::string(QuantTypeName(t)) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
                     " n=" + std::to_string(n));
        const QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
        for (int variant = 0; variant < 3; ++variant) {  // f32; bf16 with the dot product (if any); bf16 without
          const MatmulPrecision prec = variant == 0 ? MatmulPrecision::kF32 : MatmulPrecision::kBf16;
          ops::EnableBf16Dot(variant != 2);
          const bool bf16_weights = variant == 1 && ops::Bf16Dot() != nullptr;
          SCOPED_TRACE("variant " + std::to_string(variant));
          std::vector<float> ref(n * p.ys);
          ops::LinearReference(p.View(), p.x.data(), n, p.xs, ref.data(), p.ys, prec);
          std::vector<double> tol(n * p.ys);
          for (int64_t i = 0; i < n; ++i)
            for (int64_t o = 0; o < out; ++o) tol[i * p.ys + o] = GemmTolerance(p, prec, bf16_weights, ref, i, o);
          for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
            const std::vector<float> y = RunLinear(p, n, tp, prec, Path::kGemm);
            EXPECT_TRUE(WithinTolerances(y, ref, tol, p));
            if (n >= 32) {
              EXPECT_EQ(y, RunLinear(p, n, tp, prec, Path::kLinear));  // many tokens: Linear's GEMM
            }
            EXPECT_EQ(y, RunLinear(p, n, tp, prec, Path::kGemmScratch));  // x rounded once: the same bits
            // The last four tokens as their own batch: the same bits.
            const std::vector<float> tail = RunLinear(p, 4, tp, prec, Path::kGemm, n - 4);
            for (int64_t i = 0; i < 4; ++i)
              for (int64_t o = 0; o < out; ++o)
                ASSERT_EQ(tail[i * p.ys + o], y[(n - 4 + i) * p.ys + o]) << "token " << n - 4 + i << " o=" << o;
          }
        }
        ops::EnableBf16Dot(true);
      }
    }
  }
  ops::EnableBf16Amx(true);
}

// Linear at precision bf16 with the x pairs scratch, as the model calls it, on AMX CPUs (n >=
// QuantAmxMinTokens()): each block of weights dequantized into bf16 pair panels and multiplied on AMX tiles,
// x rounded to bf16. Against LinearReference at precision bf16 (x rounded as the kernel rounds
// it, exact products of the f32-dequantized weights in double) within GemmTolerance's bf16-weight
// bound: bf16 x bf16 products are exact in f32 and each output is one f32 sum over `in`. Random
// shapes with tails (n not a multiple of the 32-row block, out of the 16-column panels, `in` past
// the 512-deep weight blocks); the same bits on 1 or 2 threads and for any run of tokens taken as
// its own batch on the same path; precision f32 keeps the int8 GEMM (exact weights).
TEST(LinearQuant, AmxGemmMatchesReference) {
  if (!ops::Bf16AmxActive()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or TESSERA_AMX=0): the int8 GEMM runs instead";
  std::mt19937 rng(15);
  ThreadPool pool(2);
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t);
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t blocks = be == 32 ? 1 + rng() % 48 : 1 + rng() % 6, in = blocks * be;
      const int64_t out = 1 + rng() % 150, n = ops::QuantAmxMinTokens() + rng() % 60;
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
                   " n=" + std::to_string(n));
      const QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
      std::vector<float> ref(n * p.ys);
      ops::LinearReference(p.View(), p.x.data(), n, p.xs, ref.data(), p.ys, MatmulPrecision::kBf16);
      std::vector<double> tol(n * p.ys);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t o = 0; o < out; ++o) tol[i * p.ys + o] = GemmTolerance(p, MatmulPrecision::kBf16, true, ref, i, o);
      auto run = [&](int64_t t0, int64_t cnt, ThreadPool* tp, MatmulPrecision prec) {
        std::vector<float> y(cnt * p.ys, kUnwritten);
        AlignedBuffer x_pairs(ops::GemmScratchWords(cnt, p.in) * sizeof(uint32_t));
        if (cnt >= ops::QuantAmxMinTokens()) {
          ops::Linear(p.View(), p.x.data() + t0 * p.xs, cnt, p.xs, y.data(), p.ys, tp, prec, x_pairs.as<uint32_t>());
        } else {  // Linear sends fewer tokens to the row-dot path: the GEMM itself, as Linear runs it
          ops::Gemm(p.View(), p.x.data() + t0 * p.xs, cnt, p.xs, y.data(), p.ys, tp, prec, x_pairs.as<uint32_t>());
        }
        return y;
      };
      const std::vector<float> y = run(0, n, &pool, MatmulPrecision::kBf16);
      EXPECT_TRUE(WithinTolerances(y, ref, tol, p));
      EXPECT_EQ(y, run(0, n, nullptr, MatmulPrecision::kBf16));
      if (ops::QuantGemmAvailable(t)) {  // precision f32: the int8 GEMM, as without AMX
        AlignedBuffer scratch(ops::GemmScratchWords(n, p.in) * sizeof(uint32_t));
        std::vector<float> int8(n * p.ys, kUnwritten);
        ops::QuantGemm(p.View(), p.x.data(), n, p.xs, int8.data(), p.ys, &pool, scratch.as<uint32_t>());
        EXPECT_EQ(int8, run(0, n, &pool, MatmulPrecision::kF32));
      }
      const int64_t t0 = rng() % n, cnt = 1 + rng() % (n - t0);
      const std::vector<float> part = run(t0, cnt, trial % 2 ? &pool : nullptr, MatmulPrecision::kBf16);
      for (int64_t i = 0; i < cnt; ++i)
        for (int64_t o = 0; o < out; ++o)
          ASSERT_EQ(part[i * p.ys + o], y[(t0 + i) * p.ys + o]) << "token " << t0 + i << " of " << cnt << " from " << t0;
    }
  }
}

// From QuantAmxMinTokens() tokens Linear at precision bf16 runs the AMX GEMM, below it the int8
// GEMM; with AMX switched off (as TESSERA_AMX=0 does) the int8 GEMM again, whose bits differ from
// the AMX path's (two-byte int8 activations and exact weights vs bf16).
TEST(LinearQuant, AmxSwitchRestoresTheInt8Gemm) {
  if (!ops::Bf16AmxActive()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or TESSERA_AMX=0)";
  std::mt19937 rng(16);
  const QuantProblem p = MakeQuantProblem(rng, QuantType::kQ8_0, ops::QuantAmxMinTokens(), 256, 40);
  std::vector<float> below((p.n - 1) * p.ys, kUnwritten), int8((p.n - 1) * p.ys, kUnwritten);
  AlignedBuffer scratch(ops::GemmScratchWords(p.n, p.in) * sizeof(uint32_t));
  ops::Linear(p.View(), p.x.data(), p.n - 1, p.xs, below.data(), p.ys, nullptr, MatmulPrecision::kBf16,
              scratch.as<uint32_t>());
  if (ops::QuantGemmAvailable(p.t)) {  // one token fewer: the int8 GEMM
    ops::QuantGemm(p.View(), p.x.data(), p.n - 1, p.xs, int8.data(), p.ys, nullptr, scratch.as<uint32_t>());
    EXPECT_EQ(below, int8);
  }
  AlignedBuffer x_pairs(ops::GemmScratchWords(p.n, p.in) * sizeof(uint32_t));
  std::vector<float> amx(p.n * p.ys, kUnwritten), off(p.n * p.ys, kUnwritten), gemm(p.n * p.ys, kUnwritten);
  ops::Linear(p.View(), p.x.data(), p.n, p.xs, amx.data(), p.ys, nullptr, MatmulPrecision::kBf16, x_pairs.as<uint32_t>());
  ops::Gemm(p.View(), p.x.data(), p.n, p.xs, gemm.data(), p.ys, nullptr, MatmulPrecision::kBf16, x_pairs.as<uint32_t>());
  EXPECT_EQ(amx, gemm);  // Linear's prefill is the AMX GEMM
  ops::EnableBf16Amx(false);
  EXPECT_FALSE(ops::Bf16AmxActive());
  ops::Linear(p.View(), p.x.data(), p.n, p.xs, off.data(), p.ys, nullptr, MatmulPrecision::kBf16, x_pairs.as<uint32_t>());
  ops::EnableBf16Amx(true);
  EXPECT_NE(amx, off);
}

// Precision int8 on a CPU without the int8 GEMM: a type whose kernel unpacks blocks once for several
// tokens (AVX2: every type) runs on the row-dot for any number of tokens, so each
// token's result is its one-token decode's, bit for bit, and within the row-dot's bounds; other
// types, and kernels without such a path, still take the dequantized panels (the GEMM's bits).
TEST(LinearQuant, Int8PrefillWithoutTheInt8GemmKeepsTheEightRowTypesOnTheRowDot) {
  if (ops::QuantGemmAvailable(QuantType::kQ4_0)) GTEST_SKIP() << "this CPU has the int8 GEMM: prefill runs it";
  const ops::QuantDotKernels* kernels[4];
  const int n_kernels = ops::AvailableQuantDot(kernels, 4);
  std::mt19937 rng(14);
  ThreadPool pool(2);
  for (QuantType t : kTypes) {
    for (int64_t n : {12, 17, 40}) {
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " n=" + std::to_string(n));
      const QuantProblem p = MakeQuantProblem(rng, t, n, QuantBlockElems(t) == 32 ? 37 * 32 : 5 * 256, 21);
      const RowDotRefs refs = MakeRowDotRefs(p);
      for (int k = 0; k < n_kernels; ++k) {
        SCOPED_TRACE(kernels[k]->name);
        const bool once = ops::UnpacksOnce(*kernels[k], t, kernels[k]->max_tokens);
        const std::string name = kernels[k]->name;
        if (name == "avx2" || name == "generic") {
          EXPECT_EQ(once, name == "avx2");
        }
        ops::SetQuantDotForTesting(kernels[k]);
        const std::vector<float> y = RunLinear(p, n, &pool, MatmulPrecision::kInt8, Path::kLinear);
        if (!once) {
          EXPECT_EQ(y, RunLinear(p, n, &pool, MatmulPrecision::kInt8, Path::kGemm));
          continue;
        }
        EXPECT_TRUE(WithinRowDotBounds(y, refs, p));
        for (int64_t i = 0; i < n; ++i) {
          const std::vector<float> one = RunLinear(p, 1, nullptr, MatmulPrecision::kInt8, Path::kRowDot, i);
          for (int64_t o = 0; o < p.out; ++o) ASSERT_EQ(one[o], y[i * p.ys + o]) << "token " << i << " o=" << o;
        }
      }
      ops::SetQuantDotForTesting(nullptr);
    }
  }
}

// Prefill on the row dots with Linear's scratch: every token quantized into it at once and the
// weights walked once per block of tokens (ops/quant_rowdot.cc). Each token gets what it gets
// alone, bit for bit, and what the stack's few-token groups give, across several token blocks,
// a partial block and a last call of fewer than max_tokens tokens; at the widest input too.
TEST(LinearQuant, RowDotTokenBlocksEqualDecode) {
  const ops::QuantDotKernels* kernels[4];
  const int n_kernels = ops::AvailableQuantDot(kernels, 4);
  std::mt19937 rng(15);
  ThreadPool pool(2);
  int ran = 0;
  struct Case {
    int64_t n, in, out;
  };
  for (QuantType t : kTypes)
    for (const Case c : {Case{150, 37 * 32 * 8, 37}, Case{70, ops::kMaxQuantRowDotIn, 21}}) {
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " n=" + std::to_string(c.n) + " in=" + std::to_string(c.in));
      const QuantProblem p = MakeQuantProblem(rng, t, c.n, c.in, c.out);
      const RowDotRefs refs = MakeRowDotRefs(p);
      AlignedBuffer scratch(ops::GemmScratchWords(c.n, c.in) * sizeof(uint32_t));
      for (int k = 0; k < n_kernels; ++k) {
        if (!ops::UnpacksOnce(*kernels[k], t, kernels[k]->max_tokens)) continue;
        SCOPED_TRACE(kernels[k]->name);
        ops::SetQuantDotForTesting(kernels[k]);
        std::vector<float> blocks(c.n * p.ys, kUnwritten), groups(c.n * p.ys, kUnwritten);
        ops::QuantRowDot(p.View(), p.x.data(), c.n, p.xs, blocks.data(), p.ys, &pool, scratch.as<uint32_t>());
        ops::QuantRowDot(p.View(), p.x.data(), c.n, p.xs, groups.data(), p.ys, &pool);
        EXPECT_TRUE(WithinRowDotBounds(blocks, refs, p));
        EXPECT_EQ(blocks, groups);
        for (int64_t i = 0; i < c.n; ++i) {
          const std::vector<float> one = RunLinear(p, 1, nullptr, MatmulPrecision::kInt8, Path::kRowDot, i);
          for (int64_t o = 0; o < p.out; ++o) ASSERT_EQ(one[o], blocks[i * p.ys + o]) << "token " << i << " o=" << o;
        }
        ++ran;
      }
      ops::SetQuantDotForTesting(nullptr);
    }
  if (ran == 0) GTEST_SKIP() << "no kernel on this CPU unpacks blocks once for several tokens";
}

// The largest integer sums a block can give: every code at its maximum (or zero) against
// activations all at +127, all at -127, or +127 on each block's first half and -127 on its
// second (the two halves' sums at opposite extremes), on every kernel, one and several tokens and a
// partial row group. The AVX2 eight-row Q4_0, Q4_1 and Q4_K kernels sum eight byte-pair products in 16
// bits, exact only while |sum| < 2^15: here it reaches 8 * 2 * 15 * 127 = 30480, and a kernel that
// wrapped or saturated would miss the int8 reference by thousands of scale units; the Q5_0, Q5_1 and
// Q5_K ones sum four, up to 4 * 2 * 31 * 127 = 31496, the Q6_K one two, up to 2 * 2 * 63 * 127 = 32004,
// the Q8_0 one none: its pair sums alone reach 2 * 128 * 127 = 32512 (every code -128 here).
// (Q4_K/Q5_K: every scale and minimum 63 in the rows of maximal codes, d = dmin = 1; Q4_1/Q5_1:
// d = m = 1; Q6_K: every scale -128 or 127 by row, d = 1.)
TEST(LinearQuant, RowDotExactAtTheLargestBlockSums) {
  const ops::QuantDotKernels* kernels[4];
  const int n_kernels = ops::AvailableQuantDot(kernels, 4);
  std::mt19937 rng(13);
  for (QuantType t : kTypes) {
    const int64_t in = 3 * QuantBlockElems(t), out = 11, n = 3, bb = QuantBlockBytes(t);
    QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t b = 0; b < 3; ++b) {
        uint8_t* blk = p.w.data() + o * QuantRowBytes(t, in) + b * bb;
        // Codes all maximal in magnitude (Q8_0: all -128), or all zero.
        std::memset(blk, o % 4 == 3 ? 0x00 : t == QuantType::kQ8_0 ? 0x80 : 0xff, bb);
        const uint16_t one[2] = {0x3c00, 0x3c00};         // f16 1.0: d (and the K-quants' dmin, Q4_1/Q5_1's m)
        if (t == QuantType::kQ6_K) {
          std::memset(blk + offsetof(BlockQ6_K, scales), o % 2 ? 0x80 : 0x7f, 16);
          std::memcpy(blk + offsetof(BlockQ6_K, d), one, 2);
        } else {
          const bool two = t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ4_1 || t == QuantType::kQ5_1;
          std::memcpy(blk, one, two ? 4 : 2);
        }
      }
    const int64_t half = QuantBlockElems(t) / 2;
    for (int64_t i = 0; i < in; ++i)
      p.x[i] = 1.0f, p.x[p.xs + i] = -1.0f, p.x[2 * p.xs + i] = i % (2 * half) < half ? 1.0f : -1.0f;
    const RowDotRefs refs = MakeRowDotRefs(p);
    for (int k = 0; k < n_kernels; ++k) {
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " " + kernels[k]->name);
      ops::SetQuantDotForTesting(kernels[k]);
      for (int64_t tokens : {int64_t{1}, n}) {
        QuantProblem q = p;
        q.n = tokens;
        const std::vector<float> y = RunLinear(q, tokens, nullptr, MatmulPrecision::kF32, Path::kRowDot);
        EXPECT_TRUE(WithinRowDotBounds(y, refs, q));
      }
    }
    ops::SetQuantDotForTesting(nullptr);
  }
}

// A NaN or infinite activation makes every output of its token NaN on the row-dot path (never a
// finite guess), on every kernel; the other tokens are unaffected.
TEST(LinearQuant, NonFiniteActivationsGiveNaN) {
  const ops::QuantDotKernels* kernels[4];
  const int n_kernels = ops::AvailableQuantDot(kernels, 4);
  std::mt19937 rng(8);
  for (QuantType t : kTypes) {
    QuantProblem p = MakeQuantProblem(rng, t, 2, 2 * QuantBlockElems(t), 9);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      p.x[p.xs + 5] = bad;
      for (int k = 0; k < n_kernels; ++k) {
        ops::SetQuantDotForTesting(kernels[k]);
        const std::vector<float> y = RunLinear(p, 2, nullptr, MatmulPrecision::kF32, Path::kRowDot);
        for (int64_t o = 0; o < p.out; ++o) {
          EXPECT_TRUE(std::isfinite(y[o])) << QuantTypeName(t) << " " << kernels[k]->name;
          EXPECT_TRUE(std::isnan(y[p.ys + o])) << QuantTypeName(t) << " " << kernels[k]->name;
        }
      }
      ops::SetQuantDotForTesting(nullptr);
    }
  }
}

// LinearBatch: every job's output (and nothing past it in y's rows) the bits Linear gives that job
// alone, for jobs of every quantized type and plain f32 / bf16 ones, token counts on both sides of
// the GEMM crossover, with and without rows_as_steps and a pool.
TEST(LinearBatch, EachJobAsLinearAlone) {
  std::mt19937 rng(23);
  ThreadPool pool(2);
  const int64_t ns[] = {1, 2, 3, 5, 8, 13};
  const int64_t outs[] = {16, 40, 100, 257};
  AlignedBuffer x_pairs(ops::GemmScratchWords(13, 512) * sizeof(uint32_t));
  for (bool steps : {false, true})
    for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<QuantProblem> probs;
      std::vector<std::vector<float>> plain;  // unquantized weights' storage (f32 or bf16)
      std::vector<ops::LinearJob> jobs;
      std::vector<std::vector<float>> ys;
      for (int j = 0; j < 14; ++j) {
        const int64_t n = ns[rng() % 6], out = outs[rng() % 4], in = 256 * (1 + rng() % 2);
        probs.push_back(MakeQuantProblem(rng, kTypes[j % std::size(kTypes)], n, in, out));
        ops::WeightView w = probs.back().View();
        if (j >= 12) {  // the last two unquantized: Linear calls of their own inside the batch
          std::vector<float> f(out * in);
          for (float& v : f) v = std::normal_distribution<float>(0.0f, 0.1f)(rng);
          const DType dt = j == 12 ? DType::kF32 : DType::kBF16;
          plain.emplace_back(out * in);  // room for either dtype
          EncodeFromF32(dt, f.data(), plain.back().data(), out * in);
          w = ops::WeightView{plain.back().data(), dt, out, in};
        }
        ys.emplace_back(n * probs.back().ys, kUnwritten);
        jobs.push_back({w, probs.back().x.data(), n, probs.back().xs, ys.back().data(), probs.back().ys});
      }
      ops::LinearBatch(jobs.data(), int64_t(jobs.size()), tp, MatmulPrecision::kF32, x_pairs.as<uint32_t>(), steps);
      for (size_t j = 0; j < jobs.size(); ++j) {
        const ops::LinearJob& job = jobs[j];
        std::vector<float> alone(ys[j].size(), kUnwritten);
        ops::Linear(job.w, job.x, job.n, job.x_stride, alone.data(), job.y_stride, tp, MatmulPrecision::kF32,
                    x_pairs.as<uint32_t>(), steps);
        ASSERT_EQ(std::memcmp(alone.data(), ys[j].data(), alone.size() * sizeof(float)), 0)
            << "job " << j << " n " << job.n << " out " << job.w.out << (steps ? " rows_as_steps" : "")
            << (tp ? " pool" : "");
      }
    }
}

// Jobs on one x in a row, as q/k/v and gate/up are, take the int8 GEMM quantizing x once where
// their types quantize it alike (SameQuantizedX): each job still gets the bits Linear gives it
// alone, at both activation widths, for every order of types that do and do not share the rows
// (Q4_0 / Q8_0 / Q4_K: 32-value sub-blocks, but 32- and 256-value activation blocks at one byte;
// Q6_K: 16-value sub-blocks).
TEST(LinearBatch, JobsOnOneXQuantizeItOnce) {
  if (!ops::QuantGemmAvailable(QuantType::kQ4_0)) GTEST_SKIP() << "no int8 GEMM on this CPU";
  std::mt19937 rng(31);
  ThreadPool pool(2);
  const int64_t n = 20, in = 512;
  const QuantType order[] = {QuantType::kQ4_0, QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ4_K,
                             QuantType::kQ6_K, QuantType::kQ6_K, QuantType::kQ4_0};
  AlignedBuffer x_pairs(ops::GemmScratchWords(n, in) * sizeof(uint32_t));
  for (MatmulPrecision prec : {MatmulPrecision::kF32, MatmulPrecision::kInt8}) {
    std::vector<QuantProblem> probs;
    std::vector<ops::LinearJob> jobs;
    std::vector<std::vector<float>> ys;
    for (QuantType t : order) {
      probs.push_back(MakeQuantProblem(rng, t, n, in, 40));
      ys.emplace_back(n * probs.back().ys, kUnwritten);
    }
    for (size_t j = 0; j < probs.size(); ++j)  // every job on the first problem's x
      jobs.push_back({probs[j].View(), probs[0].x.data(), n, probs[0].xs, ys[j].data(), probs[j].ys});
    ops::LinearBatch(jobs.data(), int64_t(jobs.size()), &pool, prec, x_pairs.as<uint32_t>());
    for (size_t j = 0; j < jobs.size(); ++j) {
      const ops::LinearJob& job = jobs[j];
      std::vector<float> alone(ys[j].size(), kUnwritten);
      AlignedBuffer own(ops::GemmScratchWords(n, in) * sizeof(uint32_t));
      ops::Linear(job.w, job.x, n, job.x_stride, alone.data(), job.y_stride, &pool, prec, own.as<uint32_t>());
      ASSERT_EQ(std::memcmp(alone.data(), ys[j].data(), alone.size() * sizeof(float)), 0)
          << "job " << j << " " << QuantTypeName(job.w.quant) << (prec == MatmulPrecision::kInt8 ? " int8" : " f32");
    }
  }
}

// A job of more tokens than the row dot's stack buffer holds at its width (4 at 65536 features)
// leaves the batch's loop and runs alone on the scratch; the others stay in the loop. Each still
// the bits Linear gives it alone.
TEST(LinearBatch, WideJobOfManyTokensRunsAloneOnTheScratch) {
  std::mt19937 rng(29);
  ThreadPool pool(2);
  const int64_t wide = ops::kMaxQuantRowDotIn;
  AlignedBuffer x_pairs(ops::GemmScratchWords(5, wide) * sizeof(uint32_t));
  std::vector<QuantProblem> probs = {MakeQuantProblem(rng, QuantType::kQ4_0, 5, wide, 40),
                                     MakeQuantProblem(rng, QuantType::kQ8_0, 2, 512, 100),
                                     MakeQuantProblem(rng, QuantType::kQ4_K, 5, wide, 16)};
  std::vector<std::vector<float>> ys;
  std::vector<ops::LinearJob> jobs;
  for (const QuantProblem& p : probs) {
    ys.emplace_back(p.n * p.ys, kUnwritten);
    jobs.push_back({p.View(), p.x.data(), p.n, p.xs, ys.back().data(), p.ys});
  }
  ops::LinearBatch(jobs.data(), int64_t(jobs.size()), &pool, MatmulPrecision::kF32, x_pairs.as<uint32_t>(), true);
  for (size_t j = 0; j < jobs.size(); ++j) {
    std::vector<float> alone(ys[j].size(), kUnwritten);
    ops::Linear(jobs[j].w, jobs[j].x, jobs[j].n, jobs[j].x_stride, alone.data(), jobs[j].y_stride, &pool,
                MatmulPrecision::kF32, x_pairs.as<uint32_t>(), true);
    ASSERT_EQ(std::memcmp(alone.data(), ys[j].data(), alone.size() * sizeof(float)), 0) << "job " << j;
  }
}

}  // namespace
}  // namespace tessera
