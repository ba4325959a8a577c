// Decode cost of the three runtime modes (docs/runtime.md) as the context grows: the same model and
// prompt (text with one 64-token image block) prefilled in `unified`, `bias` and `split` mode, then
// 32 greedy decode steps. Prints prefill time, decode tokens/s and the unified/bias ratio.
//
//   build/release/tessera_bench_modes [--model DIR] [--contexts 1024,4096,8192] [--threads N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "model/loaded_model.h"
#include "runtime/session.h"

#ifndef TESSERA_SOURCE_DIR
#define TESSERA_SOURCE_DIR "."
#endif

using namespace tessera;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (const int rc = bench::CheckArgs(argc, argv, " [--model DIR] [--contexts 1024,4096,8192] [--threads N]\n");
      rc >= 0)
    return rc;
  std::string dir = TESSERA_SOURCE_DIR "/models/demo-gemma4-unified";
  std::vector<int64_t> contexts = {1024, 4096, 8192};
  int threads = DefaultThreadCount();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") {
      dir = argv[i + 1];
    } else if (a == "--threads") {
      threads = std::atoi(argv[i + 1]);
    } else if (a == "--contexts") {
      contexts.clear();
      for (char* p = argv[i + 1]; *p;) {
        contexts.push_back(std::strtoll(p, &p, 10));
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto loaded = model::LoadedModel::Load(dir);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
    return 1;
  }
  const model::ModelConfig& cfg = loaded.value()->config();
  const model::GemmaModel& m = loaded.value()->model();
  const int64_t V = m.arch().vocab, H = m.arch().hidden, decode_steps = 32, image = 64;
  ThreadPool pool(threads);
  std::printf("model %s (%lld layers, hidden %lld), %d threads, %lld decode steps, 64-token image block\n\n",
              dir.c_str(), (long long)m.arch().num_layers(), (long long)H, threads, (long long)decode_steps);
  std::printf("%8s %-8s %12s %14s %16s\n", "context", "mode", "prefill s", "decode tok/s", "unified / mode");
  for (int64_t ctx : contexts) {
    runtime::Prompt p;
    std::mt19937 rng(1);
    std::uniform_int_distribution<int32_t> text(16, static_cast<int32_t>(V - 1));
    const int64_t start = ctx / 2;
    for (int64_t i = 0; i < ctx; ++i) {
      const bool img = i >= start && i < start + image && cfg.image_token_id;
      p.tokens.push_back(img ? static_cast<int32_t>(*cfg.image_token_id) : text(rng));
      p.token_types.push_back(img ? 1 : 0);
    }
    std::vector<float> embeds(image * H, 0.1f);
    p.image_embeds = embeds.data();
    p.image_rows = cfg.image_token_id ? image : 0;
    double unified_rate = 0;
    for (runtime::Mode mode : {runtime::Mode::kUnified, runtime::Mode::kBias, runtime::Mode::kSplit}) {
      runtime::SessionOptions o;
      o.max_context = ctx + decode_steps + 1;
      o.max_chunk = 256;
      o.mode = mode;
      auto s = runtime::Session::Create(m, o, &pool);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.status().message().c_str());
        return 1;
      }
      std::vector<float> logits(V);
      const auto t0 = Clock::now();
      Status st = s.value()->Prefill({p}, logits.data());
      const auto t1 = Clock::now();
      int32_t tok = 0;
      for (int64_t i = 0; st.ok() && i < decode_steps; ++i) {
        tok = 16 + static_cast<int32_t>(i);
        st = s.value()->Decode(&tok, nullptr, logits.data());
      }
      const auto t2 = Clock::now();
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
      }
      const double rate = decode_steps / std::chrono::duration<double>(t2 - t1).count();
      if (mode == runtime::Mode::kUnified) unified_rate = rate;
      std::printf("%8lld %-8s %12.2f %14.1f %16.2f\n", (long long)ctx, runtime::ModeName(mode),
                  std::chrono::duration<double>(t1 - t0).count(), rate, unified_rate / rate);
    }
  }
  return 0;
}
