// Linear (y = x W^T) on Gemma-width weights: the row-dot path vs the blocked GEMM for token counts
// from decode (1) to a prefill chunk (256, 1024), beside the machine's roofline measured in the same run
// (read bandwidth, FMA peak). Picks the crossover `kGemmMinTokens` in ops/linear.cc. Then Linear as
// a model runs it, on the stored weights (row-dot below the crossover, the GEMM packing per call
// above) and on the panels a model loaded for that precision packs once: f32 weights at matmul
// precision f32 on f32 panels (WeightView::panels), bf16 weights at precision bf16 (x rounded to
// bf16; AVX-512-BF16's dot product where the CPU has it) on pair panels (WeightView::pairs), against
// the f32 FMA or bf16 dot-product peak and the read bandwidth. Then block-quantized weights (GGUF
// Q4_0 ... Q6_K, random blocks): decode (1-3 tokens, the int8 row-dot path) as weight GB/s against
// the read bandwidth, prefill (the GEMM on dequantized panels) as GFLOP/s against the FMA peak.
// The quant-stream section: one decode token through a stack of such weights far larger than the
// caches, every row from memory as in a model's decode step, against the read bandwidth; the
// quant-pages section runs it on 4 KiB and on 2 MiB pages, alternated; the quant-verify section at
// n = 1..9, 12 and 16 token rows computed as decode steps (a speculative verification), as the cost over one row.
// TESSERA_SIMD=avx2|generic picks the quantized dot kernels as it does the f32 ones.
//
// The amx section: Linear at precision bf16 on pair panels as a model runs it, the AMX tiles
// (ops/bf16_amx.h) against the AVX-512-BF16 dot-product kernels, alternated call by call, for
// Gemma-3-1B and Gemma-4 widths from decode to a 512-token prefill chunk. The amx-quant section:
// quantized prefill, the int8 VNNI GEMM against AMX tiles on per-block dequantized bf16 panels.
//
// The small-batch section: Linear as a model runs it for n = 1..16 token rows (speculative
// verification, a serving batch), each weight kind on one Gemma-4-width shape, as the cost of n rows
// over one row's and as weight GB/s against the read bandwidth: a kernel that streams the weights
// once for all rows stays near 1x while memory-bound.
//
//   build/release/tessera_bench_linear [--threads N] [--reps R]
//       [--section all|dense|quant|quant-compute|quant-stream|quant-pages|quant-decode|quant-verify|
//                  quant-prefill|quant-crossover|small-batch|amx|amx-quant]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "roofline.h"
#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"
#include "tessera/quant.h"

using namespace tessera;

namespace {

// Random blocks of type t for a [out, in] matrix, with sane f16 scales (0.001-0.002) where each
// block keeps them (d first, Q4_K/Q5_K dmin next; Q6_K's d last; Q4_1/Q5_1 a minimum of -8 d next).
std::vector<uint8_t> RandomQuantWeight(std::mt19937& rng, QuantType t, int64_t out, int64_t in) {
  const int64_t blocks = out * (in / QuantBlockElems(t)), bb = QuantBlockBytes(t);
  std::vector<uint8_t> w(blocks * bb);
  for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
  const int64_t d_at = t == QuantType::kQ6_K ? bb - 2 : 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t d = F32ToF16(0.001f * (1 + (rng() % 1000) / 1000.0f));
    std::memcpy(w.data() + b * bb + d_at, &d, 2);
    if (t == QuantType::kQ4_K || t == QuantType::kQ5_K) std::memcpy(w.data() + b * bb + 2, &d, 2);
    if (t == QuantType::kQ4_1 || t == QuantType::kQ5_1) {
      const uint16_t m = F32ToF16(-8 * F16ToF32(d));
      std::memcpy(w.data() + b * bb + 2, &m, 2);
    }
  }
  return w;
}

const QuantType kQuantTypes[] = {QuantType::kQ4_0, QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ6_K,
                                 QuantType::kQ5_0, QuantType::kQ5_K, QuantType::kQ4_1, QuantType::kQ5_1};

