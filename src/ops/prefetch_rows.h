// A run of rows to prefetch while computing: what a decode kernel hands its micro-kernels (or
// paces between micro-tile calls) so DRAM requests for the K / V rows ahead flow evenly under the
// arithmetic instead of leaving in one burst, which filled the core's miss queue and stalled it.
#pragma once

#include <cstdint>

namespace tessera::ops {

// `rows` rows of `row_bytes` each, the first at `first`, `stride` bytes apart; rows == 0: none.
struct PrefetchRows {
  const void* first = nullptr;
  int64_t stride = 0, row_bytes = 0, rows = 0;
};

}  // namespace tessera::ops
