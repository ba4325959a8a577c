// Linear at precision bf16 on AMX tiles (ops/bf16_amx.h), the path prepacked pair panels take on
// CPUs with AMX: random shapes (token counts across the 32-row blocks, depths that leave a partial
// 16-pair step and a half pair, widths that leave a partial panel and a lone 16-column panel),
// values over a wide range of magnitudes, against a double reference within the f32 summation
// bound; the padding of the x pairs scratch never read; a token's bits the same alone or in any
// batch, and the same on prepacked panels as on weights packed per call; and the dot-product
// kernels' results beside them (they differ in the last bits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "linear_check.h"
#include "ops/bf16_amx.h"
#include "ops/bf16_dot.h"
#include "tessera/aligned_buffer.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"

namespace tessera {
namespace {

using ops::MatmulPrecision;

// A bf16 weight [out, in] with its pair panels, x [n, in + 3], the x pairs scratch.
struct Problem {
  int64_t n, in, out, xs, ys;
  std::vector<uint16_t> w;
  AlignedBuffer panels;
  std::vector<float> x;
  AlignedBuffer scratch;

  ops::WeightView View() const {
    ops::WeightView v{w.data(), DType::kBF16, out, in};
    v.pairs = panels.as<uint32_t>();
    return v;
  }
  // The scratch filled with NaN pairs first: its row padding must never reach a result.
  uint32_t* XPairs() {
    uint32_t* s = scratch.as<uint32_t>();
    for (int64_t i = 0; i < ops::GemmScratchWords(n, in); ++i) s[i] = 0x7fc07fc0u;
    return s;
  }
};

// Magnitudes: 0 all N(0, 1); 1 each x row and weight row scaled by 2^e (e up to +-20 and +-12);
// 2 as 1 plus one element in 16 scaled by 2^8 (outliers the sums must carry).
Problem MakeProblem(std::mt19937& rng, int64_t n, int64_t in, int64_t out, int magnitudes) {
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-20, 20), ew(-12, 12), pick(0, 15);
  Problem p{n, in, out, in + 3, out + 3, std::vector<uint16_t>(out * in),
            AlignedBuffer(ops::PairPanelWords(out, in) * sizeof(uint32_t)), std::vector<float>(n * (in + 3)),
            AlignedBuffer(ops::GemmScratchWords(n, in) * sizeof(uint32_t))};
  for (int64_t o = 0; o < out; ++o) {
    const float s = magnitudes ? std::ldexp(1.0f, ew(rng)) : 1.0f;
    for (int64_t i = 0; i < in; ++i)
      p.w[o * in + i] = F32ToBf16(nd(rng) * s * (magnitudes == 2 && pick(rng) == 0 ? 256.0f : 1.0f));
  }
  for (int64_t t = 0; t < n; ++t) {
    const float s = magnitudes ? std::ldexp(1.0f, ex(rng)) : 1.0f;
    for (int64_t i = 0; i < p.xs; ++i)
      p.x[t * p.xs + i] = nd(rng) * s * (magnitudes == 2 && pick(rng) == 0 ? 256.0f : 1.0f);
  }
  EXPECT_TRUE(ops::PackPairPanels({p.w.data(), DType::kBF16, out, in}, p.panels.as<uint32_t>()));
  return p;
}

// The double sums of x rounded to bf16 times W, and the bound on any f32 summation of those `in`
// exact products: `in` roundings, each within 2^-24 of the partial sum, so (in + 1) 2^-24 sum |x_i w_i|.
void Reference(const Problem& p, std::vector<double>& ref, std::vector<double>& bound) {
  ref.assign(p.n * p.out, 0.0), bound.assign(p.n * p.out, 0.0);
  for (int64_t t = 0; t < p.n; ++t)
    for (int64_t o = 0; o < p.out; ++o) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < p.in; ++i) {
        const double v = double(Bf16ToF32(F32ToBf16(p.x[t * p.xs + i]))) * Bf16ToF32(p.w[o * p.in + i]);
        s += v, a += std::fabs(v);
      }
      ref[t * p.out + o] = s, bound[t * p.out + o] = (p.in + 1) * std::ldexp(a, -24);
    }
}

::testing::AssertionResult WithinBound(const Problem& p, const std::vector<float>& y, const std::vector<double>& ref,
                                       const std::vector<double>& bound) {
  for (int64_t t = 0; t < p.n; ++t)
    for (int64_t o = 0; o < p.ys; ++o) {
      const float v = y[t * p.ys + o];
      if (o >= p.out && v != testing::kUnwritten)
        return ::testing::AssertionFailure() << "wrote past the row: t=" << t << " o=" << o;
      if (o < p.out && !(std::fabs(v - ref[t * p.out + o]) <= bound[t * p.out + o]))
        return ::testing::AssertionFailure() << "t=" << t << " o=" << o << ": " << v << " vs " << ref[t * p.out + o]
                                             << " (bound " << bound[t * p.out + o] << ")";
    }
  return ::testing::AssertionSuccess();
}

