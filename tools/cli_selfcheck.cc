// tessera selfcheck: Gemma-4-shaped attention layers (sliding 16q/8kv x 256 with an image block,
// global 16q/1kv x 512), fast kernels against the reference at both precisions (f32 with f32 K/V;
// bf16 with bf16 K/V, on AVX-512-BF16 where the CPU has it), tile census and timing; then a
// Gemma-4-wide Linear on bf16 weights at both matmul precisions against its reference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "cli.h"
#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct LayerShape {
  const char* name;
  int64_t hq, hkv, d;
  int32_t window;  // HF sliding_window W, 0 = global
};

struct Problem {
  int64_t S_q, S_kv;
  std::vector<float> q, k, v, out, ref;
  std::vector<uint16_t> k16, v16;  // K/V as bf16, for precision bf16
  std::vector<int32_t> q_pos, k_pos, q_blk, k_blk, valid;
  AttentionParams params;
};

// One prompt of `s` tokens with an image block of `img` tokens starting at `img_start`
// (prefill), or one decode token after `s` cached tokens.
void Build(Problem& pr, const LayerShape& L, int64_t s, bool decode, int64_t img_start, int64_t img, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  pr.S_kv = decode ? s + 1 : s;
  pr.S_q = decode ? 1 : s;
  pr.q.resize(L.hq * pr.S_q * L.d);
  pr.k.resize(L.hkv * pr.S_kv * L.d);
  pr.v.resize(L.hkv * pr.S_kv * L.d);
  for (auto* vec : {&pr.q, &pr.k, &pr.v})
    for (float& x : *vec) x = nd(rng);
  pr.out.assign(L.hq * pr.S_q * L.d, 0.f);
  pr.ref.assign(pr.out.size(), 0.f);
  pr.k_pos.resize(pr.S_kv);
  pr.k_blk.assign(pr.S_kv, -1);
  for (int64_t j = 0; j < pr.S_kv; ++j) pr.k_pos[j] = static_cast<int32_t>(j);
  for (int64_t j = img_start; j < img_start + img && j < pr.S_kv; ++j) pr.k_blk[j] = 0;
  pr.q_pos.resize(pr.S_q);
  pr.q_blk.resize(pr.S_q);
  for (int64_t i = 0; i < pr.S_q; ++i) {
    pr.q_pos[i] = static_cast<int32_t>(pr.S_kv - pr.S_q + i);
    pr.q_blk[i] = pr.k_blk[pr.q_pos[i]];
  }
  pr.valid = {static_cast<int32_t>(pr.S_kv)};
  AttentionParams& p = pr.params;
  p.q = HeadsView::Dense(pr.q.data(), DType::kF32, 1, L.hq, pr.S_q, L.d);
  p.k = HeadsView::Dense(pr.k.data(), DType::kF32, 1, L.hkv, pr.S_kv, L.d);
  p.v = HeadsView::Dense(pr.v.data(), DType::kF32, 1, L.hkv, pr.S_kv, L.d);
  p.out = OutView::Dense(pr.out.data(), 1, L.hq, pr.S_q, L.d);
  p.mask.q_pos = pr.q_pos.data();
  p.mask.k_pos = pr.k_pos.data();
  p.mask.kv_valid = pr.valid.data();
  p.mask.causal = true;
  p.mask.window_left = L.window > 0 ? L.window - 1 : -1;
  p.mask.window_right = L.window > 0 ? 0 : -1;
  // Gemma 4 ("vision" bidirectional): the image overlay applies to sliding layers only.
  p.mask.q_block = L.window > 0 ? pr.q_blk.data() : nullptr;
  p.mask.k_block = L.window > 0 ? pr.k_blk.data() : nullptr;
  p.scale = 1.0f;
  pr.k16.resize(pr.k.size());
  pr.v16.resize(pr.v.size());
  EncodeFromF32(DType::kBF16, pr.k.data(), pr.k16.data(), pr.k.size());
  EncodeFromF32(DType::kBF16, pr.v.data(), pr.v16.data(), pr.v.size());
}