// One thread's decode rate on a weight that stays in L2 (256 x 4096): whether a core's kernel
// outruns its share of the read bandwidth, whatever else the machine is doing to memory.
void RunQuantCompute(int reps, double bw1) {
  // n tokens a call on the row dot (the small-batch kernels: each weight block unpacked once for
  // all n); W GB/s is the weight bytes of a call over its time, so n > 1 shows the per-token cost.
  // (n up to 9: a verification step of k = 8 drafts; 9 is two calls, 8 + 1.)
  const int64_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  constexpr int kNs = 9;
  std::printf("\n%-24s %-5s %12s %14s", "cache-resident, 1 thread", "type", "W GB/s", "x 1-thread bw");
  for (int k = 1; k < kNs; ++k) std::printf("  n=%lld GB/s", static_cast<long long>(ns[k]));
  std::printf("\n");
  std::mt19937 rng(3);
  const int64_t out = 256, in = 4096;
  std::vector<float> x(9 * in), y(9 * out);
  for (float& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  for (QuantType t : kQuantTypes) {
    const std::vector<uint8_t> w = RandomQuantWeight(rng, t, out, in);
    ops::WeightView wv{w.data(), DType::kF32, out, in};
    wv.quant = t;
    double gbs[kNs];
    for (int k = 0; k < kNs; ++k) {
      const double ms = bench::MedianMs(reps, [&] {
        for (int r = 0; r < 20; ++r) ops::LinearRowDot(wv, x.data(), ns[k], in, y.data(), out, nullptr);
      });
      gbs[k] = 20.0 * double(w.size()) / ms / 1e6;
    }
    std::printf("%-24s %-5s %12.1f %14.2f", "256 x 4096", QuantTypeName(t), gbs[0], bw1 > 0 ? gbs[0] / bw1 : 0.0);
    for (int k = 1; k < kNs; ++k) std::printf(" %11.1f", gbs[k]);
    std::printf("\n");
  }
}

// The quantized section: every type on the Gemma-4-12B MLP shapes (and Gemma 3 1B's, for the
// 32-value types: 1152 is no multiple of 256).
void RunQuant(ThreadPool& pool, int reps, double bw, double peak) {
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {{"gemma4-12b mlp up", 15360, 3840}, {"gemma4-12b mlp down", 3840, 15360},
                          {"gemma3-1b mlp up", 6912, 1152}};
  std::printf("\n%-24s %-5s %5s %12s %10s %10s %12s %10s %12s %10s\n", "quantized weight", "type", "n", "row-dot ms",
              "gemm ms", "Linear ms", "W GB/s", "% read bw", "GFLOP/s", "% FMA peak");
  std::mt19937 rng(2);
  for (const Shape& s : shapes)
    for (QuantType t : kQuantTypes) {
      if (s.in % QuantBlockElems(t) != 0) continue;
      const std::vector<uint8_t> w = RandomQuantWeight(rng, t, s.out, s.in);
      ops::WeightView wv{w.data(), DType::kF32, s.out, s.in};
      wv.quant = t;
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (int64_t n : {1, 2, 3, 4, 6, 8, 16, 64, 256}) {
        std::vector<float> x(n * s.in), y(n * s.out);
        for (float& v : x) v = nd(rng);
        // Both paths where either could be the faster (the crossover kGemmMinTokensQuant), then Linear.
        const double row = n > 16 ? 0.0 : bench::MedianMs(reps, [&] {
          ops::LinearRowDot(wv, x.data(), n, s.in, y.data(), s.out, &pool);
        });
        const double gemm = n < 2 ? 0.0 : bench::MedianMs(reps, [&] { ops::Gemm(wv, x.data(), n, s.in, y.data(), s.out, &pool); });
        const double ms = bench::MedianMs(reps, [&] { ops::Linear(wv, x.data(), n, s.in, y.data(), s.out, &pool); });
        const double gbs = double(w.size()) / ms / 1e6, gflops = 2.0 * n * s.out * s.in / ms / 1e6;
        std::printf("%-24s %-5s %5lld %12.3f %10.3f %10.3f %12.1f %10.0f %12.1f %10.0f\n", s.name, QuantTypeName(t),
                    (long long)n, row, gemm, ms, gbs, bw > 0 ? 100 * gbs / bw : 0.0, gflops,
                    peak > 0 ? 100 * gflops / peak : 0.0);
      }
    }
}

// Eight Gemma-4-12B MLP up/down pairs of type t in buffers of `pages`: far larger than the caches.
struct QuantStack {
  static constexpr int64_t kHidden = 3840, kInter = 15360, kLayers = 8;
  std::vector<AlignedBuffer> mats;  // up, down, up, ...
  int64_t bytes = 0;

  ops::WeightView View(size_t i, QuantType t) const {
    const bool up = i % 2 == 0;
    ops::WeightView wv{mats[i].as<uint8_t>(), DType::kF32, up ? kInter : kHidden, up ? kHidden : kInter};
    wv.quant = t;
    return wv;
  }
};

// One stack per kind of pages, the same weights in each.
std::vector<QuantStack> RandomQuantStacks(std::mt19937& rng, QuantType t, const std::vector<AlignedBuffer::Pages>& pages) {
  std::vector<QuantStack> stacks(pages.size());
  for (int64_t i = 0; i < 2 * QuantStack::kLayers; ++i) {
    const bool up = i % 2 == 0;
    const std::vector<uint8_t> w = RandomQuantWeight(rng, t, up ? QuantStack::kInter : QuantStack::kHidden,
                                                     up ? QuantStack::kHidden : QuantStack::kInter);
    for (size_t k = 0; k < pages.size(); ++k) {
      stacks[k].mats.emplace_back(w.size(), pages[k]);
      std::memcpy(stacks[k].mats.back().data(), w.data(), w.size());
      stacks[k].bytes += int64_t(w.size());
    }
  }
  return stacks;
}

// Decode as a model streams it: one token through a stack of Gemma-4-12B MLP weights (up, then
// down, QuantStack::kLayers times; far larger than the caches), so every row comes from memory as
// in a real decode step, against the read bandwidth probed with the same threads. With `pages`, the
// same stack on 4 KiB pages and on 2 MiB transparent huge pages, alternated (the quant-pages
// section).
void RunQuantStream(ThreadPool& pool, int reps, double bw, bool pages) {
  std::printf("\n%-24s %-5s %-6s %10s %12s %10s\n", "decode from memory", "type", "pages", "ms/token", "W GB/s",
              "% read bw");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(QuantStack::kInter), y(QuantStack::kInter);
  for (float& v : x) v = nd(rng);
  using Pages = AlignedBuffer::Pages;
  std::vector<Pages> kinds = {Pages::kSmall};
  if (pages) kinds.push_back(Pages::kHuge);
  for (QuantType t : kQuantTypes) {
    if (QuantStack::kHidden % QuantBlockElems(t) != 0) continue;
    const std::vector<QuantStack> stacks = RandomQuantStacks(rng, t, kinds);
    // One token through stack k, timed; the stacks take turns, one token each per rep.
    auto token_ms = [&](size_t k) {
      return bench::TimeMs([&] {
        for (size_t i = 0; i < stacks[k].mats.size(); ++i) {
          const ops::WeightView wv = stacks[k].View(i, t);
          ops::Linear(wv, x.data(), 1, wv.in, y.data(), wv.out, &pool);
        }
      });
    };
    std::vector<std::vector<double>> ms(kinds.size());
    for (size_t k = 0; k < kinds.size(); ++k) token_ms(k);  // warm-up
    for (int r = 0; r < reps; ++r)
      for (size_t k = 0; k < kinds.size(); ++k) ms[k].push_back(token_ms(k));
    for (size_t k = 0; k < kinds.size(); ++k) {
      const double med = bench::Median(ms[k]), gbs = double(stacks[k].bytes) / med / 1e6;
      std::printf("%-24s %-5s %-6s %10.2f %12.1f %10.0f\n", "gemma4-12b mlp x 8", QuantTypeName(t),
                  kinds[k] == Pages::kHuge ? "2 MiB" : "4 KiB", med, gbs, bw > 0 ? 100 * gbs / bw : 0.0);
    }
  }
}

// The quant-verify section: a speculative verification's matrices, n = 1..9, 12 and 16 token rows
// computed as decode steps (rows_as_steps: the row dots at any n), every weight from memory (the
// quant-stream stack on 2 MiB pages). Memory-bound, n rows cost about one row's time; the cost over
// n = 1 grows once the per-token integer work outruns the stream, or where the weights are read or
// unpacked more than once (more tokens than the kernel takes in one pass).
void RunQuantVerify(ThreadPool& pool, int reps) {
  constexpr int kNs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16};
  constexpr int kMaxN = 16, kCount = sizeof(kNs) / sizeof(kNs[0]);
  std::printf("\n%-24s %-5s %9s", "verify from memory", "type", "n=1 ms");
  for (int j = 1; j < kCount; ++j) std::printf("  x n=%-2d", kNs[j]);
  std::printf("\n");
  std::mt19937 rng(7);
  std::vector<float> x(kMaxN * QuantStack::kInter), y(kMaxN * QuantStack::kInter);
  for (float& v : x) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  AlignedBuffer scratch(ops::GemmScratchWords(kMaxN, QuantStack::kInter) * 4);  // as a model's x_pairs
  for (QuantType t : kQuantTypes) {
    if (QuantStack::kHidden % QuantBlockElems(t) != 0) continue;
    const QuantStack stack = std::move(RandomQuantStacks(rng, t, {AlignedBuffer::Pages::kHuge})[0]);
    auto step_ms = [&](int n) {
      return bench::TimeMs([&] {
        for (size_t i = 0; i < stack.mats.size(); ++i) {
          const ops::WeightView wv = stack.View(i, t);
          ops::Linear(wv, x.data(), n, wv.in, y.data(), wv.out, &pool, ops::MatmulPrecision::kF32,
                      scratch.as<uint32_t>(), /*rows_as_steps=*/true);
        }
      });
    };
    std::vector<double> ms[kCount];
    step_ms(1);  // warm-up
    for (int r = 0; r < reps; ++r)  // the token counts take turns, one step each per rep
      for (int j = 0; j < kCount; ++j) ms[j].push_back(step_ms(kNs[j]));
    const double one = bench::Median(ms[0]);
    std::printf("%-24s %-5s %9.2f", "gemma4-12b mlp x 8", QuantTypeName(t), one);
    for (int j = 1; j < kCount; ++j) std::printf(" %7.2f", bench::Median(ms[j]) / one);
    std::printf("\n");
  }
}

