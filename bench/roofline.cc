#include "roofline.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "tessera/check.h"
#include "tessera/gemm.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A zero-filled (so resident) anonymous buffer of `bytes`, 2 MiB-aligned, paged as asked.
class ProbeBuffer {
 public:
  ProbeBuffer(size_t bytes, Paging paging) : map_bytes_(bytes + kHuge) {
    map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TESSERA_CHECK(map_ != MAP_FAILED, "roofline probe: mmap failed");
    data_ = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(map_) + kHuge - 1) & ~uintptr_t(kHuge - 1));
    madvise(data_, bytes, paging == Paging::kHuge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);  // a hint
    std::memset(data_, 0, bytes);
  }
  ~ProbeBuffer() { munmap(map_, map_bytes_); }
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;
  const float* data() const { return data_; }

 private:
  static constexpr size_t kHuge = size_t{2} << 20;
  size_t map_bytes_;
  void* map_;
  float* data_;
};

__attribute__((target("avx2"))) float SumAvx2(const float* p, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

float SumPlain(const float* p, int64_t n) {
  float s[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t iters) {
  __m256 a[10];
  for (int j = 0; j < 10; ++j) a[j] = _mm256_set1_ps(1.0f + j * 1e-3f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 10; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  __m256 s = a[0];
  for (int j = 1; j < 10; ++j) s = _mm256_add_ps(s, a[j]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  return t[0];
}

__attribute__((target("avx512f"))) float FmaLoopAvx512(int64_t iters) {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(1.0f + j * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  alignas(64) float t[16];
  _mm512_store_ps(t, s);
  return t[0];
}

__attribute__((target("avx512f,avx512bf16"))) float Bf16DotLoop(int64_t iters) {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(1.0f + j * 1e-3f);
  const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f7f3f7f));  // (0.996, 0.996)
  const __m512bh y = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x33d633d6));  // (1e-7, 1e-7)
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_dpbf16_ps(a[j], x, y);
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  alignas(64) float t[16];
  _mm512_store_ps(t, s);
  return t[0];
}

// The LDTILECFG operand (palette 1): per tile, its rows and bytes per row.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-5: C accumulators, each its own dependency chain; 6: A, 7: B, loaded once. The tile
// state is per thread, so every thread configures and releases its own.
__attribute__((target("amx-tile,amx-bf16"))) float AmxBf16Loop(int64_t iters) {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t ab[16 * 32];
  for (uint16_t& v : ab) v = 0x3a83;  // bf16 1e-3: 32 products per step stay far from overflow
  alignas(64) float c[16 * 16];
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  _tile_stored(0, c, 64);
  float s = c[0];
  _tile_stored(5, c, 64);
  _tile_release();
  return s + c[0];
}

// Wall seconds for fn(t) on `threads` threads started together.
double TimeOnThreads(int threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t) ts.emplace_back(fn, t);
  for (auto& t : ts) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

double ReadBandwidthGBs(int threads, int64_t bytes, int reps, Paging paging) {
  const int64_t n = bytes / 4;
  const int64_t per = (n / threads) & ~int64_t(31);
  const bool avx2 = __builtin_cpu_supports("avx2");
  std::vector<float> sink(threads);
  std::vector<double> per_buffer;
  for (int r = 0; r < reps; ++r) {
    // A fresh buffer each time: on a VM the same code reads some allocations' pages much faster
    // than most, so one lucky buffer must not set the roofline (bench/results/kernel_choices.md,
    // "Fresh buffers in the benchmarks").
    const ProbeBuffer buf(static_cast<size_t>(bytes), paging);
    const float* p = buf.data();
    double best = 0;
    for (int pass = 0; pass < 3; ++pass) {
      const double s = TimeOnThreads(
          threads, [&](int t) { sink[t] += avx2 ? SumAvx2(p + t * per, per) : SumPlain(p + t * per, per); });
      best = std::max(best, per * threads * 4.0 / s / 1e9);
    }
    per_buffer.push_back(best);
  }
  std::sort(per_buffer.begin(), per_buffer.end());
  return per_buffer[per_buffer.size() / 2];
}

// Best of 3 runs of `loop(iters)` on every thread, as GFLOP/s for `flops_per_iter` per iteration.
static double LoopPeakGflops(int threads, float (*loop)(int64_t), int64_t iters, double flops_per_iter) {
  std::vector<float> sink(threads);
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const double s = TimeOnThreads(threads, [&](int t) { sink[t] += loop(iters); });
    best = std::max(best, threads * iters * flops_per_iter / s / 1e9);
  }
  return best;
}

double FmaPeakGflops(int threads) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
  const double avx2 = LoopPeakGflops(threads, FmaLoopAvx2, 20'000'000, 10.0 * 8 * 2);  // 10 chains x 8 lanes x FMA
  // A CPU with two 512-bit FMA units doubles the 256-bit rate; elsewhere the two are level.
  if (!__builtin_cpu_supports("avx512f")) return avx2;
  return std::max(avx2, LoopPeakGflops(threads, FmaLoopAvx512, 10'000'000, 12.0 * 16 * 2));  // 12 chains x 16 lanes
}

double Bf16DotPeakGflops(int threads) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) return 0;
  return LoopPeakGflops(threads, Bf16DotLoop, 10'000'000, 12.0 * 16 * 4);  // 12 chains x 16 lanes x 2 FMAs
}

double AmxBf16PeakGflops(int threads) {
  if (!tessera::ops::Bf16AmxActive()) return 0;
  return LoopPeakGflops(threads, AmxBf16Loop, 2'000'000, 6.0 * 16 * 16 * 32 * 2);  // 6 tiles x 16 x 16 x 32 MACs
}

}  // namespace tessera::bench