// The params at precision bf16: the same problem over the bf16 copies of K/V.
AttentionParams Bf16Params(const Problem& pr, const LayerShape& L) {
  AttentionParams p = pr.params;
  p.k = HeadsView::Dense(pr.k16.data(), DType::kBF16, 1, L.hkv, pr.S_kv, L.d);
  p.v = HeadsView::Dense(pr.v16.data(), DType::kBF16, 1, L.hkv, pr.S_kv, L.d);
  p.precision = AttentionPrecision::kBf16;
  return p;
}

double MedianMs(const std::function<void()>& fn, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A slice of the Gemma-4-12B MLP up projection (1024 of 15360 rows x 3840, bf16 weights) on a
// 64-token chunk (the GEMM) and on one token (the decode row-dot path), at matmul precision f32
// and bf16, at bf16 on the pair panels a model loaded for it packs (where the CPU has the dot
// product), and at f32 on the same weights widened to the f32 panels a model loaded for f32 packs
// of f32 weights, against LinearReference at that precision. Bound: f32 sums of `in` exact
// products, 4 sqrt(in) 2^-24 sum|x w| per output. Returns the number of mismatches.
int CheckLinear(ThreadPool& pool, std::mt19937& rng) {
  const int64_t out = 1024, in = 3840;
  std::normal_distribution<float> nd;
  std::vector<uint16_t> w(out * in);
  for (uint16_t& v : w) v = F32ToBf16(0.05f * nd(rng));
  const ops::WeightView wv{w.data(), DType::kBF16, out, in};
  ops::WeightView packed = wv;
  AlignedBuffer panels(ops::PairPanelWords(out, in) * sizeof(uint32_t));
  // Packing succeeds exactly where the CPU has the bf16 dot product, so `pairs` also says which path runs.
  if (ops::PackPairPanels(wv, panels.as<uint32_t>())) packed.pairs = panels.as<uint32_t>();
  ops::WeightView widened = wv;  // f32 panels (widening bf16 is exact)
  AlignedBuffer f32_panels(ops::F32PanelFloats(out, in) * sizeof(float));
  ops::PackF32Panels(wv, f32_panels.as<float>());
  widened.panels = f32_panels.as<float>();
  std::printf("\nLinear %lld x %lld, bf16 weights (GEMM at precision bf16: %s):\n", (long long)out, (long long)in,
              packed.pairs ? "AVX-512-BF16 dot product" : "f32 kernels on x rounded to bf16");
  int failures = 0;
  for (int64_t n : {64, 1}) {
    std::vector<float> x(n * in), y(n * out), ref(n * out);
    for (float& v : x) v = nd(rng);
    AlignedBuffer x_pairs(ops::GemmScratchWords(n, in) * sizeof(uint32_t));
    // variants: 0 f32 stored, 1 bf16 stored, 2 bf16 pair panels, 3 f32 panels
    for (int variant = 0; variant < 4; ++variant) {
      if (variant == 2 && packed.pairs == nullptr) continue;
      const ops::MatmulPrecision mp =
          variant == 0 || variant == 3 ? ops::MatmulPrecision::kF32 : ops::MatmulPrecision::kBf16;
      const bool bf16 = mp == ops::MatmulPrecision::kBf16;
      const ops::WeightView& v = variant == 2 ? packed : variant == 3 ? widened : wv;
      uint32_t* xp = variant == 2 ? x_pairs.as<uint32_t>() : nullptr;
      ops::Linear(v, x.data(), n, in, y.data(), out, &pool, mp, xp);
      ops::LinearReference(wv, x.data(), n, in, ref.data(), out, mp);
      double worst = 0;  // max over outputs of |fast - ref| / bound
      for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 0; o < out; ++o) {
          double mag = 0;
          for (int64_t i = 0; i < in; ++i) mag += std::fabs(double(x[t * in + i]) * Bf16ToF32(w[o * in + i]));
          const double bound = 4 * std::sqrt(double(in)) * std::ldexp(1.0, -24) * mag + 1e-30;
          worst = std::max(worst, std::fabs(double(y[t * out + o]) - ref[t * out + o]) / bound);
        }
      const double ms = MedianMs([&] { ops::Linear(v, x.data(), n, in, y.data(), out, &pool, mp, xp); }, 5);
      const bool ok = worst < 1;
      failures += !ok;
      std::printf("  %3lld token%s  precision %-4s %-7s  max|fast-ref| / bound = %.1e %s  %.3f ms (%.1f GFLOP/s)\n",
                  (long long)n, n == 1 ? " " : "s", bf16 ? "bf16" : "f32", variant >= 2 ? "panels" : "stored", worst,
                  ok ? "ok" : "MISMATCH", ms, 2.0 * n * out * in / ms / 1e6);
    }
  }
  return failures;
}

