// tessera run: load a checkpoint, prefill a prompt (ids or text, with image files or image
// embeddings), stream the generated tokens, then report prefill and decode speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "cli.h"
#include "tessera/engine.h"
#include "tessera/image.h"
#include "tessera/npy.h"
#include "tessera/quantize.h"
#include "tessera/tokenizer.h"

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tessera run: %s\n", msg.c_str());
  return 1;
}

// The run-only options (length and sampling) after the engine's (ParseEngineOptions).
Status ParseOptions(const Args& a, SessionOptions* opt, LoadOptions* load, GenerateOptions* gen) {
  TESSERA_RETURN_IF_ERROR(ParseEngineOptions(a, opt, load));
  StatusOr<int64_t> max_new = a.Int("max-new-tokens", 32), top_k = a.Int("top-k", 0), seed = a.Int("seed", 0);
  StatusOr<double> temp = a.Float("temperature", 0.0), top_p = a.Float("top-p", 1.0);
  for (const Status& s : {max_new.status(), top_k.status(), seed.status(), temp.status(), top_p.status()})
    TESSERA_RETURN_IF_ERROR(s);
  gen->max_new_tokens = max_new.value();
  // --draft DIR: speculative decoding with a Gemma 4 assistant (docs/speculative.md).
  StatusOr<int64_t> draft_tokens = a.Int("draft-tokens", a.Has("draft") ? 4 : 0);
  TESSERA_RETURN_IF_ERROR(draft_tokens.status());
  if (draft_tokens.value() < 0 || draft_tokens.value() > 64)
    return InvalidArgument("--draft-tokens " + std::to_string(draft_tokens.value()) + " outside [0, 64]");
  if (draft_tokens.value() > 0 && !a.Has("draft")) return InvalidArgument("--draft-tokens needs --draft DIR");
  if (a.Has("draft")) {
    load->draft = a.Get("draft");
    gen->draft_tokens = draft_tokens.value();
    opt->verify_tokens = std::min(draft_tokens.value() + 1, opt->max_chunk);
  }
  if (a.Has("draft-quantize")) {  // the type, and that there is a drafter, are checked by Model::Load
    QuantizeFileType q;
    if (!ParseQuantizeFileType(a.Get("draft-quantize"), &q))
      return InvalidArgument("--draft-quantize must be q8_0 or q4_0, got '" + a.Get("draft-quantize") + "'");
    load->draft_quantize = q;
  }
  gen->sampling = {static_cast<float>(temp.value()), top_k.value(), static_cast<float>(top_p.value()),
                   static_cast<uint64_t>(seed.value())};
  return ValidateSampling(gen->sampling);
}

// --token-types and --image-embeds (a [rows, hidden] float32 .npy kept in *embeds).
Status ReadImageInputs(const Args& a, int64_t hidden, Prompt* prompt, io::NpyArray* embeds) {
  if (a.Has("token-types")) {
    StatusOr<std::vector<int32_t>> types = ParseIdList(a.Get("token-types"), "--token-types");
    if (!types.ok()) return types.status();
    prompt->token_types = types.value();
  }
  if (!a.Has("image-embeds")) return Status::Ok();
  StatusOr<io::NpyArray> e = io::ReadNpy(a.Get("image-embeds"));
  if (!e.ok()) return e.status();
  *embeds = std::move(e.value());
  if (embeds->shape.size() != 2 || embeds->shape[1] != hidden)
    return InvalidArgument("--image-embeds must be [rows, " + std::to_string(hidden) + "] float32");
  prompt->image_embeds = embeds->data.data();
  prompt->image_rows = embeds->shape[0];
  return Status::Ok();
}

