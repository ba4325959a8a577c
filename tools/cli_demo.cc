// tessera demo: a Gemma-4-unified multimodal generation with the embedded random-weight model
// (models/demo-gemma4-unified): a prompt with one image block, run in the unified, bias and split
// modes, printing the per-layer mask structure, the tokens of each mode and their speed.
#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cli.h"
#include "tessera/engine.h"

#ifndef TESSERA_SOURCE_DIR
#define TESSERA_SOURCE_DIR "."
#endif

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Layout {
  std::vector<int32_t> tokens, types;
  int64_t image_start = 0, image_len = 0;
};

// BOS, text, BOI, image placeholders (one block), EOI, text. Text ids avoid the special ids.
StatusOr<Layout> MakePrompt(const ModelInfo& c, int64_t before, int64_t image, int64_t after) {
  if (!c.image_token_id || !c.boi_token_id || !c.eoi_token_id)
    return InvalidArgument("demo: the model config has no image/boi/eoi token ids");
  std::vector<int32_t> special;
  for (const std::optional<int32_t>& id : {c.image_token_id, c.boi_token_id, c.eoi_token_id, c.bos_token_id,
                                           c.video_token_id, c.audio_token_id, c.boa_token_id, c.eoa_token_id,
                                           c.pad_token_id})
    if (id) special.push_back(*id);
  for (int32_t e : c.eos_token_ids) special.push_back(e);
  if (c.vocab < 64) return InvalidArgument("demo: vocabulary too small for a demo prompt");
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int32_t> draw(0, static_cast<int32_t>(c.vocab - 1));
  auto text = [&](std::mt19937& r) {
    for (;;) {
      const int32_t t = draw(r);
      if (std::find(special.begin(), special.end(), t) == special.end()) return t;
    }
  };
  Layout p;
  auto push = [&](int64_t id, int32_t type) { p.tokens.push_back(static_cast<int32_t>(id)), p.types.push_back(type); };
  push(c.bos_token_id.value_or(2), 0);
  for (int64_t i = 0; i < before; ++i) push(text(rng), 0);
  push(*c.boi_token_id, 0);
  p.image_start = static_cast<int64_t>(p.tokens.size());
  p.image_len = image;
  for (int64_t i = 0; i < image; ++i) push(*c.image_token_id, 1);
  push(*c.eoi_token_id, 0);
  for (int64_t i = 0; i < after; ++i) push(text(rng), 0);
  return p;
}

// The tile structure each layer's prefill attention sees for this prompt (no data needed).
Status PrintMaskStructure(const Model& m, const Layout& p) {
  const ModelInfo& a = m.info();
  StatusOr<std::vector<TileCensus>> tiles = m.PrefillTiles({p.tokens, p.types, nullptr, 0});
  if (!tiles.ok()) return tiles.status();
  std::printf("per-layer mask (prefill of %zu tokens, image block at %lld..%lld; tiles of 64 keys):\n", p.tokens.size(),
              (long long)p.image_start, (long long)(p.image_start + p.image_len - 1));
  std::printf("  layer  kind     heads(q/kv x dim)  window  mask                        tiles empty/full/partial\n");
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerInfo& la = a.layers[l];
    const TileCensus& t = tiles.value()[l];
    std::printf("  %5zu  %-7s  %3lld/%lld x %-3lld          %6lld  %-26s  %lld/%lld/%lld%s\n", l, la.kind.c_str(),
                (long long)a.q_heads, (long long)la.kv_heads, (long long)la.head_dim, (long long)la.window,
                la.mask.c_str(), (long long)t.empty, (long long)t.full, (long long)t.partial,
                la.shared_kv ? "  (KV shared)" : "");
  }
  std::printf("  decode steps: one query per row, plain causal (+ window), same in-place cache\n\n");
  return Status::Ok();
}

struct ModeRun {
  double prefill_s = 1e30, decode_s = 1e30;  // fastest of the timed runs
  std::vector<int32_t> tokens;
};

// Each mode runs once untimed, then kRuns times, each in a fresh session, and reports its fastest
// prefill and decode: a run takes milliseconds, so one scheduler hiccup on a shared machine, or a
// cold start charged to whichever mode went first (bench/results/kernel_choices.md, "The demo's
// warm-up run"), would otherwise decide the table.
constexpr int kRuns = 3;