bool HasAmx() { return ops::Bf16Amx() != nullptr; }

TEST(LinearAmx, RandomShapesMatchTheReference) {
  if (!HasAmx()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or TESSERA_AMX=0): Linear at bf16 runs the dot product";
  std::mt19937 rng(31);
  std::uniform_int_distribution<int64_t> tokens(1, 100), depth(1, 2100), width(1, 300);
  ThreadPool pool(2);
  int64_t outputs = 0, differ = 0;
  for (int c = 0; c < 36; ++c) {
    int64_t n = tokens(rng), in = depth(rng), out = width(rng);
    if (in % 32 == 0) ++in;  // depths end in a partial step (odd ones in a half pair)
    if (out % 16 == 0) ++out;
    if (c < 3) n = c == 0 ? 1 : c == 1 ? 32 : 33;  // a decode row, one whole block, one row past it
    Problem p = MakeProblem(rng, n, in, out, c % 3);
    std::vector<double> ref, bound;
    Reference(p, ref, bound);
    ThreadPool* tp = c % 2 ? &pool : nullptr;
    std::vector<float> amx(n * p.ys, testing::kUnwritten), dot(n * p.ys, testing::kUnwritten);
    ops::Linear(p.View(), p.x.data(), n, p.xs, amx.data(), p.ys, tp, MatmulPrecision::kBf16, p.XPairs());
    ops::EnableBf16Amx(false);
    ops::Linear(p.View(), p.x.data(), n, p.xs, dot.data(), p.ys, tp, MatmulPrecision::kBf16, p.XPairs());
    ops::EnableBf16Amx(true);
    ASSERT_TRUE(WithinBound(p, amx, ref, bound)) << "AMX n=" << n << " in=" << in << " out=" << out << " case " << c;
    ASSERT_TRUE(WithinBound(p, dot, ref, bound)) << "dot n=" << n << " in=" << in << " out=" << out << " case " << c;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t o = 0; o < out; ++o) ++outputs, differ += amx[t * p.ys + o] != dot[t * p.ys + o];
  }
  // The two round differently, so some outputs differ: the sweep did run the AMX kernel.
  EXPECT_GT(differ, 0);
  std::printf("AMX vs dot product: %lld of %lld outputs differ in bits\n", static_cast<long long>(differ),
              static_cast<long long>(outputs));
}

// bf16 weights read as stored (no pair panels: --no-repack, the vision towers) take AMX on blocks
// packed per call, from the token count at which Linear leaves the row-dot: same bound, and bits
// that differ from the dot product's (so AMX did run).
TEST(LinearAmx, StoredWeightsMatchTheReference) {
  if (!HasAmx()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or TESSERA_AMX=0): Linear at bf16 runs the dot product";
  std::mt19937 rng(34);
  std::uniform_int_distribution<int64_t> tokens(4, 100), depth(1, 2100), width(1, 300);
  ThreadPool pool(2);
  int64_t differ = 0;
  for (int c = 0; c < 24; ++c) {
    const int64_t n = tokens(rng), in = depth(rng) | 1, out = width(rng);  // odd depths: a half pair
    Problem p = MakeProblem(rng, n, in, out, c % 3);
    ops::WeightView stored = p.View();
    stored.pairs = nullptr;
    std::vector<double> ref, bound;
    Reference(p, ref, bound);
    ThreadPool* tp = c % 2 ? &pool : nullptr;
    std::vector<float> amx(n * p.ys, testing::kUnwritten), dot(n * p.ys, testing::kUnwritten);
    ops::Linear(stored, p.x.data(), n, p.xs, amx.data(), p.ys, tp, MatmulPrecision::kBf16, p.XPairs());
    ops::EnableBf16Amx(false);
    ops::Linear(stored, p.x.data(), n, p.xs, dot.data(), p.ys, tp, MatmulPrecision::kBf16, p.XPairs());
    ops::EnableBf16Amx(true);
    ASSERT_TRUE(WithinBound(p, amx, ref, bound)) << "AMX n=" << n << " in=" << in << " out=" << out << " case " << c;
    ASSERT_TRUE(WithinBound(p, dot, ref, bound)) << "dot n=" << n << " in=" << in << " out=" << out << " case " << c;
    for (int64_t i = 0; i < n * p.ys; ++i) differ += amx[i] != dot[i];
  }
  EXPECT_GT(differ, 0);
}

