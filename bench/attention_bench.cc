// Attention kernels at the performance issue's Gemma shapes, timed in C++ (no binding overhead)
// beside the machine's roofline measured in the same run (bench/roofline.h):
//   decode  (16 q, 8 kv, 256), (4 q, 1 kv, 256) (the Gemma-3-1B group) and (16 q, 1 kv, 512), bf16
//           K/V, 1k / 8k / 32k keys: ms, GB/s of K/V read, % of the multi-thread read bandwidth,
//           GFLOP/s and % of the compute peak;
//   prefill (16 q, 8 kv, 256), S = 2048 / 4096 / 8192: causal and window 1024, each with and
//           without a 256-token image block in the middle: ms, GFLOP/s on visible pairs, % of peak,
//           the window / causal cost ratio and the image-block overhead.
// Each at precision f32 (prefill with f32 K/V) and bf16 (bf16 K/V; its peak is AMX's tdpbf16ps
// where the kernels run on its tiles (tessera::ops::Bf16AmxActive()), else the bf16 dot product's
// where the CPU has AVX-512-BF16, else the FMA peak). The onnxruntime comparison of the
// same shapes is bench/attention_peers.py.
//
//   build/release/tessera_bench_attention [--threads N] [--reps R] [--max-s 8192] [--max-keys 32768]
//                                         [--precision f32|bf16|both]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "roofline.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/gemm.h"

using namespace tessera;

namespace {

constexpr int kAllocations = 3;  // fresh K/V allocations per decode shape (median reported)

void Check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "attention failed: %s\n", s.message().c_str());
    std::exit(1);
  }
}

struct Options {
  int threads = DefaultThreadCount(), reps = 5;
  int64_t max_s = 8192, max_keys = 32768;
  std::vector<AttentionPrecision> precisions = {AttentionPrecision::kF32, AttentionPrecision::kBf16};
};

// The options after the program name; returns 2 (after a message) on a bad one, else -1.
int ParseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") o->threads = std::atoi(argv[i + 1]);
    else if (a == "--reps") o->reps = std::atoi(argv[i + 1]);
    else if (a == "--max-s") o->max_s = std::atoll(argv[i + 1]);
    else if (a == "--max-keys") o->max_keys = std::atoll(argv[i + 1]);
    else if (a == "--precision" && std::string(argv[i + 1]) != "both") {
      o->precisions.assign(1, AttentionPrecision::kF32);
      if (!ParseAttentionPrecision(argv[i + 1], &o->precisions[0])) {
        std::fprintf(stderr, "--precision: f32, bf16 or both, not %s\n", argv[i + 1]);
        return 2;
      }
    } else if (a == "--precision") {
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  return -1;
}

// The machine's roofline, measured in this run.
struct Roofline {
  double bw = 0, peak = 0, dot_peak = 0, amx_peak = 0;
  // The compute peak of a precision: bf16 runs on AMX tiles, else on the dot product, where the
  // CPU has them.
  double PeakOf(AttentionPrecision pr) const {
    if (pr != AttentionPrecision::kBf16) return peak;
    return amx_peak > 0 ? amx_peak : dot_peak > 0 ? dot_peak : peak;
  }
};

