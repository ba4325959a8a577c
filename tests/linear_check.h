// Checks a Linear output against its reference, for the Linear tests: y is [n, ys] with `out` real
// columns per row, the rest filled with kUnwritten before the call.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace tessera::testing {

constexpr float kUnwritten = -7.0f;

// Every real output within `tol` of ref (NaN fails), and nothing written past column `out`.
inline ::testing::AssertionResult LinearRowsMatch(const std::vector<float>& y, const std::vector<float>& ref,
                                                  int64_t n, int64_t ys, int64_t out, double tol) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < ys; ++o) {
      const size_t i = t * ys + o;
      if (o >= out && y[i] != kUnwritten)
        return ::testing::AssertionFailure() << "wrote past the row: t=" << t << " o=" << o;
      if (o < out && !(std::fabs(double(y[i]) - ref[i]) <= tol))
        return ::testing::AssertionFailure() << "t=" << t << " o=" << o << ": " << y[i] << " vs " << ref[i]
                                             << " (tolerance " << tol << ")";
    }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::testing
