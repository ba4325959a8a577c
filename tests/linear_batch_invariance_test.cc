// A token's output row from ops::Linear is the same bits whether the token is computed alone (a
// decode step, one row) or inside a batch of n rows (a serving step over n streams, a speculative
// verification of k + 1 tokens): tessera serve's exactness (concurrent requests equal each request
// alone) and speculative decoding's equality with one-row decode rest on it. Every stored weight
// kind as the loader prepares it for each matmul precision (quantized blocks as stored; bf16 with
// pair panels at bf16, as stored at f32; f32 with f32 panels and as stored), AMX on and off, the
// x pairs scratch a model passes, 2 threads as decode runs, n = 1..16 and two shapes.
//
// Paths that change with n on purpose and are not bit-identical across the change are named in
// SwitchAt below (and checked to still differ there, so the list cannot go stale silently):
// - quantized weights from kGemmMinTokensQuant = 12 tokens take the int8 GEMM (two-byte
//   activations for prefill accuracy, bench/results/quant_prefill.md) and at precision bf16 with
//   AMX the bf16 tiles: a token's result there is not its one-row result;
// - weights without panels (bf16 at precision f32, as the loader leaves them; f32 or bf16 where
//   nothing packed them) take the GEMM from kGemmMinTokens = 10 tokens (kGemmMinTokensBf16 = 4 at
//   precision bf16).
// Every other (kind, precision, n) must be memcmp-equal to the token alone, and with rows_as_steps
// (decode batches, speculative verification) every (kind, precision, n) must.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/bf16_dot.h"
#include "quant_blocks.h"
#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"
#include "tessera/quant.h"
#include "tessera/thread_pool.h"

namespace tessera {
namespace {

using ops::MatmulPrecision;

constexpr int64_t kMaxN = 16;

enum class Kind { kQuant, kBf16Pairs, kBf16Stored, kF32Panels, kF32Stored };

// One weight [out, in] as a model's Linear sees it, plus x [kMaxN, in] (strided).
struct Weight {
  Kind kind;
  QuantType quant = QuantType::kNone;
  int64_t in, out, xs;
  std::vector<uint8_t> data;  // blocks, bf16 or f32 elements
  AlignedBuffer panels;       // pair panels or f32 panels, where the kind has them
  std::vector<float> x;

