// The f32 GEMM's work items (ops/gemm.cc): a call of few tokens on prepacked f32 panels streams
// them (RunF32Stream); every other f32-tile call runs each x tile across an item's columns
// (RunF32Blocks), on the panels or on blocks packed per call from f32, bf16 or quantized weights,
// items up to 128 columns wide as the thread count allows. None of that may change a bit: each
// token's result here is its own, computed alone on the f32 panels of the weight's exact f32
// values, and every path, thread count and batch must give it; LinearReference bounds that result.
// Registered a second time under TESSERA_SIMD=avx2 (CMakeLists.txt): the 6 x 16 tile's loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "linear_check.h"
#include "ops/bf16_dot.h"
#include "quant_blocks.h"
#include "tessera/aligned_buffer.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"
#include "tessera/quant.h"

namespace tessera {
namespace {

using ops::MatmulPrecision;

// Each token's bits: alone (one-token calls on the f32 panels of w) at precision f32.
std::vector<float> AloneOnPanels(const std::vector<float>& w, int64_t out, int64_t in, const float* x, int64_t n,
                                 int64_t xs, int64_t ys) {
  AlignedBuffer panels(ops::F32PanelFloats(out, in) * sizeof(float));
  ops::PackF32Panels({w.data(), DType::kF32, out, in}, panels.as<float>());
  ops::WeightView v{w.data(), DType::kF32, out, in};
  v.panels = panels.as<float>();
  std::vector<float> y(n * ys, testing::kUnwritten);
  for (int64_t t = 0; t < n; ++t) ops::Linear(v, x + t * xs, 1, xs, y.data() + t * ys, ys, nullptr, MatmulPrecision::kF32);
  return y;
}

::testing::AssertionResult SameBits(const std::vector<float>& got, const std::vector<float>& want, int64_t n,
                                    int64_t ys, int64_t out) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < out; ++o)
      if (std::memcmp(&got[t * ys + o], &want[t * ys + o], sizeof(float)) != 0)
        return ::testing::AssertionFailure() << "token " << t << " column " << o << ": " << got[t * ys + o]
                                             << " vs alone " << want[t * ys + o];
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = out; o < ys; ++o)
      if (got[t * ys + o] != testing::kUnwritten) return ::testing::AssertionFailure() << "wrote past row " << t;
  return ::testing::AssertionSuccess();
}

// Calls above the stream's 128 tokens (and one below) with partial tiles; widths giving items of
// 32 to 128 columns with a partial last panel (300 = 18 x 16 + 12) or a single one; one k block
// and two unequal ones (1100 = 560 + 540).
struct Shape {
  int64_t n, in, out;
};
constexpr Shape kShapes[] = {{301, 1100, 300}, {263, 96, 520}, {40, 700, 77}, {257, 33, 9}};

TEST(GemmItems, F32AndBf16WeightsGiveEachTokenItsBitsAlone) {
  std::mt19937 rng(41);
  ThreadPool pool2(2), pool3(3);
  std::normal_distribution<float> nd;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out));
    const int64_t xs = s.in + 5, ys = s.out + 3;
    std::vector<uint16_t> wb(s.out * s.in);
    std::vector<float> w(s.out * s.in), x(s.n * xs);
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = F32ToBf16(nd(rng)), w[i] = Bf16ToF32(wb[i]);
    for (float& v : x) v = nd(rng);
    const std::vector<float> alone = AloneOnPanels(w, s.out, s.in, x.data(), s.n, xs, ys);
    std::vector<float> ref(s.n * ys);
    ops::LinearReference({w.data(), DType::kF32, s.out, s.in}, x.data(), s.n, xs, ref.data(), ys, MatmulPrecision::kF32);
    ASSERT_TRUE(testing::LinearRowsMatch(alone, ref, s.n, ys, s.out, 8e-5 * std::sqrt(double(s.in))));
    AlignedBuffer panels(ops::F32PanelFloats(s.out, s.in) * sizeof(float));
    ops::PackF32Panels({w.data(), DType::kF32, s.out, s.in}, panels.as<float>());
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      SCOPED_TRACE("threads " + std::to_string(pool ? pool->num_threads() : 1));
      std::vector<float> y(s.n * ys, testing::kUnwritten);
      ops::WeightView on_panels{w.data(), DType::kF32, s.out, s.in};
      on_panels.panels = panels.as<float>();
      ops::Linear(on_panels, x.data(), s.n, xs, y.data(), ys, pool, MatmulPrecision::kF32);
      EXPECT_TRUE(SameBits(y, alone, s.n, ys, s.out)) << "f32 panels";
      for (DType dt : {DType::kF32, DType::kBF16}) {
        std::fill(y.begin(), y.end(), testing::kUnwritten);
        const void* data = dt == DType::kF32 ? static_cast<const void*>(w.data()) : wb.data();
        ops::Gemm({data, dt, s.out, s.in}, x.data(), s.n, xs, y.data(), ys, pool, MatmulPrecision::kF32);
        EXPECT_TRUE(SameBits(y, alone, s.n, ys, s.out)) << DTypeName(dt) << " packed per call";
      }
    }
  }
}

