// `tessera`: the command-line front end. Subcommands live in tools/cli_*.cc.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const std::vector<std::string>* flags;  // options without a value (for the --help scan)
  const char* usage;                      // after "tessera NAME"
};

const std::vector<std::string> kNoFlags;

const Command kCommands[] = {
    {"demo", tessera::cli::DemoCommand, &kNoFlags,
     " [--model DIR] [--image FILE] [--max-new-tokens N] [--threads N]\n"
     "      multimodal generation with the embedded Gemma-4-unified model from an image file (default:\n"
     "      the model's astronaut.jpg), in the unified, bias and split modes\n"},
    {"run", tessera::cli::RunCommand, &tessera::cli::kRunFlags,
     " --model DIR|FILE.gguf (--ids 1,2,3 | --prompt TEXT) [--image FILE ...] [--image-tokens N]\n"
     "      [--image-embeds F.npy] [--token-types 0,1,...]\n"
     "      [--max-new-tokens N] [--mode unified|bias|split] [--temperature T] [--top-k K]\n"
     "      [--top-p P] [--seed S] [--max-context N] [--max-chunk N] [--threads N] [--kv-dtype bf16]\n"
     "      [--attention-precision bf16]   (needs --kv-dtype bf16)\n"
     "      [--dtype bf16] [--matmul-precision bf16]   (convert weights on load; needs bf16 weights)\n"
     "      [--matmul-precision int8]   (quantized weights: one byte per activation in prefill too, llama.cpp's\n"
     "      numerics, faster; default f32 keeps prefill activations near f32)\n"
     "      [--no-repack]   (read the weights as stored: faster load, slower prefill) [--no-stop]\n"
     "      [--quantize q8_0|q4_0|q4_k_m|q5_k_m]   (a checkpoint's matrices quantized at load, as tessera quantize does)\n"
     "      [--draft DIR [--draft-tokens K] [--draft-quantize q8_0|q4_0]]   (speculative decoding with a Gemma 4\n"
     "      assistant drafter, K proposals per step, default 4, its matrices quantized at load if asked; the same\n"
     "      tokens as without, or with sampling the same distribution)\n"
     "      --ids prints the generated ids (no tokenizer is read); --prompt needs DIR/tokenizer.model\n"
     "      or DIR/tokenizer.json (a GGUF carries its own) and prints text. --image (JPEG/PNG, repeatable) goes through the\n"
     "      checkpoint's processor and vision encoder; each image marker in the prompt (Gemma 3\n"
     "      <start_of_image>, Gemma 4 <|image|>) takes one, else they go first. --image-tokens:\n"
     "      Gemma 4 soft tokens per image (70, 140, 280, 560, 1120)\n"},
    {"inspect", tessera::cli::InspectCommand, &kNoFlags,
     " --model DIR|FILE.gguf [--max-chunk N]\n"
     "      layers, head geometry, mask rules, KV memory per context\n"},
    {"kv-memory", tessera::cli::KvMemoryCommand, &tessera::cli::kKvMemoryFlags,
     " [CONTEXT...] [--max-chunk N] [--per-layer]\n"
     "      Gemma-12B-shaped KV memory\n"},
    {"quantize", tessera::cli::QuantizeCommand, &tessera::cli::kQuantizeFlags,
     " --model DIR --type q8_0|q4_0|q4_k_m|q5_k_m --out FILE.gguf [--threads N] [--verbose]\n"
     "      a Hugging Face Gemma 3 / Gemma 4 checkpoint to a GGUF that llama.cpp runs too, with the\n"
     "      tensor types llama.cpp's quantizer picks (--verbose lists them)\n"},
    {"serve", tessera::cli::ServeCommand, &tessera::cli::kServeFlags,
     " --model DIR|FILE.gguf [--model-id NAME] [--host 127.0.0.1] [--port 8080] [--slots 4]\n"
     "      [--max-context 4096] [--max-chunk 256] [--max-queue 64] [--api-key KEY] [--threads N]\n"
     "      [--kv-dtype bf16] [--attention-precision bf16] [--dtype bf16] [--matmul-precision bf16|int8]\n"
     "      [--quantize q8_0|q4_0|q4_k_m|q5_k_m] [--no-repack]\n"
     "      an OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions (stream or\n"
     "      not), GET /v1/models, /health, /metrics. --port 0 picks a free port; the bound address is\n"
     "      printed as 'tessera serve: listening on http://HOST:PORT'. Each slot runs one request;\n"
     "      more wait in a queue of --max-queue (then 503). --api-key: Bearer key for /v1 and /metrics\n"},
    {"selfcheck", tessera::cli::SelfCheckCommand, &kNoFlags,
     "\n      attention and Linear kernels vs reference at Gemma-4 shapes\n"},
};

void Usage(const Command* only) {
  bool first = true;
  for (const Command& c : kCommands) {
    if (only != nullptr && only != &c) continue;
    std::printf("%s tessera %s%s", first ? "usage:" : "      ", c.name, c.usage);
    first = false;
  }
  if (only == nullptr) std::printf("       tessera COMMAND --help   the usage of one command\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage(nullptr);
    return 2;
  }
  const char* cmd = argv[1];
  for (const Command& c : kCommands) {
    if (std::strcmp(cmd, c.name) != 0) continue;
    if (tessera::cli::HelpRequested(argc - 2, argv + 2, *c.flags)) {
      Usage(&c);
      return 0;
    }
    try {
      return c.run(argc - 2, argv + 2);
    } catch (const std::bad_alloc&) {  // the library reports memory as Status; this is the backstop
      std::fprintf(stderr, "tessera %s: out of memory\n", c.name);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera %s: internal error: %s\n", c.name, e.what());
    }
    return 1;
  }
  Usage(nullptr);
  const bool help = std::strcmp(cmd, "--help") == 0 || std::strcmp(cmd, "-h") == 0 || std::strcmp(cmd, "help") == 0;
  if (!help) std::fprintf(stderr, "tessera: unknown command '%s'\n", cmd);
  return help ? 0 : 2;
}