  ops::WeightView View() const {
    ops::WeightView v{data.data(), kind == Kind::kF32Panels || kind == Kind::kF32Stored ? DType::kF32 : DType::kBF16,
                      out, in};
    v.quant = quant;
    if (kind == Kind::kBf16Pairs) v.pairs = panels.as<uint32_t>();
    if (kind == Kind::kF32Panels) v.panels = panels.as<float>();
    return v;
  }
};

Weight MakeWeight(std::mt19937& rng, Kind kind, QuantType quant, int64_t in, int64_t out) {
  std::normal_distribution<float> nd;
  Weight w{kind, quant, in, out, in + 3, {}, AlignedBuffer(), std::vector<float>(kMaxN * (in + 3))};
  for (float& v : w.x) v = nd(rng);
  for (size_t i = 0; i < w.x.size(); i += 97) w.x[i] *= 50.0f;  // a few large activations per block
  if (kind == Kind::kQuant) {
    w.data = testing::RandomBlocks(rng, quant, out, in);
    return w;
  }
  const bool f32 = kind == Kind::kF32Panels || kind == Kind::kF32Stored;
  w.data.resize(out * in * (f32 ? 4 : 2));
  for (int64_t i = 0; i < out * in; ++i) {
    const float v = nd(rng);
    if (f32) {
      std::memcpy(w.data.data() + 4 * i, &v, 4);
    } else {
      const uint16_t b = F32ToBf16(v);
      std::memcpy(w.data.data() + 2 * i, &b, 2);
    }
  }
  if (kind == Kind::kBf16Pairs) {
    w.panels = AlignedBuffer(ops::PairPanelWords(out, in) * sizeof(uint32_t));
    EXPECT_TRUE(ops::PackPairPanels({w.data.data(), DType::kBF16, out, in}, w.panels.as<uint32_t>()));
  } else if (kind == Kind::kF32Panels) {
    w.panels = AlignedBuffer(ops::F32PanelFloats(out, in) * sizeof(float));
    ops::PackF32Panels({w.data.data(), DType::kF32, out, in}, w.panels.as<float>());
  }
  return w;
}

// Linear on tokens [t0, t0 + n) as a model calls it (the x pairs scratch for n rows), y [n, out].
std::vector<float> RunLinear(const Weight& w, int64_t t0, int64_t n, ThreadPool* pool, MatmulPrecision prec,
                             bool rows_as_steps) {
  std::vector<float> y(n * w.out, -7.0f);
  AlignedBuffer x_pairs(ops::GemmScratchWords(n, w.in) * sizeof(uint32_t));
  ops::Linear(w.View(), w.x.data() + t0 * w.xs, n, w.xs, y.data(), w.out, pool, prec, x_pairs.as<uint32_t>(),
              rows_as_steps);
  return y;
}

// From which n a (kind, precision, AMX) leaves the path its one-row call takes (kMaxN + 1: never).
int64_t SwitchAt(Kind kind, MatmulPrecision prec) {
  switch (kind) {
    case Kind::kQuant: return 12;  // kGemmMinTokensQuant: the int8 GEMM (or AMX at bf16)
    case Kind::kBf16Stored:  // no panels: the row-dot below kGemmMinTokens(Bf16), the GEMM from there
    case Kind::kF32Stored: return prec == MatmulPrecision::kF32 ? 10 : 4;
    default: return kMaxN + 1;  // panels: one kernel for every n
  }
}

std::string Name(Kind kind, QuantType q) {
  switch (kind) {
    case Kind::kQuant: return QuantTypeName(q);
    case Kind::kBf16Pairs: return "bf16 pair panels";
    case Kind::kBf16Stored: return "bf16 stored";
    case Kind::kF32Panels: return "f32 panels";
    case Kind::kF32Stored: return "f32 stored";
  }
  return "?";
}

// Every token of every batch n = 1..16 (Linear called with rows_as_steps as given) against the token
// alone (a plain one-row call); returns, per n, whether all rows were the same bits.
std::vector<bool> SameBitsPerN(const Weight& w, ThreadPool* pool, MatmulPrecision prec, bool rows_as_steps) {
  std::vector<std::vector<float>> alone(kMaxN);
  for (int64_t i = 0; i < kMaxN; ++i) alone[i] = RunLinear(w, i, 1, pool, prec, false);
  std::vector<bool> same(kMaxN + 1, true);
  for (int64_t n = 1; n <= kMaxN; ++n) {
    // Batches starting at token 0 and (where they fit) at token kMaxN - n: each token at two places.
    for (int64_t t0 : {int64_t{0}, kMaxN - n}) {
      const std::vector<float> y = RunLinear(w, t0, n, pool, prec, rows_as_steps);
      for (int64_t i = 0; i < n; ++i)
        if (std::memcmp(y.data() + i * w.out, alone[t0 + i].data(), w.out * sizeof(float)) != 0) same[n] = false;
    }
  }
  return same;
}

void CheckKind(std::mt19937& rng, Kind kind, QuantType quant, MatmulPrecision prec, ThreadPool* pool) {
  // Shapes: 40 or 5 blocks of 32 / 256 values and rows past whole 16-row groups; 3 blocks, 17 rows;
  // 300 rows: several 16-row groups per thread's range (the next group prefetched).
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{1280, 35}, {768, 17}, {256, 300}}) {
    const Weight w = MakeWeight(rng, kind, quant, in, out);
    for (bool amx : {true, false}) {
      ops::EnableBf16Amx(amx);
      const std::vector<bool> same = SameBitsPerN(w, pool, prec, false);
      const std::vector<bool> as_steps = SameBitsPerN(w, pool, prec, true);
      const int64_t at = SwitchAt(kind, prec);
      for (int64_t n = 1; n <= kMaxN; ++n) {
        SCOPED_TRACE(Name(kind, quant) + (prec == MatmulPrecision::kBf16 ? " precision bf16" : " precision f32") +
                     (amx ? " AMX allowed" : " AMX off") + " in=" + std::to_string(in) + " out=" +
                     std::to_string(out) + " n=" + std::to_string(n));
        EXPECT_TRUE(as_steps[n]) << "with rows_as_steps a token's row in a batch of n differs from the token alone";
        if (n < at) {
          EXPECT_TRUE(same[n]) << "a token's row in a batch of n differs from the token alone";
        } else if (n == at) {
          EXPECT_FALSE(same[n]) << "the path switch listed in SwitchAt now gives the same bits: update the list";
        }
      }
    }
    ops::EnableBf16Amx(true);
  }
}

TEST(LinearBatchInvariance, QuantizedWeights) {
  std::mt19937 rng(2121);
  ThreadPool pool(2);
  for (QuantType t : {QuantType::kQ8_0, QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ4_K, QuantType::kQ5_K,
                      QuantType::kQ6_K, QuantType::kQ4_1, QuantType::kQ5_1})
    for (MatmulPrecision prec : {MatmulPrecision::kF32, MatmulPrecision::kBf16})
      CheckKind(rng, Kind::kQuant, t, prec, &pool);
}

TEST(LinearBatchInvariance, Bf16Weights) {
  std::mt19937 rng(2122);
  ThreadPool pool(2);
  if (ops::Bf16Dot() != nullptr) CheckKind(rng, Kind::kBf16Pairs, QuantType::kNone, MatmulPrecision::kBf16, &pool);
  CheckKind(rng, Kind::kBf16Stored, QuantType::kNone, MatmulPrecision::kBf16, &pool);
  CheckKind(rng, Kind::kBf16Stored, QuantType::kNone, MatmulPrecision::kF32, &pool);
}

TEST(LinearBatchInvariance, F32Weights) {
  std::mt19937 rng(2123);
  ThreadPool pool(2);
  CheckKind(rng, Kind::kF32Panels, QuantType::kNone, MatmulPrecision::kF32, &pool);
  CheckKind(rng, Kind::kF32Stored, QuantType::kNone, MatmulPrecision::kF32, &pool);
}

}  // namespace
}  // namespace tessera