int SelfCheck() {
  std::mt19937 rng(7);
  ThreadPool pool(DefaultThreadCount());
  Arena scratch;
  AttentionContext ctx{&pool, &scratch};
  const LayerShape layers[] = {{"sliding (16q/8kv x 256, window 128)", 16, 8, 256, 128},
                               {"global  (16q/1kv x 512)", 16, 1, 512, 0}};
  std::printf("Tessera attention self-check (%d threads): Gemma-4-shaped attention layers on a 512-token\n"
              "prompt with a 96-token image block, fast kernels against the reference.\n\n",
              pool.num_threads());
  int failures = 0;
  for (const LayerShape& L : layers) {
    for (bool decode : {false, true}) {
      Problem pr;
      Build(pr, L, 512, decode, 200, 96, rng);
      for (AttentionPrecision precision : {AttentionPrecision::kF32, AttentionPrecision::kBf16}) {
        const bool bf16 = precision == AttentionPrecision::kBf16;
        AttentionParams fast = bf16 ? Bf16Params(pr, L) : pr.params;
        AttentionParams ref = fast;
        ref.out.data = pr.ref.data();
        Status st = Attention(fast, ctx);
        Status st_ref = Attention(ref, ctx, AttentionKernel::kReference);
        if (!st.ok() || !st_ref.ok()) {
          std::printf("error: %s%s\n", st.message().c_str(), st_ref.message().c_str());
          return 1;
        }
        double max_err = 0, max_v = 0;
        for (size_t i = 0; i < pr.out.size(); ++i) max_err = std::max(max_err, double(std::fabs(pr.out[i] - pr.ref[i])));
        for (uint16_t x : pr.v16) max_v = std::max(max_v, double(std::fabs(Bf16ToF32(x))));
        // f32: f32 sums against double. bf16: plus the two ways of rounding the weights (the
        // reference rounds normalized weights, the kernels each tile's numerators): 2^-7 max|v|.
        const double bound = 1e-4 + (bf16 ? std::ldexp(max_v, -7) : 0.0);
        const TileCensus c = CensusPrefillTiles(fast);
        const double ms = MedianMs([&] { (void)Attention(fast, ctx); }, 5);
        const bool ok = max_err < bound;
        failures += !ok;
        std::printf("%-38s %-7s %-4s kernel=%-7s tiles empty/full/partial=%4lld/%4lld/%4lld  max|fast-ref|=%.2e %s  "
                    "%.3f ms\n",
                    L.name, decode ? "decode" : "prefill", AttentionPrecisionName(precision),
                    AttentionKernelName(ChooseAttentionKernel(fast)), (long long)c.empty, (long long)c.full,
                    (long long)c.partial, max_err, ok ? "ok" : "MISMATCH", ms);
      }
    }
  }
  failures += CheckLinear(pool, rng);
  std::printf("\n%s\n", failures ? "self-check FAILED" : "self-check passed");
  return failures ? 1 : 0;
}

}  // namespace

int SelfCheckCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv, {}, {});  // takes no arguments
  if (!parsed.ok()) {
    std::fprintf(stderr, "tessera selfcheck: %s\n", parsed.status().message().c_str());
    return 2;
  }
  return SelfCheck();
}

}  // namespace tessera::cli