// Depths past one k block of the kernel (2048 pairs; the uneven last block ends in a partial step
// or a half pair): prepacked panels (the kernel's own blocks) and the same weights read as stored
// (blocks of kKcDot packed per call, summed through y) give the same bits, within the bound. The
// vision towers rely on it: at precision bf16 they now read prepacked panels.
TEST(LinearAmx, DeepPanelsAndStoredWeightsGiveTheSameBits) {
  if (!HasAmx()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or TESSERA_AMX=0): Linear at bf16 runs the dot product";
  std::mt19937 rng(35);
  ThreadPool pool(2);
  for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{40, 4097, 50}, {5, 6001, 33}, {70, 9000, 17}}) {
    Problem p = MakeProblem(rng, n, in, out, 1);
    ops::WeightView stored = p.View();
    stored.pairs = nullptr;
    std::vector<double> ref, bound;
    Reference(p, ref, bound);
    std::vector<float> panels(n * p.ys, testing::kUnwritten), per_call(n * p.ys, testing::kUnwritten);
    ops::Linear(p.View(), p.x.data(), n, p.xs, panels.data(), p.ys, &pool, MatmulPrecision::kBf16, p.XPairs());
    ops::Linear(stored, p.x.data(), n, p.xs, per_call.data(), p.ys, nullptr, MatmulPrecision::kBf16, p.XPairs());
    ASSERT_TRUE(WithinBound(p, panels, ref, bound)) << "n=" << n << " in=" << in << " out=" << out;
    for (int64_t i = 0; i < n * p.ys; ++i) ASSERT_EQ(panels[i], per_call[i]) << "n=" << n << " in=" << in << " at " << i;
  }
}

// A row's chain depends only on `in`: each token gives the same bits alone (decode), at any place
// of a 32-row block, in any batch, with or without threads.
TEST(LinearAmx, TokenAloneOrInABatchIsBitIdentical) {
  if (!HasAmx()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or TESSERA_AMX=0): Linear at bf16 runs the dot product";
  std::mt19937 rng(32);
  ThreadPool pool(2);
  for (auto [in, out] : {std::pair<int64_t, int64_t>{1111, 77}, {64, 40}, {5, 17}}) {
    Problem p = MakeProblem(rng, 100, in, out, 1);
    std::vector<float> all(p.n * p.ys), part(p.n * p.ys);
    ops::Linear(p.View(), p.x.data(), p.n, p.xs, all.data(), p.ys, &pool, MatmulPrecision::kBf16, p.XPairs());
    for (int64_t start : {1, 15, 31, 50, 99}) {
      const int64_t cnt = start == 50 ? 7 : p.n - start;
      Problem q = MakeProblem(rng, cnt, in, out, 0);  // (only its scratch is used)
      ops::Linear(p.View(), p.x.data() + start * p.xs, cnt, p.xs, part.data(), p.ys, start % 2 ? nullptr : &pool,
                  MatmulPrecision::kBf16, q.XPairs());
      for (int64_t t = 0; t < cnt; ++t)
        for (int64_t o = 0; o < out; ++o)
          ASSERT_EQ(part[t * p.ys + o], all[(start + t) * p.ys + o]) << "in " << in << " start " << start << " t " << t;
    }
  }
}

// The kernel on its own: rows and columns of y past the ones asked for are never written, and y's
// stride is honoured (y is overwritten, not added to).
TEST(LinearAmx, KernelWritesOnlyItsBlock) {
  if (!HasAmx()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or TESSERA_AMX=0): Linear at bf16 runs the dot product";
  std::mt19937 rng(33);
  for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{17, 45, 40}, {40, 300, 17}, {3, 3, 33}}) {
    Problem p = MakeProblem(rng, n, in, out, 0);
    uint32_t* xp = p.XPairs();
    const int64_t stride = ops::GemmScratchWords(n, in) / n;
    for (int64_t t = 0; t < n; ++t) ops::Bf16Dot()->pairs_from_f32(p.x.data() + t * p.xs, in, xp + t * stride);
    std::vector<double> ref, bound;
    Reference(p, ref, bound);
    const int64_t rows = n - 1, cols = out - 1;  // one row and one column fewer than there are
    std::vector<float> y(n * p.ys, testing::kUnwritten);
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t o = 0; o < cols; ++o) y[t * p.ys + o] = 1e30f;  // overwritten, not added to
    ops::Bf16Amx()(xp, stride, rows, p.panels.as<uint32_t>(), (in + 1) / 2, cols, y.data(), p.ys, false);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t o = 0; o < p.ys; ++o) {
        const float v = y[t * p.ys + o];
        if (t >= rows || o >= cols) {
          ASSERT_EQ(v, testing::kUnwritten) << "t " << t << " o " << o;
        } else {
          ASSERT_LE(std::fabs(v - ref[t * p.out + o]), bound[t * p.out + o]) << "t " << t << " o " << o;
        }
      }
  }
}

}  // namespace
}  // namespace tessera
