// tessera quantize: a Hugging Face Gemma checkpoint to a GGUF that Tessera and llama.cpp both run
// (src/runtime/quantize_model.cc does the work; see docs/quantizing.md).
#include <cstdio>
#include <map>

#include "cli.h"
#include "tessera/quantize.h"
#include "tessera/thread_pool.h"

namespace tessera::cli {
int QuantizeCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv, {"model", "type", "out", "threads"}, kQuantizeFlags);
  if (!parsed.ok()) {
    std::fprintf(stderr, "tessera quantize: %s\n", parsed.status().message().c_str());
    return 1;
  }
  const Args& a = parsed.value();
  for (const char* required : {"model", "type", "out"}) {
    if (!a.Has(required)) {
      std::fprintf(stderr, "tessera quantize: --%s is required\n", required);
      return 1;
    }
  }
  QuantizeFileType type;
  if (!ParseQuantizeFileType(a.Get("type"), &type)) {
    std::fprintf(stderr, "tessera quantize: --type '%s' is not one of q8_0, q4_0, q4_k_m, q5_k_m\n", a.Get("type").c_str());
    return 1;
  }
  StatusOr<int64_t> threads = a.Int("threads", DefaultThreadCount());
  if (!threads.ok() || threads.value() < 1 || threads.value() > ThreadPool::kMaxThreads) {
    std::fprintf(stderr, "tessera quantize: --threads must be an integer in [1, %d]\n", ThreadPool::kMaxThreads);
    return 1;
  }
  StatusOr<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(threads.value());
  if (!pool.ok()) {
    std::fprintf(stderr, "tessera quantize: %s\n", pool.status().message().c_str());
    return 1;
  }
  StatusOr<QuantizeReport> report = QuantizeCheckpoint(a.Get("model"), type, a.Get("out"), pool.value().get());
  if (!report.ok()) {
    std::fprintf(stderr, "tessera quantize: %s\n", report.status().message().c_str());
    return 1;
  }
  std::map<std::string, int> counts;
  for (size_t i = 0; i < report.value().tensors.size(); ++i) {
    ++counts[report.value().types[i].Name()];
    if (a.Has("verbose"))
      std::printf("%-40s %s\n", report.value().tensors[i].name.c_str(), report.value().types[i].Name().c_str());
  }
  std::printf("wrote %s (%s):", a.Get("out").c_str(), QuantizeFileTypeName(type));
  for (const auto& [name, n] : counts) std::printf(" %d %s", n, name.c_str());
  std::printf(" tensors\n");
  return 0;
}
}  // namespace tessera::cli