// One decode shape: the median over kAllocations fresh K/V allocations, as the bandwidth probe
// does: on a VM a buffer's physical placement alone moves a DRAM-bound kernel
// (bench/results/kernel_choices.md, "Fresh buffers in the benchmarks").
double DecodeMs(int64_t hq, int64_t hkv, int64_t d, int64_t keys, AttentionPrecision precision, int reps,
                AttentionContext& ctx, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> q(hq * d), out(hq * d), kf(hkv * keys * d), vf(kf.size());
  for (float& x : q) x = nd(rng);
  for (float& x : kf) x = nd(rng);
  for (float& x : vf) x = nd(rng);
  std::vector<int32_t> qpos{static_cast<int32_t>(keys - 1)}, kpos(keys);
  for (int64_t j = 0; j < keys; ++j) kpos[j] = static_cast<int32_t>(j);
  std::vector<double> per_alloc;
  for (int alloc = 0; alloc < kAllocations; ++alloc) {
    // K/V [hkv, keys, d] bf16 in AlignedBuffers, paged like the engine's KV cache.
    AlignedBuffer k(kf.size() * 2, AlignedBuffer::Pages::kHuge), v(vf.size() * 2, AlignedBuffer::Pages::kHuge);
    EncodeFromF32(DType::kBF16, kf.data(), k.data(), kf.size());
    EncodeFromF32(DType::kBF16, vf.data(), v.data(), vf.size());
    AttentionParams p;
    p.q = HeadsView::Dense(q.data(), DType::kF32, 1, hq, 1, d);
    p.k = HeadsView::Dense(k.data(), DType::kBF16, 1, hkv, keys, d);
    p.v = HeadsView::Dense(v.data(), DType::kBF16, 1, hkv, keys, d);
    p.out = OutView::Dense(out.data(), 1, hq, 1, d);
    p.mask.q_pos = qpos.data();
    p.mask.k_pos = kpos.data();
    p.scale = 1.0f / 16;
    p.precision = precision;
    per_alloc.push_back(bench::MedianMs(reps * 4, [&] { Check(Attention(p, ctx)); }));
  }
  std::sort(per_alloc.begin(), per_alloc.end());
  return per_alloc[per_alloc.size() / 2];
}

void DecodeTable(const Options& o, const Roofline& r, AttentionContext& ctx, std::mt19937& rng) {
  std::printf("%-26s %5s %7s %10s %9s %8s %10s %8s\n", "decode (bf16 K/V)", "prec", "keys", "ms", "GB/s", "% bw",
              "GFLOP/s", "% peak");
  for (auto [hq, hkv, d] : {std::tuple<int64_t, int64_t, int64_t>{16, 8, 256}, {4, 1, 256}, {16, 1, 512}})
    for (AttentionPrecision precision : o.precisions)
      for (int64_t keys : {1024, 8192, 32768}) {
        if (keys > o.max_keys) continue;
        const double ms = DecodeMs(hq, hkv, d, keys, precision, o.reps, ctx, rng);
        const double bytes = 2.0 * hkv * keys * d * 2, flops = 4.0 * hq * keys * d;
        char name[64];
        std::snprintf(name, sizeof name, "%lldq/%lldkv x %lld", (long long)hq, (long long)hkv, (long long)d);
        std::printf("%-26s %5s %7lld %10.3f %9.1f %8.0f %10.1f %8.0f\n", name, AttentionPrecisionName(precision),
                    (long long)keys, ms, bytes / ms / 1e6, 100 * bytes / ms / 1e6 / r.bw, flops / ms / 1e6,
                    100 * flops / ms / 1e6 / r.PeakOf(precision));
      }
}

// Visible (query, key) pairs of the prefill mask, counted from its definition.
int64_t VisiblePairs(int64_t s, bool window, bool image, const std::vector<int32_t>& blk) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < s; ++i) {
    int64_t lo = window ? std::max<int64_t>(0, i - 1023) : 0, hi = i;
    if (image && blk[i] == 0) lo = std::min(lo, s / 2), hi = s / 2 + 255;
    pairs += hi - lo + 1;
  }
  return pairs;
}