// The quant-decode section: the matrices of one Gemma-3-1B decode step as a Q4_0 GGUF holds them
// (26 layers of q, k, v, o, gate, up, down in Q4_0; the tied 262144-row LM head in Q8_0), one token,
// every weight from memory, against the read bandwidth: one buffer in file order on 2 MiB pages, as
// the model maps a GGUF. Small matrices (k and v: 256 rows) make the step more than the kernel's
// streaming rate: each call's dispatch, and each parallel item's start before its prefetch runs
// ahead. Two ways, alternated token by token: a Linear call per matrix, and q/k/v and gate/up each as
// one LinearBatch (one dispatch, items over all their rows); the time of each kind of matrix too.
void RunQuantDecode(ThreadPool& pool, int reps, double bw) {
  const int64_t layers = 26, hidden = 1152, q_out = 1024, kv_out = 256, inter = 6912, vocab = 262144;
  const std::pair<int64_t, int64_t> shapes[7] = {{q_out, hidden}, {kv_out, hidden}, {kv_out, hidden}, {hidden, q_out},
                                                 {inter, hidden}, {inter, hidden}, {hidden, inter}};
  std::vector<ops::WeightView> mats;  // per layer: q, k, v, o, gate, up, down; then the head
  int64_t bytes = 0;
  auto add = [&](QuantType t, int64_t out, int64_t in) {
    mats.push_back(ops::WeightView{reinterpret_cast<const void*>(bytes), DType::kF32, out, in});
    mats.back().quant = t;
    bytes += QuantRowBytes(t, in) * out;
  };
  for (int64_t l = 0; l < layers; ++l)
    for (auto [out, in] : shapes) add(QuantType::kQ4_0, out, in);
  add(QuantType::kQ8_0, vocab, hidden);
  AlignedBuffer file(bytes, AlignedBuffer::Pages::kHuge);
  std::mt19937 rng(6);
  for (ops::WeightView& m : mats) {
    const std::vector<uint8_t> w = RandomQuantWeight(rng, m.quant, m.out, m.in);
    m.data = file.as<uint8_t>() + reinterpret_cast<intptr_t>(m.data);
    std::memcpy(const_cast<void*>(m.data), w.data(), w.size());
  }
  std::vector<float> x(inter), y[7];
  for (int i = 0; i < 7; ++i) y[i].resize(shapes[i].first);
  std::vector<float> logits(vocab);
  for (float& e : x) e = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  // kinds: 0 q/k/v, 1 o, 2 gate/up, 3 down, 4 head; ms per kind accumulated over the step
  auto token = [&](bool batched, double* kind_ms) {
    auto timed = [&](int kind, auto&& f) { kind_ms[kind] += bench::TimeMs(f); };
    for (int64_t l = 0; l < layers; ++l) {
      const ops::WeightView* m = &mats[7 * l];
      auto job = [&](int i) { return ops::LinearJob{m[i], x.data(), 1, m[i].in, y[i].data(), m[i].out}; };
      auto one = [&](int i) { ops::Linear(m[i], x.data(), 1, m[i].in, y[i].data(), m[i].out, &pool); };
      timed(0, [&] {
        const ops::LinearJob jobs[3] = {job(0), job(1), job(2)};
        batched ? ops::LinearBatch(jobs, 3, &pool) : (one(0), one(1), one(2));
      });
      timed(1, [&] { one(3); });
      timed(2, [&] {
        const ops::LinearJob jobs[2] = {job(4), job(5)};
        batched ? ops::LinearBatch(jobs, 2, &pool) : (one(4), one(5));
      });
      timed(3, [&] { one(6); });
    }
    timed(4, [&] { ops::Linear(mats.back(), x.data(), 1, hidden, logits.data(), vocab, &pool); });
  };
  std::vector<double> ms[2][5];
  for (int b = 0; b < 2; ++b) {  // warm-up
    double k[5] = {};
    token(b == 1, k);
  }
  for (int r = 0; r < reps; ++r)
    for (int b = 0; b < 2; ++b) {
      double k[5] = {};
      token(b == 1, k);
      for (int i = 0; i < 5; ++i) ms[b][i].push_back(k[i]);
    }
  const int kind_of[7] = {0, 0, 0, 1, 2, 2, 3};  // a layer's matrices; the head is kind 4
  int64_t kind_bytes[5] = {};
  for (size_t i = 0; i < mats.size(); ++i)
    kind_bytes[i + 1 == mats.size() ? 4 : kind_of[i % 7]] += QuantRowBytes(mats[i].quant, mats[i].in) * mats[i].out;
  const char* kinds[5] = {"q/k/v", "o", "gate/up", "down", "head q8_0"};
  std::printf("\n%-26s %-10s %10s %10s %10s\n", "gemma3-1b q4_0 decode step", "matrices", "ms/token", "W GB/s",
              "% read bw");
  for (int b = 0; b < 2; ++b) {
    double total = 0;
    for (int i = 0; i < 5; ++i) {
      const double med = bench::Median(ms[b][i]), gbs = double(kind_bytes[i]) / med / 1e6;
      total += med;
      std::printf("%-26s %-10s %10.2f %10.1f %10.0f\n", b ? "q/k/v, gate/up batched" : "a Linear call per matrix",
                  kinds[i], med, gbs, bw > 0 ? 100 * gbs / bw : 0.0);
    }
    const double gbs = double(bytes) / total / 1e6;
    std::printf("%-26s %-10s %10.2f %10.1f %10.0f\n", "", "all", total, gbs, bw > 0 ? 100 * gbs / bw : 0.0);
  }
}

