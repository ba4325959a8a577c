// Linear at MatmulPrecision::kBf16: every path (the GEMM on AVX-512-BF16's dot product where the CPU
// has it, the f32 GEMM on rounded x, the decode row-dot) against LinearReference at bf16 (x rounded
// by F32ToBf16, double sums); the weight pair packing against its layout; the rounding helper
// against F32ToBf16 bit for bit; and the session's check that the weights are bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "linear_check.h"
#include "ops/bf16_dot.h"
#include "runtime/session.h"
#include "tessera/aligned_buffer.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"
#include "tiny_model.h"

namespace tessera {
namespace {

using ops::MatmulPrecision;

struct Problem {
  int64_t n, in, out, xs, ys;
  std::vector<uint16_t> w;  // [out, in] bf16
  std::vector<float> x;     // [n, xs]
};

Problem MakeProblem(std::mt19937& rng, int64_t n, int64_t in, int64_t out) {
  std::normal_distribution<float> nd;
  Problem p{n, in, out, in + 5, out + 3, std::vector<uint16_t>(out * in), std::vector<float>(n * (in + 5))};
  for (uint16_t& v : p.w) v = F32ToBf16(nd(rng));
  for (float& v : p.x) v = nd(rng);
  return p;
}

// f32 sums of `in` exact products of N(0,1) values vs double: the f32 Linear tests' bound.
double Tolerance(int64_t in) { return 2e-5 * std::sqrt(static_cast<double>(in)) * 4; }

// Token counts, widths and depths across the 8 x 32 dot tile, the 6 x 16 f32 tile, the 512-deep
// pair blocks and f32 blocks of up to 1024 (odd depths leave a half pair), the 16-row weight panels and
// the row-dot quarters; strided x and y; no pool and 3 threads; the dot product on and off.
TEST(LinearBf16, EveryPathMatchesTheReferenceAtBf16) {
  std::mt19937 rng(11);
  ThreadPool pool3(3);
  const bool has_dot = ops::Bf16Dot() != nullptr;
  for (auto [n, in, out] : {std::tuple{1, 5, 3}, {4, 7, 5}, {8, 256, 32}, {9, 257, 33}, {13, 600, 129},
                            {37, 513, 300}, {64, 1024, 128}, {17, 31, 255}, {2, 33, 67}, {3, 130, 401},
                            {1, 1152, 1001}, {40, 2, 16}, {11, 1537, 45}}) {
    Problem p = MakeProblem(rng, n, in, out);
    const ops::WeightView wv{p.w.data(), DType::kBF16, out, in};
    std::vector<float> ref(n * p.ys, -7.0f), f32(n * p.ys, -7.0f), y(n * p.ys);
    ops::LinearReference(wv, p.x.data(), n, p.xs, ref.data(), p.ys, MatmulPrecision::kBf16);
    ops::LinearReference(wv, p.x.data(), n, p.xs, f32.data(), p.ys, MatmulPrecision::kF32);
    double moved = 0;  // how far rounding x moved the result: the precision is really applied
    for (size_t i = 0; i < ref.size(); ++i) moved = std::max(moved, double(std::fabs(ref[i] - f32[i])));
    if (in >= 256) {
      EXPECT_GT(moved, 10 * Tolerance(in)) << "n=" << n << " in=" << in;
    }
    for (bool dot : {true, false}) {
      if (dot && !has_dot) continue;
      ops::EnableBf16Dot(dot);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
        for (int path = 0; path < 3; ++path) {
          std::fill(y.begin(), y.end(), testing::kUnwritten);
          if (path == 0) ops::Gemm(wv, p.x.data(), n, p.xs, y.data(), p.ys, pool, MatmulPrecision::kBf16);
          else if (path == 1) ops::Linear(wv, p.x.data(), n, p.xs, y.data(), p.ys, pool, MatmulPrecision::kBf16);
          else ops::LinearRowDot(wv, p.x.data(), n, p.xs, y.data(), p.ys, pool, MatmulPrecision::kBf16);
          ASSERT_TRUE(testing::LinearRowsMatch(y, ref, n, p.ys, out, Tolerance(in)))
              << "dot " << dot << " path " << path << " n=" << n << " in=" << in << " out=" << out;
        }
      }
    }
    ops::EnableBf16Dot(true);
  }
}

// Each output of the bf16 GEMM is one chain per block (512 deep on the dot product, up to 1024 on the f32
// kernels), blocks added in order: a token gives bit-identical results alone, in any batch, at any
// position of a tile.
TEST(LinearBf16, GemmIsBatchInvariant) {
  std::mt19937 rng(12);
  ThreadPool pool(2);
  Problem p = MakeProblem(rng, 23, 1100, 150);
  const ops::WeightView wv{p.w.data(), DType::kBF16, p.out, p.in};
  for (bool dot : {true, false}) {
    ops::EnableBf16Dot(dot);
    std::vector<float> all(p.n * p.out), part(p.n * p.out);
    ops::Gemm(wv, p.x.data(), p.n, p.xs, all.data(), p.out, &pool, MatmulPrecision::kBf16);
    for (int64_t start : {0, 1, 5, 11}) {
      const int64_t cnt = p.n - start;
      ops::Gemm(wv, p.x.data() + start * p.xs, cnt, p.xs, part.data(), p.out, nullptr, MatmulPrecision::kBf16);
      for (int64_t i = 0; i < cnt * p.out; ++i) ASSERT_EQ(part[i], all[start * p.out + i]) << dot << " " << start << " " << i;
    }
  }
  ops::EnableBf16Dot(true);
}

// With the rounded-x scratch (x rounded once per call: to pairs for the dot product, to bf16
// values for the f32 kernels) the GEMM gives the same bits as without it (each column block
// rounding its tiles), on both paths, over odd feature counts and several k blocks (in > 512), with
// and without threads; nothing is written past the scratch, and it holds each row rounded. (AMX is
// off here: its tiles read x only from the scratch, so with AMX the scratch does choose the kernel;
// tests/linear_amx_test.cc covers that path.)
TEST(LinearBf16, GemmScratchChangesNoBit) {
  std::mt19937 rng(14);
  ThreadPool pool(2);
  ops::EnableBf16Amx(false);
  for (int64_t in : {7, 150, 1100, 1537}) {
    Problem p = MakeProblem(rng, 21, in, 70);
    const ops::WeightView wv{p.w.data(), DType::kBF16, p.out, p.in};
    for (bool dot : {true, false}) {
      ops::EnableBf16Dot(dot);
      for (ThreadPool* tp : {&pool, static_cast<ThreadPool*>(nullptr)}) {
        std::vector<float> plain(p.n * p.out), scratched(p.n * p.out);
        const int64_t words = ops::GemmScratchWords(p.n, p.in);
        AlignedBuffer scratch((words + 64) * 4);
        uint32_t* xp = scratch.as<uint32_t>();
        for (int64_t i = 0; i < words + 64; ++i) xp[i] = 0xdeadbeefu;
        ops::Gemm(wv, p.x.data(), p.n, p.xs, plain.data(), p.out, tp, MatmulPrecision::kBf16);
        ops::Gemm(wv, p.x.data(), p.n, p.xs, scratched.data(), p.out, tp, MatmulPrecision::kBf16, xp);
        for (int64_t i = 0; i < p.n * p.out; ++i)
          ASSERT_EQ(scratched[i], plain[i]) << "in " << in << " dot " << dot << " threads " << (tp != nullptr) << " i " << i;
        for (int64_t i = words; i < words + 64; ++i) ASSERT_EQ(xp[i], 0xdeadbeefu) << "wrote past the scratch";
        if (!ops::Bf16Dot()) {  // the f32 kernels' path: each x row rounded to bf16 once, as values
          const int64_t stride16 = 2 * (words / p.n);
          ASSERT_GE(stride16, p.in);
          const auto* x16 = reinterpret_cast<const uint16_t*>(xp);
          for (int64_t t = 0; t < p.n; ++t)
            for (int64_t j = 0; j < p.in; ++j)
              ASSERT_EQ(x16[t * stride16 + j], F32ToBf16(p.x[t * p.xs + j])) << "row " << t << " value " << j;
        } else {  // the rounded rows: pairs_from_f32 of each x row
          const int64_t stride = words / p.n, pairs = (p.in + 1) / 2;
          ASSERT_GE(stride, pairs);
          std::vector<uint32_t> want(pairs);
          for (int64_t t = 0; t < p.n; ++t) {
            ops::Bf16Dot()->pairs_from_f32(p.x.data() + t * p.xs, p.in, want.data());
            for (int64_t j = 0; j < pairs; ++j) ASSERT_EQ(xp[t * stride + j], want[j]) << t << " " << j;
          }
        }
      }
    }
  }
  ops::EnableBf16Dot(true);
  ops::EnableBf16Amx(true);
}

// pack_weight_pairs16's layout, element by element: partial panels, an odd last column (its pair's
// high half zero, the element after it never read), an odd row stride.
TEST(LinearBf16, WeightPairPackingLayout) {
  const ops::Bf16DotKernels* dot = ops::Bf16Dot();
  if (dot == nullptr) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  for (auto [rows, cols, stride] : {std::tuple{16, 32, 32}, {5, 7, 9}, {37, 65, 67}, {16, 256, 1153}, {33, 1, 3}}) {
    // One guard element past every row's `cols`: a read of it would show as a nonzero high half.
    std::vector<uint16_t> src(rows * stride + 1);
    for (uint16_t& v : src) v = static_cast<uint16_t>(bits(rng) | 1);
    const int64_t pairs = (cols + 1) / 2, blocks = (rows + 15) / 16;
    AlignedBuffer buf(blocks * pairs * 16 * sizeof(uint32_t));
    uint32_t* dst = buf.as<uint32_t>();
    dot->pack_weight_pairs16(src.data(), stride, rows, cols, dst);
    for (int64_t c = 0; c < blocks; ++c)
      for (int64_t p = 0; p < pairs; ++p)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t r = 16 * c + j;
          const uint32_t lo = r < rows ? src[r * stride + 2 * p] : 0;
          const uint32_t hi = r < rows && 2 * p + 1 < cols ? src[r * stride + 2 * p + 1] : 0;
          ASSERT_EQ(dst[(c * pairs + p) * 16 + j], lo | hi << 16)
              << "rows " << rows << " cols " << cols << " c " << c << " p " << p << " j " << j;
        }
  }
}