// Causal and window 1024, each with and without a 256-token image block, at one S and precision.
void PrefillRows(int64_t s, AttentionPrecision precision, const Options& o, const Roofline& r, AttentionContext& ctx,
                 std::mt19937& rng) {
  const int64_t hq = 16, hkv = 8, d = 256;
  std::normal_distribution<float> nd;
  // K/V f32 at precision f32, bf16 at bf16 (which needs them).
  const DType kv_dtype = precision == AttentionPrecision::kBf16 ? DType::kBF16 : DType::kF32;
  std::vector<float> q(hq * s * d), kf(hkv * s * d), vf(hkv * s * d), out(hq * s * d);
  for (float& x : q) x = nd(rng);
  for (float& x : kf) x = nd(rng);
  for (float& x : vf) x = nd(rng);
  AlignedBuffer k(kf.size() * DTypeSize(kv_dtype), AlignedBuffer::Pages::kHuge),
      v(vf.size() * DTypeSize(kv_dtype), AlignedBuffer::Pages::kHuge);
  EncodeFromF32(kv_dtype, kf.data(), k.data(), kf.size());
  EncodeFromF32(kv_dtype, vf.data(), v.data(), vf.size());
  std::vector<int32_t> pos(s), blk(s, -1);
  for (int64_t j = 0; j < s; ++j) pos[j] = static_cast<int32_t>(j);
  for (int64_t j = s / 2; j < s / 2 + 256; ++j) blk[j] = 0;
  double causal_ms[2] = {0, 0};
  for (int window : {0, 1}) {
    double plain_ms = 0;
    for (int image : {0, 1}) {
      AttentionParams p;
      p.q = HeadsView::Dense(q.data(), DType::kF32, 1, hq, s, d);
      p.k = HeadsView::Dense(k.data(), kv_dtype, 1, hkv, s, d);
      p.v = HeadsView::Dense(v.data(), kv_dtype, 1, hkv, s, d);
      p.precision = precision;
      p.out = OutView::Dense(out.data(), 1, hq, s, d);
      p.mask.q_pos = pos.data();
      p.mask.k_pos = pos.data();
      p.mask.window_left = window ? 1023 : -1;
      if (image) p.mask.q_block = p.mask.k_block = blk.data();
      p.scale = 1.0f / 16;
      const int64_t pairs = VisiblePairs(s, window, image, blk);
      const double ms = bench::MedianMs(std::max(1, o.reps / 2), [&] { Check(Attention(p, ctx)); });
      const double gf = 4.0 * hq * d * pairs / ms / 1e6;
      char name[64], ratio[32] = "", over[32] = "";
      std::snprintf(name, sizeof name, "%s%s", window ? "window 1024" : "causal", image ? " + image" : "");
      if (image) std::snprintf(over, sizeof over, "%+.1f%%", 100 * (ms / plain_ms - 1));
      if (window) std::snprintf(ratio, sizeof ratio, "%.2f", ms / causal_ms[image]);
      if (!window) causal_ms[image] = ms;
      if (!image) plain_ms = ms;
      std::printf("%-26s %5s %7lld %10.1f %10.1f %8.0f %14s %14s\n", name, AttentionPrecisionName(precision),
                  (long long)s, ms, gf, 100 * gf / r.PeakOf(precision), ratio, over);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = bench::CheckArgs(
          argc, argv, " [--threads N] [--reps R] [--max-s 8192] [--max-keys 32768] [--precision f32|bf16|both]\n");
      rc >= 0)
    return rc;
  Options o;
  if (const int rc = ParseOptions(argc, argv, &o); rc >= 0) return rc;
  Roofline r;
  r.bw = bench::ReadBandwidthGBs(o.threads);
  r.peak = bench::FmaPeakGflops(o.threads);
  const double bw_small = bench::ReadBandwidthGBs(o.threads, int64_t(1) << 30, 5, bench::Paging::kSmall);
  r.dot_peak = bench::Bf16DotPeakGflops(o.threads);
  r.amx_peak = ops::Bf16AmxActive() ? bench::AmxBf16PeakGflops(o.threads) : 0;
  std::printf("roofline (%d threads): read bandwidth %.1f GB/s (huge pages; 4 KiB pages %.1f), f32 FMA peak %.1f "
              "GFLOP/s, bf16 dot peak %.1f GFLOP/s, AMX bf16 peak %.1f GFLOP/s (0: not used)\n\n",
              o.threads, r.bw, bw_small, r.peak, r.dot_peak, r.amx_peak);
  ThreadPool pool(o.threads);
  Arena arena;
  AttentionContext ctx{&pool, &arena};
  std::mt19937 rng(1);
  DecodeTable(o, r, ctx, rng);
  std::printf("\n%-26s %5s %7s %10s %10s %8s %14s %14s\n", "prefill 16q/8kv x 256", "prec", "S", "ms", "GFLOP/s",
              "% peak", "window/causal", "image overhead");
  for (int64_t s : {2048, 4096, 8192}) {
    if (s > o.max_s) continue;
    for (AttentionPrecision precision : o.precisions) PrefillRows(s, precision, o, r, ctx, rng);
  }
  return 0;
}