// Linear as a model runs it (bf16 on pair panels, f32 on f32 panels, quantized on the stored blocks)
// for n = 1..16 on one [10240, 2560] weight.
void RunSmallBatch(ThreadPool& pool, int reps, double bw) {
  const int64_t out = 10240, in = 2560;
  std::printf("small batch, weight [%lld, %lld]\n%-8s %4s %10s %10s %10s %10s\n", (long long)out, (long long)in, "kind",
              "n", "ms", "x n=1", "W GB/s", "% read bw");
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> wf(out * in);
  for (float& v : wf) v = nd(rng);
  struct Kind {
    const char* name;
    DType dt;
    QuantType q;
  };
  const Kind kinds[] = {{"bf16", DType::kBF16, QuantType::kNone}, {"f32", DType::kF32, QuantType::kNone},
                        {"Q4_0", DType::kF32, QuantType::kQ4_0},  {"Q8_0", DType::kF32, QuantType::kQ8_0},
                        {"Q4_K", DType::kF32, QuantType::kQ4_K},  {"Q6_K", DType::kF32, QuantType::kQ6_K},
                        {"Q5_0", DType::kF32, QuantType::kQ5_0},  {"Q5_K", DType::kF32, QuantType::kQ5_K},
                        {"Q4_1", DType::kF32, QuantType::kQ4_1},  {"Q5_1", DType::kF32, QuantType::kQ5_1}};
  for (const Kind& k : kinds) {
    std::vector<uint8_t> w;
    if (k.q != QuantType::kNone) {
      w = RandomQuantWeight(rng, k.q, out, in);
    } else {
      w.resize(wf.size() * DTypeSize(k.dt));
      EncodeFromF32(k.dt, wf.data(), w.data(), wf.size());
    }
    ops::WeightView wv{w.data(), k.dt, out, in};
    wv.quant = k.q;
    const bool bf16 = k.dt == DType::kBF16;
    const auto precision = bf16 ? ops::MatmulPrecision::kBf16 : ops::MatmulPrecision::kF32;
    AlignedBuffer panels(k.q != QuantType::kNone ? 64
                         : bf16                  ? ops::PairPanelWords(out, in) * 4
                                                 : ops::F32PanelFloats(out, in) * 4);
    if (k.q == QuantType::kNone && !bf16) {
      ops::PackF32Panels(wv, panels.as<float>());
      wv.panels = panels.as<float>();
    } else if (bf16 && ops::PackPairPanels(wv, panels.as<uint32_t>())) {
      wv.pairs = panels.as<uint32_t>();
    }
    double one = 0;
    for (int64_t n = 1; n <= 16; ++n) {
      std::vector<float> x(n * in), y(n * out);
      for (float& v : x) v = nd(rng);
      AlignedBuffer x_pairs(ops::GemmScratchWords(n, in) * 4);
      const double ms = bench::MedianMs(reps, [&] {
        ops::Linear(wv, x.data(), n, in, y.data(), out, &pool, precision, x_pairs.as<uint32_t>());
      });
      if (n == 1) one = ms;
      const double gbs = double(w.size()) / ms / 1e6;
      std::printf("%-8s %4lld %10.3f %10.2f %10.1f %10.0f\n", k.name, (long long)n, ms, ms / one, gbs,
                  bw > 0 ? 100 * gbs / bw : 0.0);
    }
  }
}