// Precision bf16 on the f32 tiles (no dot product): x rounded to bf16 once per tile and k block,
// then the f32 tiles: the bits of precision f32 on x rounded beforehand, token by token.
TEST(GemmItems, Bf16PrecisionWithoutTheDotIsF32OnRoundedX) {
  std::mt19937 rng(42);
  ThreadPool pool(2);
  std::normal_distribution<float> nd;
  ops::EnableBf16Dot(false);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out));
    const int64_t xs = s.in + 5, ys = s.out + 3;
    std::vector<uint16_t> wb(s.out * s.in);
    std::vector<float> w(s.out * s.in), x(s.n * xs), xr(s.n * xs);
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = F32ToBf16(nd(rng)), w[i] = Bf16ToF32(wb[i]);
    for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng), xr[i] = Bf16ToF32(F32ToBf16(x[i]));
    const std::vector<float> alone = AloneOnPanels(w, s.out, s.in, xr.data(), s.n, xs, ys);
    AlignedBuffer x_pairs(ops::GemmScratchWords(s.n, s.in) * sizeof(uint32_t));
    for (uint32_t* scratch : {static_cast<uint32_t*>(nullptr), x_pairs.as<uint32_t>()}) {
      std::vector<float> y(s.n * ys, testing::kUnwritten);
      ops::Gemm({wb.data(), DType::kBF16, s.out, s.in}, x.data(), s.n, xs, y.data(), ys, &pool, MatmulPrecision::kBf16,
                scratch);
      EXPECT_TRUE(SameBits(y, alone, s.n, ys, s.out)) << (scratch ? "x rounded once per call" : "x rounded per tile");
    }
  }
  ops::EnableBf16Dot(true);
}

// Quantized weights at precision f32 packed per call (dequantized per block, at most 64 columns
// at a time) into items up to 128 columns wide: the bits of the dequantized f32 matrix, per token.
// `in` of whole 1024-deep blocks, where the quantized and the f32 k blocks are the same.
TEST(GemmItems, QuantizedWeightsGiveTheirDequantizedBits) {
  std::mt19937 rng(43);
  ThreadPool pool2(2), pool3(3);
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ8_0, QuantType::kQ6_K}) {
    for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{270, 2048, 300}, {33, 1024, 200}}) {
      SCOPED_TRACE(std::string(QuantTypeName(t)) + " n=" + std::to_string(n) + " out=" + std::to_string(out));
      const testing::QuantProblem p = testing::MakeQuantProblem(rng, t, n, in, out);
      std::vector<float> w(out * in);
      for (int64_t o = 0; o < out; ++o) DequantizeRow(t, p.Row(o), w.data() + o * in, in);
      const std::vector<float> alone = AloneOnPanels(w, out, in, p.x.data(), n, p.xs, p.ys);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
        std::vector<float> y(n * p.ys, testing::kUnwritten);
        ops::Gemm(p.View(), p.x.data(), n, p.xs, y.data(), p.ys, pool, MatmulPrecision::kF32);
        EXPECT_TRUE(SameBits(y, alone, n, p.ys, out)) << "threads " << (pool ? pool->num_threads() : 1);
      }
    }
  }
}

}  // namespace
}  // namespace tessera
