// The machine's roofline measured in C++ by the benchmarks that quote "% of roofline": read
// bandwidth over a buffer far larger than the caches, with 1..N threads, and the f32 FMA peak.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>


namespace tessera::bench {

// How the probe's buffer is paged. Huge (2 MiB transparent huge pages, where the kernel grants
// them) is the machine's best plain stream and the roofline the benchmarks quote: fewer TLB walks
// than 4 KiB pages, and weights mapped from the page cache are often huge-page mapped too.
enum class Paging { kHuge, kSmall };

// Read bandwidth in GB/s: `threads` threads, started together, each sum their share of a
// `bytes`-sized f32 buffer with AVX2 loads when available; the best of 3 passes per buffer, the
// median over `reps` freshly allocated buffers (physical placement moves it on a VM).
double ReadBandwidthGBs(int threads, int64_t bytes = int64_t(1) << 30, int reps = 5, Paging paging = Paging::kHuge);

// f32 GFLOP/s of independent register-only FMA chains on `threads` threads, the faster of AVX2's
// and (where the CPU has it) AVX-512's: the compute peak (0 without AVX2+FMA).
double FmaPeakGflops(int threads);

// The same for AVX-512-BF16's bf16 dot product (vdpbf16ps, 2 multiply-adds per f32 lane): the
// compute peak of attention at precision bf16; 0 where the CPU lacks it.
double Bf16DotPeakGflops(int threads);

// The same for Intel AMX's tdpbf16ps (a 16 x 16 f32 tile += 16 x 32 bf16 by 32 x 16 bf16 per
// instruction) on six independent accumulator tiles kept in the tile registers: the compute peak
// of Linear at precision bf16 where the engine runs it on AMX (tessera::ops::Bf16AmxActive(), which
// also asks Linux for the tile state); 0 where it does not.
double AmxBf16PeakGflops(int threads);

// Wall milliseconds of one call of f.
template <typename F>
double TimeMs(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The median of timings (the upper one of an even count).
inline double Median(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median wall milliseconds of `reps` calls of f, after one untimed warm-up call.
template <typename F>
double MedianMs(int reps, F&& f) {
  f();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) ms.push_back(TimeMs(f));
  return Median(std::move(ms));
}

}  // namespace tessera::bench
