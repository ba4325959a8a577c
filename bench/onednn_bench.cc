// Linear (y = x W^T) on Tessera's kernels (ops::Linear: on stored weights the row-dot path for a
// few tokens and the blocked GEMM for more; on prepacked panels the GEMM for every count) against
// oneDNN's matmul, the library the performance issue names, on the
// same Gemma-width weights, token counts and thread count, in one run beside the roofline: the
// issue keeps hand-written kernels only where they beat it, measured. By default each side gets
// its best case: weights reordered once, outside the timing, oneDNN's into the layout it picks
// (format `any`), Tessera's into the panels a model loaded for that matmul precision uses (f32:
// ops::PackF32Panels, bf16: the pair panels of ops::PackPairPanels); `--weights stored` makes
// both read them as the checkpoint stores them ([out, in] row-major), packing per call.
//   f32:  x f32, W f32 [out, in]            vs  oneDNN f32 x f32 -> f32
//   bf16: x rounded to bf16, W bf16, f32 sums (Tessera's matmul precision bf16)
//                                            vs  oneDNN bf16 x bf16 -> f32
// Each cell also checks that the two agree (max |difference| over max |y|; exit 1 above 1e-3), so
// the comparison is of the same arithmetic.
//   build/release/tessera_bench_onednn [--threads N] [--reps R] [--max-tokens T] [--weights any|stored]
// Built only where oneDNN is installed (Debian's libdnnl-dev, which scripts/setup.sh installs).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "roofline.h"
#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"

using namespace tessera;

namespace {

// oneDNN's matmul for y [n, out] = x [n, in] W^T with W [out, in] row-major in `dt` (f32 or bf16);
// with `prepack` the weights are reordered once into the primitive's preferred layout, else read
// in place.
class OneDnnLinear {
 public:
  OneDnnLinear(const dnnl::engine& eng, dnnl::memory::data_type dt, const void* w, int64_t out, int64_t in, int64_t n,
               bool prepack)
      : stream_(eng) {
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc src_md({n, in}, dt, tag::ab), dst_md({n, out}, dnnl::memory::data_type::f32, tag::ab);
    const dnnl::memory::desc wei_any({in, out}, dt, prepack ? tag::any : tag::ba);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_any, dst_md), eng);
    // W [out, in] row-major is W^T [in, out] with the in dimension contiguous: tag ba.
    dnnl::memory w_user({{in, out}, dt, tag::ba}, eng, const_cast<void*>(w));
    weights_ = dnnl::memory(pd.weights_desc(), eng);
    dnnl::reorder(w_user, weights_).execute(stream_, w_user, weights_);
    stream_.wait();
    src_ = dnnl::memory(src_md, eng, nullptr);
    dst_ = dnnl::memory(dst_md, eng, nullptr);
    matmul_ = dnnl::matmul(pd);
  }
  // x: [n, in] in the weights' dtype; y: [n, out] f32.
  void Run(const void* x, float* y) {
    src_.set_data_handle(const_cast<void*>(x));
    dst_.set_data_handle(y);
    matmul_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }

 private:
  dnnl::stream stream_;
  dnnl::memory weights_, src_, dst_;
  dnnl::matmul matmul_;
};

