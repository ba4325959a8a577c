// The int8 GEMM's AMX micro-tile (ops/quant_gemm.h, QuantGemmTileAmx) against the VNNI micro-tile,
// itself checked against the plain reference LinearReference in quant_gemm_test.cc. Both sum exact
// integers per sub-block and then take the same f32 steps in the same order, so the expected
// results are the same bits, not a tolerance: the tile alone on random and extreme codes and
// activations (every code 255 against +-127 bytes: the largest integer sums), and QuantGemm with
// AMX on and off on random shapes of every GGUF type (token counts with and without a remainder
// past the 16-token tiles, k deeper than one block, 1 and 2 threads; QuantGemm keeps Q6_K on the
// VNNI tile, so the tile test is what covers 16-value sub-blocks on AMX).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/quant_gemm.h"
#include "quant_blocks.h"
#include "tessera/aligned_buffer.h"
#include "tessera/gemm.h"
#include "tessera/quant.h"

namespace tessera {
namespace {

using testing::MakeQuantProblem;
using testing::QuantProblem;

constexpr QuantType kTypes[] = {QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ8_0, QuantType::kQ4_1, QuantType::kQ5_1,
                                QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K};

std::vector<float> RunQuantGemm(const QuantProblem& p, int64_t n, ThreadPool* pool, bool amx) {
  std::vector<float> y(n * p.ys, -12345.0f);
  AlignedBuffer scratch(ops::GemmScratchWords(n, p.in) * 4);
  ops::EnableQuantGemmAmx(amx);
  ops::QuantGemm(p.View(), p.x.data(), n, p.xs, y.data(), p.ys, pool, scratch.as<uint32_t>());
  ops::EnableQuantGemmAmx(true);
  return y;
}

TEST(QuantGemmAmx, SameBitsAsVnniOnRandomShapes) {
  if (!ops::QuantGemmAmxActive()) GTEST_SKIP() << "no AMX-INT8 on this CPU";
  std::mt19937 rng(21);
  ThreadPool pool(2);
  for (QuantType t : kTypes) {
    const int64_t be = QuantBlockElems(t);
    // The deepest in spans two k blocks of the GEMM (2048 values at most).
    for (int64_t blocks : {int64_t{1}, int64_t{3}, be == 32 ? int64_t{70} : int64_t{9}}) {
      for (int64_t out : {16, 33, 129}) {
        for (int64_t n : {16, 21, 48}) {
          const int64_t in = blocks * be;
          SCOPED_TRACE(std::string(QuantTypeName(t)) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
                       " n=" + std::to_string(n));
          const QuantProblem p = MakeQuantProblem(rng, t, n, in, out);
          for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
            const std::vector<float> vnni = RunQuantGemm(p, n, tp, false), amx = RunQuantGemm(p, n, tp, true);
            ASSERT_EQ(0, std::memcmp(vnni.data(), amx.data(), vnni.size() * sizeof(float)));
          }
        }
      }
    }
  }
}

// One tile call on hand-made operands: the scratch rows (q_hi, q_lo, xd, xs), a panel of codes and
// its a, b, against four 4-token VNNI calls over the same panel (its second panel zero), with the
// weights' offsets as b and folded into xs (centered).
TEST(QuantGemmAmx, TileMatchesVnniTileOnExtremes) {
  if (!ops::QuantGemmAmxActive()) GTEST_SKIP() << "no AMX-INT8 on this CPU";
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
  for (int64_t sub : {16, 32}) {
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t kc = 256 * (1 + trial % 3), in = kc + 256 * (trial % 2), k0 = in - kc;
      const int64_t stride = ops::QuantGemmRowBytes(in), groups = kc / sub;
      const bool extreme = trial % 4 == 0, accumulate = trial % 3 == 1, centered = trial % 2 == 0;
      const int nr = trial % 5 == 2 ? 1 + static_cast<int>(rng() % 15) : 16;
      AlignedBuffer rows(16 * stride), codes(2 * kc * 16), a(2 * groups * 16 * 4), b(2 * groups * 16 * 4);
      for (int64_t r = 0; r < 16; ++r) {
        auto* q = reinterpret_cast<int8_t*>(rows.as<char>() + r * stride);
        for (int64_t i = 0; i < 2 * in; ++i) q[i] = static_cast<int8_t>(extreme ? (rng() % 2 ? 127 : -127) : int(rng() % 255) - 127);
        auto* f = reinterpret_cast<float*>(q + 2 * in);
        for (int64_t i = 0; i < in / 32 + in / sub; ++i) f[i] = ud(rng);
      }
      std::memset(codes.as<uint8_t>(), 0, 2 * kc * 16);
      std::memset(a.as<float>(), 0, 2 * groups * 16 * 4), std::memset(b.as<float>(), 0, 2 * groups * 16 * 4);
      for (int64_t i = 0; i < kc * 16; ++i) codes.as<uint8_t>()[i] = extreme ? 255 : static_cast<uint8_t>(rng());
      for (int64_t i = 0; i < groups * 16; ++i) a.as<float>()[i] = ud(rng), b.as<float>()[i] = ud(rng);
      const int64_t ys = 19;
      std::vector<float> init(16 * ys);
      for (float& v : init) v = ud(rng);
      std::vector<float> want = init, got = init;
      for (int64_t t = 0; t < 16; t += 4) {
        ops::QuantTile tile;
        for (int r = 0; r < 4; ++r) {
          const char* row = rows.as<char>() + (t + r) * stride;
          tile.hi[r] = reinterpret_cast<const int8_t*>(row) + k0;
          tile.lo[r] = tile.hi[r] + in;
          tile.xd[r] = reinterpret_cast<const float*>(row + 2 * in) + k0 / 32;
          tile.xs[r] = reinterpret_cast<const float*>(row + 2 * in) + in / 32 + k0 / sub;
        }
        ops::QuantGemmTileAvx512(tile, 4, codes.as<uint8_t>(), a.as<float>(), b.as<float>(), kc, sub,
                                 want.data() + t * ys, ys, nr, accumulate, ops::QuantActBytes::kTwo, centered);
      }
      ops::QuantGemmTileAmx(ops::QuantAmxRows{rows.as<char>(), stride, in, k0}, codes.as<uint8_t>(), a.as<float>(),
                            b.as<float>(), kc, sub, got.data(), ys, nr, accumulate, centered);
      ops::QuantAmxRelease();
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << "sub=" << sub << " kc=" << kc << " nr=" << nr << " accumulate=" << accumulate << " extreme=" << extreme
          << " centered=" << centered;
    }
  }
}

}  // namespace
}  // namespace tessera
