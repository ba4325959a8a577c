// The machine's roofline measured in C++ by the benchmarks that quote "% of roofline": read
// bandwidth over a buffer far larger than the caches, with 1..N threads, and the f32 FMA peak.
#pragma once

#include <cstdint>


namespace tessera::bench {

// Best-of-`reps` read bandwidth in GB/s: `threads` threads, started together, each sum their share
// of a `bytes`-sized f32 buffer with AVX2 loads when available.
double ReadBandwidthGBs(int threads, int64_t bytes = int64_t(1) << 30, int reps = 5);

// f32 GFLOP/s of independent register-only AVX2 FMA chains on `threads` threads (the compute
// peak; 0 without AVX2+FMA).
double FmaPeakGflops(int threads);

}  // namespace tessera::bench
