// tessera inspect: a checkpoint's layers, head geometry, mask rules and KV memory per context;
// tessera kv-memory: the same memory table for the reference Gemma-12B shapes.
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "tessera/engine.h"

namespace tessera::cli {
int InspectCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv, {"model", "max-chunk"}, {});
  if (!parsed.ok() || !parsed.value().Has("model")) {
    std::fprintf(stderr, "tessera inspect: %s\n", parsed.ok() ? "--model DIR (or FILE.gguf) is required" : parsed.status().message().c_str());
    return 1;
  }
  StatusOr<int64_t> chunk = parsed.value().Int("max-chunk", 256);
  LoadOptions load;
  load.repack_for = std::nullopt;  // only the shapes are read
  load.threads = 1;
  StatusOr<std::unique_ptr<Model>> loaded = Model::Load(parsed.value().Get("model"), load);
  if (!loaded.ok() || !chunk.ok()) {
    std::fprintf(stderr, "tessera inspect: %s\n", (loaded.ok() ? chunk.status() : loaded.status()).message().c_str());
    return 1;
  }
  const ModelInfo& a = loaded.value()->info();
  std::printf("%s: vocab %lld, hidden %lld, %lld query heads, %zu layers%s\n", a.model_type.c_str(), (long long)a.vocab,
              (long long)a.hidden, (long long)a.q_heads, a.layers.size(),
              a.ple_dim ? (", per-layer embeddings " + std::to_string(a.ple_dim)).c_str() : "");
  std::printf("attention scale %.9g, final logit soft cap %g\n", a.attention_scale, a.final_softcap);
  for (const std::string& note : a.inferred) std::printf("inferred: %s\n", note.c_str());
  std::printf("layer  kind     kv_heads  head_dim  window  v_proj  kv        rotary_pairs  mask\n");
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerInfo& la = a.layers[l];
    std::printf("%5zu  %-7s  %8lld  %8lld  %6lld  %-6s  %-8s  %12lld  %s\n", l, la.kind.c_str(), (long long)la.kv_heads,
                (long long)la.head_dim, (long long)la.window, la.shared_kv ? "-" : la.has_v_proj ? "yes" : "k=v",
                la.shared_kv ? "shared" : "own", (long long)la.rotary_pairs, la.mask.c_str());
  }
  std::printf("\nKV cache (batch 1, max_chunk %lld):\n%10s %10s %10s %10s\n", (long long)chunk.value(), "context",
              "f32 MiB", "bf16 MiB", "per token");
  for (int64_t ctx : {1024, 4096, 8192, 32768, 131072}) {
    double mib[2];
    for (int i = 0; i < 2; ++i) {
      SessionOptions o;
      o.max_context = ctx;
      o.max_chunk = std::min(chunk.value(), ctx);
      o.kv_dtype = i == 0 ? DType::kF32 : DType::kBF16;
      StatusOr<size_t> bytes = loaded.value()->KvCacheBytes(o);
      if (!bytes.ok()) {
        std::fprintf(stderr, "tessera inspect: %s\n", bytes.status().message().c_str());
        return 1;
      }
      mib[i] = bytes.value() / 1048576.0;
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
      StatusOr<KvMemoryReport> plan =
          ReferenceKvMemory(m == 0 ? ReferenceShape::kGemma4_12B : ReferenceShape::kGemma3_12B, ctx, c);
      if (!plan.ok()) {
        std::fprintf(stderr, "tessera kv-memory: %s\n", plan.status().message().c_str());
        return 1;
      }
      std::printf("%-34s %10lld %12.1f %12.3f\n",
                  m == 0 ? "Gemma-4-12B (40 ring + 8 global)" : "Gemma-3-12B (40 ring + 8 global)",
                  static_cast<long long>(ctx), plan.value().bytes / 1048576.0, plan.value().bytes / 1073741824.0);
      if (args.Has("per-layer")) std::printf("%s\n", plan.value().per_layer.c_str());
    }
  }
  return 0;
}

}  // namespace tessera::cli