// max |a - b| / max |b|.
double RelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    mag = std::max(mag, std::fabs(double(b[i])));
  }
  return mag > 0 ? diff / mag : diff;
}

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = bench::CheckArgs(argc, argv, " [--threads N] [--reps R] [--max-tokens T] [--weights any|stored]\n");
      rc >= 0)
    return rc;
  int threads = DefaultThreadCount(), reps = 5;
  int64_t max_tokens = 256;
  bool prepack = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (a == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (a == "--max-tokens") {
      max_tokens = std::atoll(argv[i + 1]);
    } else if (a == "--weights" && (std::string(argv[i + 1]) == "any" || std::string(argv[i + 1]) == "stored")) {
      prepack = std::string(argv[i + 1]) == "any";
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  omp_set_num_threads(threads);  // oneDNN's threads (Debian builds it on OpenMP)
  ThreadPool pool(threads);
  const double bw = bench::ReadBandwidthGBs(threads), peak = bench::FmaPeakGflops(threads),
               dot_peak = bench::Bf16DotPeakGflops(threads);
  const dnnl_version_t* v = dnnl_version();
  std::printf("roofline (%d threads): read bandwidth %.1f GB/s, f32 FMA peak %.1f GFLOP/s, bf16 dot peak %.1f "
              "GFLOP/s; oneDNN %d.%d.%d (%s), weights %s\n\n",
              threads, bw, peak, dot_peak, v->major, v->minor, v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other",
              prepack ? "reordered once (oneDNN's layout; Tessera's panels)" : "read as stored");
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {{"gemma4-12b mlp up", 15360, 3840}, {"gemma4-12b mlp down", 3840, 15360},
                          {"gemma4-12b q (sliding)", 4096, 3840}, {"gemma3-1b mlp up", 6912, 1152}};
  std::printf("%-24s %-5s %5s %10s %10s %12s %12s %8s %8s %10s\n", "weight", "dtype", "n", "oneDNN ms", "Tessera ms",
              "oneDNN GF/s", "Tessera GF/s", "% peak", "speedup", "rel diff");
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  bool agree = true;
  for (const Shape& s : shapes) {
    std::vector<float> wf(s.out * s.in);
    for (float& x : wf) x = nd(rng);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const bool bf16 = dt == DType::kBF16;
      std::vector<uint8_t> w(wf.size() * DTypeSize(dt));  // [out, in]
      EncodeFromF32(dt, wf.data(), w.data(), wf.size());
      ops::WeightView wv{w.data(), dt, s.out, s.in};
      AlignedBuffer panels(!prepack ? 0 : bf16 ? ops::PairPanelWords(s.out, s.in) * 4 : ops::F32PanelFloats(s.out, s.in) * 4);
      if (prepack && !bf16) {
        ops::PackF32Panels(wv, panels.as<float>());
        wv.panels = panels.as<float>();
      } else if (prepack && ops::PackPairPanels(wv, panels.as<uint32_t>())) {
        wv.pairs = panels.as<uint32_t>();
      }
      const auto precision = bf16 ? ops::MatmulPrecision::kBf16 : ops::MatmulPrecision::kF32;
      const auto dnnl_dt = bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
      for (int64_t n : {1, 16, 64, 256}) {
        if (n > max_tokens) continue;
        std::vector<float> x(n * s.in), y_t(n * s.out), y_d(n * s.out);
        for (float& e : x) e = nd(rng);
        // oneDNN's input in the weights' dtype: x itself, or x rounded to bf16 as Tessera rounds it.
        std::vector<uint8_t> x_d(x.size() * DTypeSize(dt));
        EncodeFromF32(dt, x.data(), x_d.data(), x.size());
        OneDnnLinear onednn(eng, dnnl_dt, w.data(), s.out, s.in, n, prepack);
        const double ms_d = bench::MedianMs(reps, [&] { onednn.Run(x_d.data(), y_d.data()); });
        // oneDNN's OpenMP threads spin for a while after each call, and Tessera's pool workers
        // after theirs: a pause lets each side's threads go to sleep before the other is timed.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        // Tessera with the rounded-x scratch the model passes (tessera/gemm.h).
        AlignedBuffer x_pairs(ops::GemmScratchWords(n, s.in) * 4);
        const double ms_t = bench::MedianMs(reps, [&] {
          ops::Linear(wv, x.data(), n, s.in, y_t.data(), s.out, &pool, precision, x_pairs.as<uint32_t>());
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const double flops = 2.0 * n * s.out * s.in, diff = RelDiff(y_t, y_d);
        const double p = bf16 && dot_peak > 0 ? dot_peak : peak;
        agree = agree && diff <= 1e-3;
        std::printf("%-24s %-5s %5lld %10.3f %10.3f %12.1f %12.1f %8.0f %8.2f %10.1e%s\n", s.name, DTypeName(dt),
                    (long long)n, ms_d, ms_t, flops / ms_d / 1e6, flops / ms_t / 1e6, 100 * flops / ms_t / 1e6 / p,
                    ms_d / ms_t, diff, diff <= 1e-3 ? "" : "  DISAGREE");
      }
    }
  }
  std::printf("\n%% peak: Tessera's rate over the f32 FMA peak (f32) or the bf16 dot peak (bf16); speedup: oneDNN ms "
              "/ Tessera ms.\n");
  return agree ? 0 : 1;
}
