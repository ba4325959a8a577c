// Checks a P.V panel kernel's output (Bf16DotKernels::pv_rows16, ops::AmxPv16) against double sums,
// for the attention kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tessera/dtype.h"

namespace tessera::testing {

// One P.V call's output block and rescale factors: c [16][cs] of 0.25 (c0 its copy), cs = cols + 20;
// alpha: 1 in every third row, other values elsewhere, NaN past mr (which must reach no result),
// passed in every other case (Alpha(), else null).
struct PvCase {
  bool rescale = false;
  std::vector<float> alpha;
  int64_t cs = 0;
  std::vector<float> c, c0;

  PvCase(int n, int mr, int subset, int64_t cols)
      : rescale((n + mr + subset) % 2 == 1), alpha(16), cs(cols + 20), c(16 * cs, 0.25f), c0(c) {
    for (int r = 0; r < 16; ++r) alpha[r] = r < mr ? (r % 3 == 0 ? 1.0f : 0.125f * r) : std::nanf("");
  }
  const float* Alpha() const { return rescale ? alpha.data() : nullptr; }
};

// Rows r < mr, columns j < cols of pc.c must hold 0.25 alpha[r] (1 without rescale) + sum over keys
// t < n in `keys` of w[r][t] v[t][j] within bound(sum of the terms' magnitudes); w [16][64] and
// v [n][stride] bf16. Everything else in c must be unchanged.
template <typename Bound>
::testing::AssertionResult PvRowsMatch(const PvCase& pc, int mr, int64_t cols, int n, uint64_t keys, const uint16_t* w,
                                       const uint16_t* v, int64_t stride, Bound bound) {
  const int64_t cs = pc.cs;
  for (int r = 0; r < 16; ++r)
    for (int64_t j = 0; j < cs; ++j) {
      const float got = pc.c[r * cs + j];
      if (r >= mr || j >= cols) {
        if (got != pc.c0[r * cs + j])
          return ::testing::AssertionFailure() << "wrote outside the block: r " << r << " j " << j;
        continue;
      }
      double want = 0.25 * (pc.rescale ? pc.alpha[r] : 1.0f), mag = std::fabs(want);
      for (int t = 0; t < n; ++t) {
        if (!(keys >> t & 1)) continue;
        const double x = double(Bf16ToF32(w[r * 64 + t])) * Bf16ToF32(v[t * stride + j]);
        want += x, mag += std::fabs(x);
      }
      if (!(std::fabs(got - want) <= bound(mag)))
        return ::testing::AssertionFailure() << "r " << r << " j " << j << ": " << got << " vs " << want
                                             << " (tolerance " << bound(mag) << ")";
    }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::testing