TEST(LinearBf16, RoundingIsF32ToBf16BitForBit) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, 1.00390625f /* tie, even below */, 1.01171875f /* tie, odd below */,
                          3.0e38f, -3.4e38f /* rounds to -inf */, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::denorm_min(), 1e-40f, -2.5e-39f};
  std::mt19937 rng(14);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 4096; ++i) {
    const uint32_t b = any(rng);
    float f;
    std::memcpy(&f, &b, 4);
    x.push_back(f);
  }
  std::vector<float> out(x.size());
  ops::RoundBf16(x.data(), static_cast<int64_t>(x.size()), out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = Bf16ToF32(F32ToBf16(x[i]));
    uint32_t a, b;
    std::memcpy(&a, &out[i], 4);
    std::memcpy(&b, &want, 4);
    ASSERT_EQ(a, b) << i << " x=" << x[i];
  }
}

TEST(LinearBf16, SessionNeedsBf16Weights) {
  for (DType dt : {DType::kF32, DType::kF16}) {
    testing::TinyModelOptions mo;
    mo.weight_dtype = dt;
    auto m = testing::MakeTinyModel(mo);
    runtime::SessionOptions o;
    o.max_context = 32, o.max_chunk = 8;
    o.matmul_precision = MatmulPrecision::kBf16;
    auto s = runtime::Session::Create(*m, o, nullptr);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("matmul precision bf16 needs bf16 weights, got " + std::string(DTypeName(dt))),
              std::string::npos)
        << s.status().message();
  }
  testing::TinyModelOptions mo;
  mo.weight_dtype = DType::kBF16;
  auto m = testing::MakeTinyModel(mo);
  runtime::SessionOptions o;
  o.max_context = 32, o.max_chunk = 8;
  o.matmul_precision = MatmulPrecision::kBf16;
  EXPECT_TRUE(runtime::Session::Create(*m, o, nullptr).ok());
}

