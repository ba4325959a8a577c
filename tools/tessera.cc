// `tessera`: the command-line front end. Subcommands live in tools/cli_*.cc.
#include <cstdio>
#include <cstring>

#include "cli.h"

namespace {

void Usage() {
  std::printf(
      "usage: tessera demo [--model DIR]        multimodal generation with the embedded Gemma-4-unified model,\n"
      "                                        in the unified, bias and split modes\n"
      "       tessera run --model DIR --ids 1,2,3 [--image-embeds F.npy] [--token-types 0,1,...]\n"
      "                   [--max-new-tokens N] [--mode unified|bias|split] [--temperature T] [--top-k K]\n"
      "                   [--top-p P] [--seed S] [--max-context N] [--max-chunk N] [--threads N] [--kv-dtype bf16]\n"
      "                   [--attention-precision bf16]   (needs --kv-dtype bf16)\n"
      "                   [--dtype bf16] [--matmul-precision bf16]   (convert weights on load; needs bf16 weights)\n"
      "                   [--no-repack]   (read the weights as stored: faster load, slower prefill)\n"
      "       tessera inspect --model DIR       layers, head geometry, mask rules, KV memory per context\n"
      "       tessera kv-memory [CONTEXT...] [--max-chunk N] [--per-layer]   Gemma-12B-shaped KV memory\n"
      "       tessera selfcheck                 attention and Linear kernels vs reference at Gemma-4 shapes\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage();
    return 2;
  }
  const char* cmd = argv[1];
  if (std::strcmp(cmd, "demo") == 0) return tessera::cli::DemoCommand(argc - 2, argv + 2);
  if (std::strcmp(cmd, "run") == 0) return tessera::cli::RunCommand(argc - 2, argv + 2);
  if (std::strcmp(cmd, "inspect") == 0) return tessera::cli::InspectCommand(argc - 2, argv + 2);
  if (std::strcmp(cmd, "kv-memory") == 0) return tessera::cli::KvMemoryCommand(argc - 2, argv + 2);
  if (std::strcmp(cmd, "selfcheck") == 0) return tessera::cli::SelfCheckCommand(argc - 2, argv + 2);
  Usage();
  return std::strcmp(cmd, "--help") == 0 || std::strcmp(cmd, "help") == 0 ? 0 : 2;
}