bool ParseArgs(int argc, char** argv, int* threads, int* reps, std::string* section) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") {
      *threads = std::atoi(argv[i + 1]);
    } else if (a == "--reps") {
      *reps = std::atoi(argv[i + 1]);
    } else if (a == "--section") {
      *section = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

// Prefill on quantized weights: the GEMM on dequantized f32 panels (Linear without the x_pairs
// scratch) against the int8 GEMM (Linear with it, as the model calls it, on CPUs with AVX-512 VNNI)
// with its 16-token tiles on VNNI and, where the CPU has AMX-INT8, on AMX tiles, and its one-byte
// mode (precision int8), at n tokens, timed alternately call by call (A, B, C, D, A, ...) so that a
// loaded machine hurts all alike; medians, GFLOP/s and the ratios.
void RunQuantPrefill(ThreadPool& pool, int reps, double peak, int64_t n) {
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {{"gemma4-12b mlp up", 15360, 3840}, {"gemma4-12b mlp down", 3840, 15360},
                          {"gemma3-1b mlp up", 6912, 1152}, {"gemma3-1b mlp down", 1152, 6912}};
  const QuantType types[] = {QuantType::kQ4_0, QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ6_K,
                             QuantType::kQ5_0, QuantType::kQ5_K, QuantType::kQ4_1, QuantType::kQ5_1};
  std::printf("\nprefill, n = %lld tokens (f32 FMA peak %.1f GFLOP/s)\n"
              "%-24s %-5s %12s %10s %12s %10s %8s %12s %10s %8s %12s %10s %8s\n",
              (long long)n, peak, "quantized weight", "type", "f32 panel ms", "GFLOP/s", "int8 vnni ms", "GFLOP/s",
              "speedup", "1 byte ms", "GFLOP/s", "2b/1b", "int8 amx ms", "GFLOP/s", "amx/vnni");
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const bool amx_int8 = ops::QuantGemmAmxActive();
  for (const Shape& s : shapes)
    for (QuantType t : types) {
      if (s.in % QuantBlockElems(t) != 0) continue;
      const std::vector<uint8_t> w = RandomQuantWeight(rng, t, s.out, s.in);
      ops::WeightView wv{w.data(), DType::kF32, s.out, s.in};
      wv.quant = t;
      std::vector<float> x(n * s.in), y(n * s.out);
      for (float& v : x) v = nd(rng);
      AlignedBuffer scratch(ops::GemmScratchWords(n, s.in) * 4);
      std::vector<double> f32_ms, vnni_ms, one_ms, amx_ms;
      auto f32 = [&] { ops::Linear(wv, x.data(), n, s.in, y.data(), s.out, &pool); };
      auto int8 = [&] {
        ops::Linear(wv, x.data(), n, s.in, y.data(), s.out, &pool, ops::MatmulPrecision::kF32, scratch.as<uint32_t>());
      };
      auto one = [&] {
        ops::Linear(wv, x.data(), n, s.in, y.data(), s.out, &pool, ops::MatmulPrecision::kInt8, scratch.as<uint32_t>());
      };
      // The int8 GEMM with its 16-token tiles on AVX-512 VNNI, then on AMX-INT8 where the CPU has it.
      for (int r = 0; r < reps; ++r) {
        f32_ms.push_back(bench::MedianMs(1, f32));
        ops::EnableQuantGemmAmx(false);
        vnni_ms.push_back(bench::MedianMs(1, int8));
        one_ms.push_back(bench::MedianMs(1, one));
        ops::EnableQuantGemmAmx(true);
        if (amx_int8) amx_ms.push_back(bench::MedianMs(1, int8));
      }
      const double a = bench::Median(f32_ms), b = bench::Median(vnni_ms), flops = 2.0 * n * s.out * s.in;
      const double o = bench::Median(one_ms);
      std::printf("%-24s %-5s %12.2f %10.1f %12.2f %10.1f %8.2f %12.2f %10.1f %8.2f", s.name, QuantTypeName(t), a,
                  flops / a / 1e6, b, flops / b / 1e6, a / b, o, flops / o / 1e6, b / o);
      if (amx_int8) {
        const double c = bench::Median(amx_ms);
        std::printf(" %12.2f %10.1f %8.2f", c, flops / c / 1e6, b / c);
      }
      std::printf("\n");
    }
}

// Where quantized Linear should switch from the row dots to the int8 GEMM (kGemmMinTokensQuant):
// both paths at n = 4..64 tokens, the GEMM with two activation bytes (default precision) and one
// (precision int8), timed alternately call by call; medians and row-dot / GEMM (above 1: the GEMM
// is the faster). Only on CPUs where the int8 GEMM runs.
void RunQuantCrossover(ThreadPool& pool, int reps) {
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {{"gemma4-12b mlp up", 15360, 3840}, {"gemma4-12b mlp down", 3840, 15360},
                          {"gemma3-1b mlp up", 6912, 1152}, {"gemma3-1b mlp down", 1152, 6912}};
  const QuantType types[] = {QuantType::kQ4_0, QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ6_K};
  std::printf("\nrow-dot vs int8 GEMM (activations in two bytes, or one as at precision int8)\n"
              "%-24s %-5s %4s %12s %12s %12s %10s %10s\n",
              "quantized weight", "type", "n", "row-dot ms", "gemm 2B ms", "gemm 1B ms", "row/2B", "row/1B");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<int64_t> ns;
  for (int64_t n = 4; n <= 32; ++n) ns.push_back(n);
  for (int64_t n : {40, 48, 56, 64}) ns.push_back(n);
  for (const Shape& s : shapes)
    for (QuantType t : types) {
      if (s.in % QuantBlockElems(t) != 0) continue;
      const std::vector<uint8_t> w = RandomQuantWeight(rng, t, s.out, s.in);
      ops::WeightView wv{w.data(), DType::kF32, s.out, s.in};
      wv.quant = t;
      for (int64_t n : ns) {
        std::vector<float> x(n * s.in), y(n * s.out);
        for (float& v : x) v = nd(rng);
        AlignedBuffer scratch(ops::GemmScratchWords(n, s.in) * 4);
        uint32_t* sc = scratch.as<uint32_t>();
        std::vector<double> ms[3];
        // The row dots as a model calls them (with the scratch: the weights read once for all n).
        auto row = [&] { ops::Linear(wv, x.data(), n, s.in, y.data(), s.out, &pool, ops::MatmulPrecision::kF32, sc, true); };
        auto gemm = [&](ops::MatmulPrecision p) { ops::LinearQuantGemm(wv, x.data(), n, s.in, y.data(), s.out, &pool, sc, p); };
        if (!ops::LinearQuantGemm(wv, x.data(), n, s.in, y.data(), s.out, &pool, sc)) {
          std::printf("no int8 GEMM on this CPU\n");
          return;
        }
        for (int r = 0; r < reps; ++r) {
          ms[0].push_back(bench::MedianMs(1, row));
          ms[1].push_back(bench::MedianMs(1, [&] { gemm(ops::MatmulPrecision::kF32); }));
          ms[2].push_back(bench::MedianMs(1, [&] { gemm(ops::MatmulPrecision::kInt8); }));
        }
        const double a = bench::Median(ms[0]), b = bench::Median(ms[1]), c = bench::Median(ms[2]);
        std::printf("%-24s %-5s %4lld %12.3f %12.3f %12.3f %10.2f %10.2f\n", s.name, QuantTypeName(t), (long long)n, a, b,
                    c, a / b, a / c);
      }
    }
}

// Median ms of `reps` alternated calls of Linear with AMX off, then on, after one warm-up each.
void RunAmx(ThreadPool& pool, int reps, double dot_peak) {
  if (!ops::Bf16AmxActive()) {
    std::printf("amx: no AMX-BF16 on this CPU (or TESSERA_AMX=0); nothing to compare\n");
    return;
  }
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {{"gemma3-1b q", 1024, 1152},          {"gemma3-1b mlp up", 6912, 1152},
                          {"gemma3-1b mlp down", 1152, 6912},   {"gemma4-12b q (sliding)", 4096, 3840},
                          {"gemma4-12b mlp up", 15360, 3840},  {"gemma4-12b mlp down", 3840, 15360}};
  std::printf("bf16 Linear on pair panels: dot product (vdpbf16ps) vs AMX (tdpbf16ps), alternated; dot peak %.1f GFLOP/s\n",
              dot_peak);
  std::printf("%-24s %5s %10s %10s %12s %12s %8s\n", "weight", "n", "dot ms", "amx ms", "dot GFLOP/s", "amx GFLOP/s",
              "amx x");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (const Shape& s : shapes) {
    std::vector<uint16_t> w(s.out * s.in);
    for (uint16_t& v : w) v = F32ToBf16(nd(rng));
    ops::WeightView wv{w.data(), DType::kBF16, s.out, s.in};
    AlignedBuffer panels(ops::PairPanelWords(s.out, s.in) * 4);
    if (!ops::PackPairPanels(wv, panels.as<uint32_t>())) return;
    wv.pairs = panels.as<uint32_t>();
    for (int64_t n : {1, 8, 32, 128, 512}) {
      std::vector<float> x(n * s.in), y(n * s.out);
      for (float& v : x) v = nd(rng);
      AlignedBuffer x_pairs(ops::GemmScratchWords(n, s.in) * 4);
      auto call = [&](bool amx) {
        ops::EnableBf16Amx(amx);
        return bench::TimeMs([&] {
          ops::Linear(wv, x.data(), n, s.in, y.data(), s.out, &pool, ops::MatmulPrecision::kBf16,
                      x_pairs.as<uint32_t>());
        });
      };
      call(false), call(true);
      std::vector<double> dot, amx;
      for (int r = 0; r < reps; ++r) dot.push_back(call(false)), amx.push_back(call(true));
      const double d = bench::Median(dot), a = bench::Median(amx), flops = 2.0 * n * s.out * s.in;
      std::printf("%-24s %5lld %10.3f %10.3f %12.1f %12.1f %8.2f\n", s.name, (long long)n, d, a, flops / d / 1e6,
                  flops / a / 1e6, d / a);
    }
  }
  ops::EnableBf16Amx(true);
}

// Quantized prefill at precision bf16: the int8 VNNI GEMM (ops/quant_gemm.h) against AMX tiles on
// per-block dequantized bf16 pair panels (Bf16AmxActive), the first through Linear as a model calls
// it, the second through Gemm (Linear takes it only from QuantAmxMinTokens(), picked from this table),
// alternated call by call after one warm-up each; medians of `reps`.
void RunAmxQuant(ThreadPool& pool, int reps) {
  if (!ops::Bf16AmxActive()) {
    std::printf("amx-quant: no AMX-BF16 on this CPU (or TESSERA_AMX=0); nothing to compare\n");
    return;
  }
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {{"gemma3-1b mlp up", 6912, 1152}, {"gemma3-1b mlp down", 1152, 6912},
                          {"gemma4-12b mlp up", 15360, 3840}, {"gemma4-12b mlp down", 3840, 15360}};
  std::printf("quantized Linear, prefill: int8 VNNI GEMM vs AMX on dequantized bf16 panels, alternated\n");
  std::printf("%-24s %-5s %5s %10s %10s %12s %12s %8s\n", "weight", "type", "n", "vnni ms", "amx ms", "vnni GFLOP/s",
              "amx GFLOP/s", "amx x");
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Shape& s : shapes)
    for (QuantType t : kQuantTypes) {
      if (s.in % QuantBlockElems(t) != 0) continue;
      const std::vector<uint8_t> w = RandomQuantWeight(rng, t, s.out, s.in);
      ops::WeightView wv{w.data(), DType::kF32, s.out, s.in};
      wv.quant = t;
      for (int64_t n : {16, 32, 48, 64, 96, 128, 512}) {
        std::vector<float> x(n * s.in), y(n * s.out);
        for (float& v : x) v = nd(rng);
        AlignedBuffer scratch(ops::GemmScratchWords(n, s.in) * 4);
        auto call = [&](bool amx) {  // AMX: Gemm itself, which takes it below QuantAmxMinTokens() too
          ops::EnableBf16Amx(amx);
          return bench::TimeMs([&] {
            if (amx) {
              ops::Gemm(wv, x.data(), n, s.in, y.data(), s.out, &pool, ops::MatmulPrecision::kBf16,
                        scratch.as<uint32_t>());
            } else {
              ops::Linear(wv, x.data(), n, s.in, y.data(), s.out, &pool, ops::MatmulPrecision::kBf16,
                          scratch.as<uint32_t>());
            }
          });
        };
        call(false), call(true);
        std::vector<double> vnni, amx;
        for (int r = 0; r < reps; ++r) vnni.push_back(call(false)), amx.push_back(call(true));
        const double v = bench::Median(vnni), a = bench::Median(amx), flops = 2.0 * n * s.out * s.in;
        std::printf("%-24s %-5s %5lld %10.3f %10.3f %12.1f %12.1f %8.2f\n", s.name, QuantTypeName(t), (long long)n, v, a,
                    flops / v / 1e6, flops / a / 1e6, v / a);
      }
    }
  ops::EnableBf16Amx(true);
}

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = bench::CheckArgs(argc, argv,
                                      " [--threads N] [--reps R] [--section all|dense|quant|quant-compute|quant-stream|"
                                      "quant-pages|quant-decode|quant-verify|quant-prefill|quant-crossover|small-batch|"
                                      "amx|amx-quant]\n");
      rc >= 0)
    return rc;
  int threads = DefaultThreadCount(), reps = 5;
  std::string section = "all";
  if (!ParseArgs(argc, argv, &threads, &reps, &section)) return 2;
  const double bw1 = bench::ReadBandwidthGBs(1), bwn = bench::ReadBandwidthGBs(threads);
  const double peak = bench::FmaPeakGflops(threads), dot_peak = bench::Bf16DotPeakGflops(threads);
  std::printf("roofline: read bandwidth %.1f GB/s (1 thread), %.1f GB/s (%d threads); f32 FMA peak %.1f GFLOP/s; "
              "bf16 dot peak %.1f GFLOP/s%s\n\n",
              bw1, bwn, threads, peak, dot_peak, dot_peak > 0 ? "" : " (no AVX-512-BF16: precision bf16 runs the f32 kernels)");
  ThreadPool pool(threads);
  if (section == "small-batch") return RunSmallBatch(pool, reps, bwn), 0;
  if (section == "amx") return RunAmx(pool, reps, dot_peak), 0;
  if (section == "quant-crossover") return RunQuantCrossover(pool, reps), 0;
  if (section == "amx-quant") return RunAmxQuant(pool, reps), 0;
  if (section == "quant-compute") return RunQuantCompute(reps, bw1), 0;
  if (section == "quant-stream") return RunQuantStream(pool, reps, bwn, false), 0;
  if (section == "quant-pages") return RunQuantStream(pool, reps, bwn, true), 0;
  if (section == "quant-decode") return RunQuantDecode(pool, reps, bwn), 0;
  if (section == "quant-verify") return RunQuantVerify(pool, reps), 0;
  if (section == "quant-prefill") return RunQuantPrefill(pool, reps, peak, 512), 0;
  if (section == "quant") return RunQuantCompute(reps, bw1), RunQuant(pool, reps, bwn, peak), 0;
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {{"gemma4-12b mlp up", 15360, 3840}, {"gemma4-12b mlp down", 3840, 15360},
                          {"gemma4-12b q (sliding)", 4096, 3840}, {"gemma3-1b mlp up", 6912, 1152}};
  std::printf("%-24s %-5s %5s %12s %12s %12s %10s %10s | %10s %10s %10s %10s %8s\n", "weight", "dtype", "n",
              "row-dot ms", "gemm ms", "best GFLOP/s", "% FMA peak", "W GB/s", "stored ms", "panels ms", "% peak",
              "W GB/s", "x stored");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (const Shape& s : shapes) {
    std::vector<float> wf(s.out * s.in);
    for (float& v : wf) v = nd(rng);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      std::vector<uint8_t> w(wf.size() * DTypeSize(dt));
      EncodeFromF32(dt, wf.data(), w.data(), wf.size());
      const ops::WeightView wv{w.data(), dt, s.out, s.in};
      // Linear as a model loaded for the dtype's precision runs it: f32 panels at f32, pair panels
      // at bf16 (CPUs with the dot product; none elsewhere).
      const bool bf16 = dt == DType::kBF16;
      const auto precision = bf16 ? ops::MatmulPrecision::kBf16 : ops::MatmulPrecision::kF32;
      ops::WeightView packed = wv;
      AlignedBuffer panels(bf16 ? ops::PairPanelWords(s.out, s.in) * 4 : ops::F32PanelFloats(s.out, s.in) * 4);
      if (!bf16) {
        ops::PackF32Panels(wv, panels.as<float>());
        packed.panels = panels.as<float>();
      } else if (ops::PackPairPanels(wv, panels.as<uint32_t>())) {
        packed.pairs = panels.as<uint32_t>();
      }
      const double p_peak = bf16 && dot_peak > 0 ? dot_peak : peak;
      for (int64_t n : {1, 2, 3, 4, 6, 8, 10, 12, 16, 64, 128, 256, 1024}) {
        std::vector<float> x(n * s.in), y(n * s.out);
        for (float& v : x) v = nd(rng);
        const double row = bench::MedianMs(reps, [&] { ops::LinearRowDot(wv, x.data(), n, s.in, y.data(), s.out, &pool); });
        const double gemm = bench::MedianMs(reps, [&] { ops::Gemm(wv, x.data(), n, s.in, y.data(), s.out, &pool); });
        const double best = std::min(row, gemm), flops = 2.0 * n * s.out * s.in;
        std::printf("%-24s %-5s %5lld %12.3f %12.3f %12.1f %10.0f %10.1f |", s.name, DTypeName(dt), (long long)n, row,
                    gemm, flops / best / 1e6, peak > 0 ? 100 * flops / best / 1e6 / peak : 0.0,
                    double(w.size()) / best / 1e6);
        AlignedBuffer x_pairs(ops::GemmScratchWords(n, s.in) * 4);  // as the model passes it
        const double stored = bench::MedianMs(reps, [&] {
          ops::Linear(wv, x.data(), n, s.in, y.data(), s.out, &pool, precision, x_pairs.as<uint32_t>());
        });
        const bool has_panels = packed.pairs != nullptr || packed.panels != nullptr;
        const double pan = !has_panels ? 0.0 : bench::MedianMs(reps, [&] {
          ops::Linear(packed, x.data(), n, s.in, y.data(), s.out, &pool, precision, x_pairs.as<uint32_t>());
        });
        if (pan > 0) {
          std::printf(" %10.3f %10.3f %10.0f %10.1f %8.2f\n", stored, pan,
                      p_peak > 0 ? 100 * flops / pan / 1e6 / p_peak : 0.0, double(w.size()) / pan / 1e6, stored / pan);
        } else {
          std::printf(" %10.3f %10s %10s %10s %8s\n", stored, "-", "-", "-", "-");
        }
      }
    }
  }
  if (section == "all") RunQuantCompute(reps, bw1), RunQuant(pool, reps, bwn, peak);
  return 0;
}
