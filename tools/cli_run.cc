// tessera run: load a checkpoint, prefill a prompt (ids, optional image embeddings), stream the
// generated tokens, then report prefill and decode speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "cli.h"
#include "io/npy.h"
#include "model/loaded_model.h"
#include "runtime/session.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tessera run: %s\n", msg.c_str());
  return 1;
}

// The prompt's ids: parsed from --ids, or --prompt encoded with DIR/tokenizer.model. Only a text
// prompt reads the tokenizer (--ids runs, and prints, ids alone); it is read before the model so a
// bad one fails before the long load.
Status ReadPromptTokens(const Args& a, runtime::Prompt* prompt,
                        std::unique_ptr<tokenizer::SentencePieceTokenizer>* tok) {
  if (!a.Has("prompt")) {
    StatusOr<std::vector<int32_t>> ids = ParseIdList(a.Get("ids"), "--ids");
    if (!ids.ok()) return ids.status();
    prompt->tokens = ids.value();
    return Status::Ok();
  }
  const std::string tok_path = a.Get("model") + "/tokenizer.model";
  StatusOr<std::unique_ptr<tokenizer::SentencePieceTokenizer>> t = tokenizer::SentencePieceTokenizer::Load(tok_path);
  if (!t.ok()) return InvalidArgument(t.status().message() + " (--prompt needs it; pass --ids instead)");
  *tok = std::move(t.value());
  StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(a.Get("prompt"), /*add_bos=*/true);
  if (!ids.ok()) return ids.status();
  prompt->tokens = ids.value();
  return Status::Ok();
}

}  // namespace

int RunCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv,
                                      {"model", "ids", "prompt", "image-embeds", "token-types", "max-new-tokens",
                                       "mode", "temperature", "top-k", "top-p", "seed", "max-context", "max-chunk",
                                       "threads", "kv-dtype", "attention-precision", "matmul-precision", "dtype"},
                                      kRunFlags);
  if (!parsed.ok()) return Fail(parsed.status().message());
  const Args& a = parsed.value();
  if (!a.Has("model")) return Fail("--model DIR is required");
  if (a.Has("prompt") == a.Has("ids")) return Fail("give exactly one of --prompt TEXT and --ids 1,2,3");
  runtime::SessionOptions opt;
  runtime::SamplingParams sp;
  StatusOr<int64_t> max_new = a.Int("max-new-tokens", 32), ctx = a.Int("max-context", 4096),
                    chunk = a.Int("max-chunk", 256), threads = a.Int("threads", DefaultThreadCount()),
                    top_k = a.Int("top-k", 0), seed = a.Int("seed", 0);
  StatusOr<double> temp = a.Float("temperature", 0.0), top_p = a.Float("top-p", 1.0);
  for (const Status& s : {max_new.status(), ctx.status(), chunk.status(), threads.status(), top_k.status(),
                          seed.status(), temp.status(), top_p.status()})
    if (!s.ok()) return Fail(s.message());
  opt.max_context = ctx.value();
  opt.max_chunk = std::min(chunk.value(), ctx.value());
  if (!runtime::ParseMode(a.Get("mode", "unified"), &opt.mode))
    return Fail("--mode must be unified, bias or split, got '" + a.Get("mode") + "'");
  if (!ParseDType(a.Get("kv-dtype", "f32"), &opt.kv_dtype)) return Fail("--kv-dtype must be f32, bf16 or f16");
  if (!ParseAttentionPrecision(a.Get("attention-precision", "f32"), &opt.attention_precision))
    return Fail("--attention-precision must be f32 or bf16, got '" + a.Get("attention-precision") + "'");
  if (!ops::ParseMatmulPrecision(a.Get("matmul-precision", "f32"), &opt.matmul_precision))
    return Fail("--matmul-precision must be f32 or bf16, got '" + a.Get("matmul-precision") + "'");
  model::WeightLoadOptions load_options;  // --dtype: convert the weight matrices on load
  // Linear matrices repacked at load into the GEMM's panels, unless --no-repack: they are then read
  // in place (mapped), which loads faster and prefills slower (bench/BENCHMARKS.md "Repacking at load").
  if (!a.Has("no-repack")) load_options.pack_panels_for = opt.matmul_precision;
  // One pool for loading and the session; --threads was checked to be >= 1 above.
  StatusOr<std::unique_ptr<ThreadPool>> pool_or = ThreadPool::Create(threads.value());
  if (!pool_or.ok()) return Fail("--threads: " + pool_or.status().message());
  ThreadPool& pool = *pool_or.value();
  load_options.pool = &pool;
  if (a.Has("dtype")) {
    DType d;
    if (!ParseDType(a.Get("dtype"), &d)) return Fail("--dtype must be f32, bf16 or f16, got '" + a.Get("dtype") + "'");
    load_options.convert_to = d;
  }
  sp = {static_cast<float>(temp.value()), top_k.value(), static_cast<float>(top_p.value()),
        static_cast<uint64_t>(seed.value())};
  if (Status s = runtime::ValidateSampling(sp); !s.ok()) return Fail(s.message());

  runtime::Prompt prompt;
  std::unique_ptr<tokenizer::SentencePieceTokenizer> tok;  // with --prompt only
  if (Status st = ReadPromptTokens(a, &prompt, &tok); !st.ok()) return Fail(st.message());
  std::fprintf(stderr, "loading %s ...\n", a.Get("model").c_str());
  const auto t_load = Clock::now();
  StatusOr<std::unique_ptr<model::LoadedModel>> loaded = model::LoadedModel::Load(a.Get("model"), load_options);
  if (!loaded.ok()) return Fail(loaded.status().message());
  const model::GemmaModel& m = loaded.value()->model();
  if (Status s = runtime::CheckMatmulPrecision(m, opt.matmul_precision); !s.ok())
    return Fail(s.message() + " (--dtype bf16 converts the weights on load)");
  std::fprintf(stderr, "loaded %s: %lld layers, hidden %lld, vocab %lld in %.2f s (%s)\n", m.arch().model_type.c_str(),
               static_cast<long long>(m.arch().num_layers()), static_cast<long long>(m.arch().hidden),
               static_cast<long long>(m.arch().vocab), Seconds(t_load, Clock::now()),
               m.weights().repacked() ? "weights repacked for the GEMM" : "weights read as stored");

  if (a.Has("token-types")) {
    StatusOr<std::vector<int32_t>> types = ParseIdList(a.Get("token-types"), "--token-types");
    if (!types.ok()) return Fail(types.status().message());
    prompt.token_types = types.value();
  }
  io::NpyArray embeds;
  if (a.Has("image-embeds")) {
    StatusOr<io::NpyArray> e = io::ReadNpy(a.Get("image-embeds"));
    if (!e.ok()) return Fail(e.status().message());
    embeds = std::move(e.value());
    if (embeds.shape.size() != 2 || embeds.shape[1] != m.arch().hidden)
      return Fail("--image-embeds must be [rows, " + std::to_string(m.arch().hidden) + "] float32");
    prompt.image_embeds = embeds.data.data();
    prompt.image_rows = embeds.shape[0];
  }
  StatusOr<std::unique_ptr<runtime::Session>> session = runtime::Session::Create(m, opt, &pool);
  if (!session.ok()) return Fail(session.status().message());
  runtime::Session& s = *session.value();
  if (prompt.tokens.size() > 1024)
    s.set_progress([](int64_t done, int64_t total) { std::fprintf(stderr, "prefill %lld / %lld\r", (long long)done, (long long)total); });

  const int64_t V = m.arch().vocab;
  std::vector<float> logits(V);
  const auto t0 = Clock::now();
  if (Status st = s.Prefill({prompt}, logits.data()); !st.ok()) return Fail(st.message());
  const auto t1 = Clock::now();
  runtime::Sampler sampler(sp, V);
  std::vector<int32_t> stop;
  if (!a.Has("no-stop"))
    for (int64_t e : loaded.value()->config().eos_token_ids) stop.push_back(static_cast<int32_t>(e));
  int64_t generated = 0;
  for (; generated < max_new.value(); ++generated) {
    int32_t next = 0;
    if (Status st = sampler.Sample(logits.data(), &next); !st.ok())
      return Fail("step " + std::to_string(generated) + ": " + st.message());
    if (tok) {
      std::printf("%s", tok->Piece(next).c_str());
    } else {
      std::printf("%d ", next);
    }
    std::fflush(stdout);
    if (std::find(stop.begin(), stop.end(), next) != stop.end() || generated + 1 == max_new.value()) {
      ++generated;
      break;
    }
    if (Status st = s.Decode(&next, nullptr, logits.data()); !st.ok()) return Fail(st.message());
  }
  const auto t2 = Clock::now();
  std::printf("\n");
  const double pre = Seconds(t0, t1), dec = Seconds(t1, t2);
  std::fprintf(stderr, "mode %s: prefill %zu tokens in %.3f s (%.1f tok/s); decode %lld tokens in %.3f s (%.1f tok/s)\n",
               runtime::ModeName(opt.mode), prompt.tokens.size(), pre, prompt.tokens.size() / pre,
               static_cast<long long>(generated), dec, generated > 1 ? (generated - 1) / dec : 0.0);
  return 0;
}

}  // namespace tessera::cli