// --image files: decoded, processed and encoded by the checkpoint's vision path, then laid out in
// the prompt (each image marker takes one image; without markers they go first). The image rows
// are kept in *features, which the prompt points into.
Status ReadImages(const Args& a, const Model& m, const tokenizer::Tokenizer* tok,
                  ops::MatmulPrecision precision, Prompt* prompt, ImageFeatures* features) {
  const std::vector<std::string> files = a.GetAll("image");
  if (files.empty()) return Status::Ok();
  if (a.Has("image-embeds") || a.Has("token-types"))
    return InvalidArgument("--image lays the images out itself: give it without --image-embeds / --token-types");
  StatusOr<int64_t> budget = a.Int("image-tokens", 0);
  TESSERA_RETURN_IF_ERROR(budget.status());
  std::vector<image::Image> images;
  for (const std::string& f : files) {
    StatusOr<image::Image> img = image::LoadImageFile(f);
    TESSERA_RETURN_IF_ERROR(img.status());
    images.push_back(std::move(img).value());
  }
  const auto t0 = Clock::now();
  StatusOr<ImageFeatures> enc = m.EncodeImages(images, EncodeOptions{budget.value(), precision});
  TESSERA_RETURN_IF_ERROR(enc.status());
  *features = std::move(enc).value();
  std::fprintf(stderr, "encoded %zu image(s) into %lld soft tokens in %.3f s\n", images.size(),
               static_cast<long long>(features->rows.size() / features->hidden), Seconds(t0, Clock::now()));
  std::optional<int32_t> newline;
  if (tok) {
    StatusOr<std::vector<int32_t>> nl = tok->Encode("\n\n", /*add_bos=*/false);
    if (nl.ok() && nl.value().size() == 1) newline = nl.value()[0];
  }
  StatusOr<Prompt> p = m.LayoutImagePrompt(prompt->tokens, *features, newline);
  TESSERA_RETURN_IF_ERROR(p.status());
  *prompt = std::move(p).value();
  return Status::Ok();
}

// Whether --model names a file (a GGUF) rather than a checkpoint directory.
bool ModelIsFile(const Args& a) {
  std::error_code ec;
  return std::filesystem::is_regular_file(a.Get("model"), ec);
}

// --prompt encoded with `tok`.
Status EncodePrompt(const Args& a, const tokenizer::Tokenizer& tok, Prompt* prompt) {
  StatusOr<std::vector<int32_t>> ids = tok.Encode(a.Get("prompt"), /*add_bos=*/true);
  if (!ids.ok()) return ids.status();
  prompt->tokens = ids.value();
  return Status::Ok();
}

// The prompt's ids: parsed from --ids, or --prompt encoded with DIR's tokenizer (tokenizer.model,
// else tokenizer.json). Only a text prompt reads the tokenizer (--ids runs, and prints, ids
// alone); it is read before the model so a bad one fails before the long load. A GGUF's tokenizer
// is in the file: GgufPromptTokens, after the load.
Status ReadPromptTokens(const Args& a, Prompt* prompt, std::unique_ptr<tokenizer::Tokenizer>* tok) {
  if (!a.Has("prompt")) {
    StatusOr<std::vector<int32_t>> ids = ParseIdList(a.Get("ids"), "--ids");
    if (!ids.ok()) return ids.status();
    prompt->tokens = ids.value();
    return Status::Ok();
  }
  if (ModelIsFile(a)) return Status::Ok();
  StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t = tokenizer::Tokenizer::FromCheckpointDir(a.Get("model"));
  if (!t.ok()) return InvalidArgument(t.status().message() + " (--prompt needs it; pass --ids instead)");
  *tok = std::move(t.value());
  return EncodePrompt(a, **tok, prompt);
}

// --prompt with a GGUF: the tokenizer built from the vocabulary the file carries.
Status GgufPromptTokens(const Args& a, const Model& m, Prompt* prompt, std::unique_ptr<tokenizer::Tokenizer>* tok) {
  if (!a.Has("prompt") || !ModelIsFile(a)) return Status::Ok();
  StatusOr<tokenizer::TokenizerVocab> vocab = m.TokenizerVocab();
  if (!vocab.ok()) return InvalidArgument(vocab.status().message() + " (--prompt needs it; pass --ids instead)");
  StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t = tokenizer::Tokenizer::FromVocab(vocab.value(), a.Get("model"));
  if (!t.ok()) return InvalidArgument(t.status().message() + " (--prompt needs it; pass --ids instead)");
  *tok = std::move(t.value());
  return EncodePrompt(a, **tok, prompt);
}

}  // namespace

int RunCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv,
                                      {"model", "ids", "prompt", "image-embeds", "token-types", "image-tokens",
                                       "max-new-tokens", "mode", "temperature", "top-k", "top-p", "seed",
                                       "max-context", "max-chunk", "threads", "kv-dtype", "attention-precision",
                                       "matmul-precision", "dtype", "quantize", "draft", "draft-tokens",
                                       "draft-quantize"},
                                      kRunFlags, /*allow_positional=*/false, {"image"});
  if (!parsed.ok()) return Fail(parsed.status().message());
  const Args& a = parsed.value();
  if (!a.Has("model")) return Fail("--model DIR (or FILE.gguf) is required");
  if (a.Has("prompt") == a.Has("ids")) return Fail("give exactly one of --prompt TEXT and --ids 1,2,3");
  SessionOptions opt;
  LoadOptions load;
  GenerateOptions gen;
  if (Status st = ParseOptions(a, &opt, &load, &gen); !st.ok()) return Fail(st.message());
  Prompt prompt;
  std::unique_ptr<tokenizer::Tokenizer> tok;  // with --prompt only
  if (Status st = ReadPromptTokens(a, &prompt, &tok); !st.ok()) return Fail(st.message());

  std::fprintf(stderr, "loading %s ...\n", a.Get("model").c_str());
  const auto t_load = Clock::now();
  StatusOr<std::unique_ptr<Model>> loaded = Model::Load(a.Get("model"), load);
  if (!loaded.ok()) return Fail(loaded.status().message());
  const Model& m = *loaded.value();
  const ModelInfo& info = m.info();
  if (Status st = GgufPromptTokens(a, m, &prompt, &tok); !st.ok()) return Fail(st.message());
  std::fprintf(stderr, "loaded %s: %zu layers, hidden %lld, vocab %lld in %.2f s (%s)\n", info.model_type.c_str(),
               info.layers.size(), static_cast<long long>(info.hidden), static_cast<long long>(info.vocab),
               Seconds(t_load, Clock::now()), info.repacked ? "weights repacked for the GEMM" : "weights read as stored");
  io::NpyArray embeds;
  if (Status st = ReadImageInputs(a, info.hidden, &prompt, &embeds); !st.ok()) return Fail(st.message());
  ImageFeatures features;
  if (Status st = ReadImages(a, m, tok.get(), opt.matmul_precision, &prompt, &features); !st.ok())
    return Fail(st.message());
  StatusOr<std::unique_ptr<Session>> session = m.NewSession(opt);
  if (!session.ok()) {
    const bool hint = opt.matmul_precision == ops::MatmulPrecision::kBf16 && !load.convert_to;
    return Fail(session.status().message() + (hint ? " (--dtype bf16 converts the weights on load)" : ""));
  }
  Session& s = *session.value();
  if (prompt.tokens.size() > 1024)
    s.set_progress([](int64_t done, int64_t total) { std::fprintf(stderr, "prefill %lld / %lld\r", (long long)done, (long long)total); });
  if (!a.Has("no-stop")) gen.stop_tokens = info.eos_token_ids;
  gen.on_token = [&](int64_t, int32_t token) {
    if (tok) std::printf("%s", tok->Piece(token).c_str());
    else std::printf("%d ", token);
    std::fflush(stdout);
    return true;
  };
  GenerateOutput out;
  if (Status st = s.Generate({prompt}, gen, &out); !st.ok()) return Fail(st.message());
  std::printf("\n");
  const GenerateStats& g = out.stats;
  std::fprintf(stderr, "mode %s: prefill %lld tokens in %.3f s (%.1f tok/s); decode %lld tokens in %.3f s (%.1f tok/s)\n",
               ModeName(opt.mode), static_cast<long long>(g.prompt_tokens), g.prefill_seconds,
               g.prompt_tokens / g.prefill_seconds, static_cast<long long>(g.generated_tokens), g.decode_seconds,
               g.decode_steps > 0 ? g.decode_steps / g.decode_seconds : 0.0);
  if (gen.draft_tokens > 0)
    std::fprintf(stderr,
                 "draft: %lld tokens proposed (%.2f ms each), %lld accepted (%.1f%%) in %lld verification steps; "
                 "%.1f generated tok/s\n",
                 static_cast<long long>(g.drafted_tokens),
                 g.drafted_tokens ? 1e3 * g.draft_seconds / g.drafted_tokens : 0.0,
                 static_cast<long long>(g.accepted_tokens),
                 g.drafted_tokens ? 100.0 * g.accepted_tokens / g.drafted_tokens : 0.0,
                 static_cast<long long>(g.decode_steps), g.decode_seconds > 0 ? (g.generated_tokens - 1) / g.decode_seconds : 0.0);
  return 0;
}

}  // namespace tessera::cli
