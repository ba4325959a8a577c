// tessera inspect: a checkpoint's layers, head geometry, mask rules and KV memory per context;
// tessera kv-memory: the same memory table for the reference Gemma-12B shapes.
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "tessera/kv/kv_cache.h"
#include "model/reference_configs.h"
#include "model/loaded_model.h"
#include "runtime/session.h"

namespace tessera::cli {
int InspectCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv, {"model", "max-chunk"}, {});
  if (!parsed.ok() || !parsed.value().Has("model")) {
    std::fprintf(stderr, "tessera inspect: %s\n", parsed.ok() ? "--model DIR is required" : parsed.status().message().c_str());
    return 1;
  }
  StatusOr<int64_t> chunk = parsed.value().Int("max-chunk", 256);
  StatusOr<std::unique_ptr<model::LoadedModel>> loaded = model::LoadedModel::Load(parsed.value().Get("model"));
  if (!loaded.ok() || !chunk.ok()) {
    std::fprintf(stderr, "tessera inspect: %s\n", (loaded.ok() ? chunk.status() : loaded.status()).message().c_str());
    return 1;
  }
  const model::GemmaArch& a = loaded.value()->model().arch();
  std::printf("%s: vocab %lld, hidden %lld, %lld query heads, %lld layers%s\n", a.model_type.c_str(),
              (long long)a.vocab, (long long)a.hidden, (long long)a.q_heads, (long long)a.num_layers(),
              a.ple_dim ? (", per-layer embeddings " + std::to_string(a.ple_dim)).c_str() : "");
  std::printf("layer  kind     kv_heads  head_dim  window  v_proj  kv        rotary_pairs  mask\n");
  for (int64_t l = 0; l < a.num_layers(); ++l) {
    const model::LayerArch& la = a.layers[l];
    int64_t rotary = 0;
    for (float f : la.inv_freq) rotary += f != 0.0f;
    std::printf("%5lld  %-7s  %8lld  %8lld  %6lld  %-6s  %-8s  %12lld  %s\n", (long long)l, kv::LayerKindName(la.kind),
                (long long)la.kv_heads, (long long)la.head_dim, (long long)la.window, la.shared_kv ? "-" : la.has_v_proj ? "yes" : "k=v",
                la.shared_kv ? "shared" : "own", (long long)rotary, model::MaskRuleName(la));
  }
  std::printf("\nKV cache (batch 1, max_chunk %lld):\n%10s %10s %10s %10s\n", (long long)chunk.value(), "context",
              "f32 MiB", "bf16 MiB", "per token");
  for (int64_t ctx : {1024, 4096, 8192, 32768, 131072}) {
    double mib[2];
    for (int i = 0; i < 2; ++i) {
      runtime::SessionOptions o;
      o.max_context = ctx;
      o.max_chunk = std::min(chunk.value(), ctx);
      o.kv_dtype = i == 0 ? DType::kF32 : DType::kBF16;
      StatusOr<kv::KvMemoryPlan> plan = kv::KvCache::Plan(runtime::KvCacheConfigFor(a, o));
      if (!plan.ok()) {
        std::fprintf(stderr, "tessera inspect: %s\n", plan.status().message().c_str());
        return 1;
      }
      mib[i] = plan.value().total_bytes / 1048576.0;
    }
    std::printf("%10lld %10.1f %10.1f %8.1f KiB\n", (long long)ctx, mib[0], mib[1], mib[1] * 1024 / ctx);
  }
  return 0;
}

int KvMemoryCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv, {"max-chunk"}, kKvMemoryFlags, /*allow_positional=*/true);
  if (!parsed.ok()) {
    std::fprintf(stderr, "tessera kv-memory: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const Args& args = parsed.value();
  StatusOr<int64_t> max_chunk = args.Int("max-chunk", 256);
  if (!max_chunk.ok()) {
    std::fprintf(stderr, "tessera kv-memory: %s\n", max_chunk.status().message().c_str());
    return 2;
  }
  std::vector<int64_t> contexts;
  for (const std::string& p : args.positional()) {
    char* end = nullptr;
    const long long ctx = std::strtoll(p.c_str(), &end, 10);
    if (p.empty() || *end != '\0' || ctx <= 0) {
      std::fprintf(stderr, "tessera kv-memory: '%s' is not a context length\n", p.c_str());
      return 2;
    }
    contexts.push_back(ctx);
  }
  if (contexts.empty()) contexts = {4096, 8192, 32768, 131072};
  std::printf("KV cache memory, bf16, batch 1, ring chunk %lld (ring slots = window - 1 + chunk)\n\n",
              static_cast<long long>(max_chunk.value()));
  std::printf("%-34s %10s %12s %12s\n", "model shape", "context", "MiB", "GiB");
  for (int64_t ctx : contexts) {
    for (int m = 0; m < 2; ++m) {
      const int64_t c = std::min(max_chunk.value(), ctx);
      const kv::KvCacheConfig cfg = m == 0 ? model::Gemma4_12BCache(ctx, c) : model::Gemma3_12BCache(ctx, c);
      StatusOr<kv::KvMemoryPlan> plan = kv::KvCache::Plan(cfg);
      if (!plan.ok()) {
        std::fprintf(stderr, "tessera kv-memory: %s\n", plan.status().message().c_str());
        return 1;
      }
      std::printf("%-34s %10lld %12.1f %12.3f\n",
                  m == 0 ? "Gemma-4-12B (40 ring + 8 global)" : "Gemma-3-12B (40 ring + 8 global)",
                  static_cast<long long>(ctx), plan.value().total_bytes / 1048576.0,
                  plan.value().total_bytes / 1073741824.0);
      if (args.Has("per-layer")) std::printf("%s\n", plan.value().Format().c_str());
    }
  }
  return 0;
}

}  // namespace tessera::cli