StatusOr<ModeRun> RunMode(const Model& m, Mode mode, const Prompt& prompt, int64_t max_new) {
  SessionOptions o;
  o.max_context = 512;
  o.max_chunk = 64;  // the prompt is prefilled in chunks; the image block is never split
  o.mode = mode;
  GenerateOptions g;
  g.max_new_tokens = max_new;  // greedy, no stop tokens: every mode makes max_new tokens
  ModeRun best;
  for (int run = 0; run <= kRuns; ++run) {  // run 0: warm-up
    StatusOr<std::unique_ptr<Session>> s = m.NewSession(o);
    if (!s.ok()) return s.status();
    GenerateOutput out;
    TESSERA_RETURN_IF_ERROR(s.value()->Generate({prompt}, g, &out));
    best.tokens = out.rows[0].tokens;
    if (run == 0) continue;
    best.prefill_s = std::min(best.prefill_s, out.stats.prefill_seconds);
    best.decode_s = std::min(best.decode_s, out.stats.decode_seconds);
  }
  return best;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "tessera demo: %s\n", s.message().c_str());
  return 1;
}

}  // namespace

int DemoCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv, {"model", "max-new-tokens", "threads"}, {});
  if (!parsed.ok()) return Fail(parsed.status()) + 1;
  const Args& args = parsed.value();
  const char* env = std::getenv("TESSERA_DEMO_MODEL");
  const std::string dir = args.Get("model", env ? env : TESSERA_SOURCE_DIR "/models/demo-gemma4-unified");
  StatusOr<int64_t> max_new = args.Int("max-new-tokens", 24), threads = args.Int("threads", DefaultThreadCount());
  if (!max_new.ok() || !threads.ok()) return Fail(max_new.ok() ? threads.status() : max_new.status()) + 1;
  std::printf("Tessera demo: Gemma-4-unified multimodal generation (random weights: the tokens are noise,\n"
              "the machinery is real).\nmodel: %s\n", dir.c_str());
  const auto t_load = Clock::now();
  LoadOptions load;
  load.repack_for = std::nullopt;  // a tiny model: read as stored
  load.threads = threads.value();
  StatusOr<std::unique_ptr<Model>> loaded = Model::Load(dir, load);
  if (!loaded.ok()) return Fail(loaded.status());
  const Model& m = *loaded.value();
  const ModelInfo& a = m.info();
  std::printf("loaded %s in %.1f ms: %zu layers, hidden %lld, vocab %lld\n\n", a.model_type.c_str(),
              std::chrono::duration<double, std::milli>(Clock::now() - t_load).count(), a.layers.size(),
              (long long)a.hidden, (long long)a.vocab);
  StatusOr<Layout> layout = MakePrompt(a, 40, 48, 40);
  if (!layout.ok()) return Fail(layout.status());
  const Layout& p = layout.value();
  if (Status st = PrintMaskStructure(m, p); !st.ok()) return Fail(st);

  // Image soft-token embeddings (what a vision tower would produce): fixed random rows.
  std::vector<float> image(p.image_len * a.hidden);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (float& x : image) x = nd(rng);
  const Prompt prompt{p.tokens, p.types, image.data(), p.image_len};

  std::vector<int32_t> reference;
  bool agree = true;
  std::printf("%-8s %10s %12s %12s   tokens   (times: fastest of %d runs after a warm-up)\n", "mode", "prefill ms",
              "prefill t/s", "decode t/s", kRuns);
  for (Mode mode : {Mode::kUnified, Mode::kBias, Mode::kSplit}) {
    StatusOr<ModeRun> r = RunMode(m, mode, prompt, max_new.value());
    if (!r.ok()) return Fail(r.status());
    const ModeRun& run = r.value();
    std::printf("%-8s %10.2f %12.0f %12.0f  ", ModeName(mode), run.prefill_s * 1e3, p.tokens.size() / run.prefill_s,
                (run.tokens.size() - 1) / run.decode_s);
    for (int32_t t : run.tokens) std::printf(" %d", t);
    std::printf("\n");
    if (mode == Mode::kUnified) reference = run.tokens;
    agree &= run.tokens == reference;
  }
  std::printf("\n%s\n", agree ? "all three modes produced the same tokens"
                              : "MODES DISAGREE: this is a bug (all modes must produce the same tokens)");
  return agree ? 0 : 1;
}

}  // namespace tessera::cli