// A bf16-weight model at matmul precision bf16 computes the f32-precision model up to the rounding
// of each Linear's input (relative 2^-9 each): prefill + decode logits move (the option is wired
// through) by a bf16 rounding's worth, compared with what a bf16 KV cache does to the same model.
// Per layer the cache rounds 2 tensors (K, V), matmul precision 4 (the inputs of q/k/v, o, gate/up,
// down) or 6 with PLE, and both perturbations are amplified by the same later layers: allow 5x
// the cache's change. (Seen: 1.1x without PLE, 3.6x on the PLE model, which amplifies every bf16
// rounding: attention at bf16 moves its logits 10x more than the Gemma-3 model's too.) A wrong
// product would move them by the order of the logits themselves.
TEST(LinearBf16, SessionAtBf16MovesLogitsByBf16Rounding) {
  ThreadPool pool(2);
  for (bool gemma4 : {true, false}) {
    testing::TinyModelOptions mo;
    mo.gemma4 = gemma4;
    mo.ple = gemma4;
    mo.weight_dtype = DType::kBF16;
    auto m = testing::MakeTinyModel(mo);
    const int64_t V = m->arch().vocab;
    std::mt19937 rng(15);
    std::uniform_int_distribution<int32_t> tok(0, 80);
    runtime::Prompt p;
    for (int i = 0; i < 30; ++i) p.tokens.push_back(tok(rng));
    std::vector<std::vector<float>> logits(3);
    for (int which = 0; which < 3; ++which) {
      runtime::SessionOptions o;
      o.max_context = 64, o.max_chunk = 16;
      o.kv_dtype = which == 1 ? DType::kBF16 : DType::kF32;
      o.matmul_precision = which == 2 ? MatmulPrecision::kBf16 : MatmulPrecision::kF32;
      auto s = runtime::Session::Create(*m, o, &pool);
      ASSERT_TRUE(s.ok()) << s.status().message();
      std::vector<float> last(V);
      ASSERT_TRUE(s.value()->Prefill({p}, last.data()).ok());
      logits[which] = last;
      int32_t next = 3;
      const uint8_t active = 1;
      for (int step = 0; step < 6; ++step) {
        ASSERT_TRUE(s.value()->Decode(&next, &active, last.data()).ok());
        logits[which].insert(logits[which].end(), last.begin(), last.end());
        next = (next * 7 + 5) % 80;
      }
    }
    double cache_moved = 0, matmul_moved = 0, scale = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) {
      cache_moved = std::max(cache_moved, double(std::fabs(logits[1][i] - logits[0][i])));
      matmul_moved = std::max(matmul_moved, double(std::fabs(logits[2][i] - logits[0][i])));
      scale = std::max(scale, double(std::fabs(logits[0][i])));
    }
    EXPECT_GT(matmul_moved, 1e-4 * scale) << "gemma4 " << gemma4 << ": matmul precision not applied";
    EXPECT_LT(matmul_moved, 5 * cache_moved) << "gemma4 " << gemma4;
    std::printf("gemma4 %d: max|logit| %.3f, bf16 cache moved %.2e, bf16 matmuls moved %.2e\n", gemma4, scale,
                cache_moved, matmul_moved);
  }
}

}  // namespace
}  // namespace tessera
