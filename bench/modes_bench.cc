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
#include "tessera/engine.h"

#ifndef TESSERA_SOURCE_DIR
#define TESSERA_SOURCE_DIR "."
#endif

using namespace tessera;

namespace {

// `ctx` tokens of text with a 64-token image block in the middle (when the model has image ids).
Prompt MakePrompt(const ModelInfo& info, int64_t ctx, int64_t image, std::vector<float>& embeds) {
  Prompt p;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> text(16, static_cast<int32_t>(info.vocab - 1));
  const int64_t start = ctx / 2;
  for (int64_t i = 0; i < ctx; ++i) {
    const bool img = i >= start && i < start + image && info.image_token_id;
    p.tokens.push_back(img ? *info.image_token_id : text(rng));
    p.token_types.push_back(img ? 1 : 0);
  }
  embeds.assign(image * info.hidden, 0.1f);
  p.image_embeds = embeds.data();
  p.image_rows = info.image_token_id ? image : 0;
  return p;
}

}  // namespace

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
  LoadOptions load;
  load.repack_for = std::nullopt;
  load.threads = threads;
  auto loaded = Model::Load(dir, load);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
    return 1;
  }
  const Model& m = *loaded.value();
  const ModelInfo& info = m.info();
  const int64_t decode_steps = 32, image = 64;
  std::printf("model %s (%zu layers, hidden %lld), %d threads, %lld decode steps, 64-token image block\n\n",
              dir.c_str(), info.layers.size(), (long long)info.hidden, threads, (long long)decode_steps);
  std::printf("%8s %-8s %12s %14s %16s\n", "context", "mode", "prefill s", "decode tok/s", "unified / mode");
  GenerateOptions g;
  g.max_new_tokens = decode_steps + 1;  // greedy, no stop tokens: exactly decode_steps decode steps
  for (int64_t ctx : contexts) {
    std::vector<float> embeds;
    const Prompt p = MakePrompt(info, ctx, image, embeds);
    double unified_rate = 0;
    for (Mode mode : {Mode::kUnified, Mode::kBias, Mode::kSplit}) {
      SessionOptions o;
      o.max_context = ctx + decode_steps + 1;
      o.max_chunk = 256;
      o.mode = mode;
      auto s = m.NewSession(o);
      GenerateOutput out;
      const Status st = s.ok() ? s.value()->Generate({p}, g, &out) : s.status();
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
      }
      const double rate = out.stats.decode_steps / out.stats.decode_seconds;
      if (mode == Mode::kUnified) unified_rate = rate;
      std::printf("%8lld %-8s %12.2f %14.1f %16.2f\n", (long long)ctx, ModeName(mode), out.stats.prefill_seconds, rate,
                  unified_rate / rate);
    }
  }
  return 0;
}
