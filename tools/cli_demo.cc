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
#include "model/loaded_model.h"
#include "runtime/session.h"

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
StatusOr<Layout> MakePrompt(const model::ModelConfig& c, int64_t before, int64_t image, int64_t after) {
  if (!c.image_token_id || !c.boi_token_id || !c.eoi_token_id)
    return InvalidArgument("demo: the model config has no image/boi/eoi token ids");
  std::vector<int64_t> special;
  for (const std::optional<int64_t>& id : {c.image_token_id, c.boi_token_id, c.eoi_token_id, c.bos_token_id,
                                           c.video_token_id, c.audio_token_id, c.boa_token_id, c.eoa_token_id,
                                           c.pad_token_id})
    if (id) special.push_back(*id);
  for (int64_t e : c.eos_token_ids) special.push_back(e);
  if (c.vocab_size < 64) return InvalidArgument("demo: vocabulary too small for a demo prompt");
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int32_t> draw(0, static_cast<int32_t>(c.vocab_size - 1));
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
void PrintMaskStructure(const model::GemmaArch& a, const Layout& p) {
  const int64_t S = static_cast<int64_t>(p.tokens.size());
  std::vector<int32_t> pos(S), blk(S, -1);
  for (int64_t i = 0; i < S; ++i) pos[i] = static_cast<int32_t>(i);
  for (int64_t i = p.image_start; i < p.image_start + p.image_len; ++i) blk[i] = 0;
  std::printf("per-layer mask (prefill of %lld tokens, image block at %lld..%lld; tiles of 64 keys):\n",
              (long long)S, (long long)p.image_start, (long long)(p.image_start + p.image_len - 1));
  std::printf("  layer  kind     heads(q/kv x dim)  window  mask                        tiles empty/full/partial\n");
  for (int64_t l = 0; l < a.num_layers(); ++l) {
    const model::LayerArch& la = a.layers[l];
    AttentionParams q;
    q.q = {nullptr, DType::kF32, 1, a.q_heads, S, la.head_dim, 0, 0, 0};
    q.k = {nullptr, DType::kF32, 1, la.kv_heads, S, la.head_dim, 0, 0, 0};
    q.mask.q_pos = q.mask.k_pos = pos.data();
    model::SetLayerMask(la, /*causal=*/true, blk.data(), blk.data(), &q.mask);
    const TileCensus t = CensusPrefillTiles(q);
    std::printf("  %5lld  %-7s  %3lld/%lld x %-3lld          %6lld  %-26s  %lld/%lld/%lld%s\n", (long long)l,
                kv::LayerKindName(la.kind), (long long)a.q_heads, (long long)la.kv_heads, (long long)la.head_dim,
                (long long)la.window, model::MaskRuleName(la), (long long)t.empty, (long long)t.full, (long long)t.partial,
                la.shared_kv ? "  (KV shared)" : "");
  }
  std::printf("  decode steps: one query per row, plain causal (+ window), same in-place cache\n\n");
}

}  // namespace

int DemoCommand(int argc, char** argv) {
  StatusOr<Args> parsed = Args::Parse(argc, argv, {"model", "max-new-tokens", "threads"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "tessera demo: %s\n", parsed.status().message().c_str());
    return 2;
  }
  const Args& args = parsed.value();
  const char* env = std::getenv("TESSERA_DEMO_MODEL");
  const std::string dir = args.Get("model", env ? env : TESSERA_SOURCE_DIR "/models/demo-gemma4-unified");
  StatusOr<int64_t> max_new = args.Int("max-new-tokens", 24), threads = args.Int("threads", DefaultThreadCount());
  if (!max_new.ok() || !threads.ok()) {
    std::fprintf(stderr, "tessera demo: %s\n", (max_new.ok() ? threads.status() : max_new.status()).message().c_str());
    return 2;
  }
  std::printf("Tessera demo: Gemma-4-unified multimodal generation (random weights: the tokens are noise,\n"
              "the machinery is real).\nmodel: %s\n", dir.c_str());
  const auto t_load = Clock::now();
  StatusOr<std::unique_ptr<model::LoadedModel>> loaded = model::LoadedModel::Load(dir);
  if (!loaded.ok()) {
    std::fprintf(stderr, "tessera demo: %s\n", loaded.status().message().c_str());
    return 1;
  }
  const model::GemmaModel& m = loaded.value()->model();
  const model::GemmaArch& a = m.arch();
  std::printf("loaded %s in %.1f ms: %lld layers, hidden %lld, vocab %lld\n\n", a.model_type.c_str(),
              std::chrono::duration<double, std::milli>(Clock::now() - t_load).count(), (long long)a.num_layers(),
              (long long)a.hidden, (long long)a.vocab);
  StatusOr<Layout> layout = MakePrompt(loaded.value()->config(), 40, 48, 40);
  if (!layout.ok()) {
    std::fprintf(stderr, "tessera demo: %s\n", layout.status().message().c_str());
    return 1;
  }
  const Layout& p = layout.value();
  PrintMaskStructure(a, p);

  // Image soft-token embeddings (what a vision tower would produce): fixed random rows.
  std::vector<float> image(p.image_len * a.hidden);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (float& x : image) x = nd(rng);
  runtime::Prompt prompt{p.tokens, p.types, image.data(), p.image_len};

  StatusOr<std::unique_ptr<ThreadPool>> pool_or = ThreadPool::Create(threads.value());
  if (!pool_or.ok()) {
    std::fprintf(stderr, "tessera demo: --threads: %s\n", pool_or.status().message().c_str());
    return 1;
  }
  ThreadPool& pool = *pool_or.value();
  std::vector<int32_t> reference;
  bool agree = true;
  // Each mode runs once untimed, then kRuns times, each in a fresh session, and reports its fastest
  // prefill and decode: a run takes milliseconds, so one scheduler hiccup on a shared machine, or a
  // cold start charged to whichever mode went first (bench/results/kernel_choices.md, "The demo's
  // warm-up run"), would otherwise decide the table.
  constexpr int kRuns = 3;
  std::printf("%-8s %10s %12s %12s   tokens   (times: fastest of %d runs after a warm-up)\n", "mode", "prefill ms",
              "prefill t/s", "decode t/s", kRuns);
  for (runtime::Mode mode : {runtime::Mode::kUnified, runtime::Mode::kBias, runtime::Mode::kSplit}) {
    runtime::SessionOptions o;
    o.max_context = 512;
    o.max_chunk = 64;  // the prompt is prefilled in chunks; the image block is never split
    o.mode = mode;
    double pre = 1e30, dec = 1e30;
    std::vector<int32_t> tokens;
    for (int run = 0; run <= kRuns; ++run) {  // run 0: warm-up
      StatusOr<std::unique_ptr<runtime::Session>> s = runtime::Session::Create(m, o, &pool);
      if (!s.ok()) {
        std::fprintf(stderr, "tessera demo: %s\n", s.status().message().c_str());
        return 1;
      }
      std::vector<float> logits(a.vocab);
      runtime::Sampler sampler({}, a.vocab);
      const auto t0 = Clock::now();
      Status st = s.value()->Prefill({prompt}, logits.data());
      const auto t1 = Clock::now();
      tokens.clear();
      for (int64_t i = 0; st.ok() && i < max_new.value(); ++i) {
        int32_t tok = 0;
        st = sampler.Sample(logits.data(), &tok);
        if (!st.ok()) break;
        tokens.push_back(tok);
        if (i + 1 < max_new.value()) st = s.value()->Decode(&tok, nullptr, logits.data());
      }
      const auto t2 = Clock::now();
      if (!st.ok()) {
        std::fprintf(stderr, "tessera demo: %s\n", st.message().c_str());
        return 1;
      }
      if (run == 0) continue;
      pre = std::min(pre, std::chrono::duration<double>(t1 - t0).count());
      dec = std::min(dec, std::chrono::duration<double>(t2 - t1).count());
    }
    std::printf("%-8s %10.2f %12.0f %12.0f  ", runtime::ModeName(mode), pre * 1e3, p.tokens.size() / pre,
                (tokens.size() - 1) / dec);
    for (int32_t t : tokens) std::printf(" %d", t);
    std::printf("\n");
    if (mode == runtime::Mode::kUnified) reference = tokens;
    agree &= tokens == reference;
  }
  std::printf("\n%s\n", agree ? "all three modes produced the same tokens"
                              : "MODES DISAGREE: this is a bug (all modes must produce the same tokens)");
  return agree ? 0 : 1;
}

}  // namespace tessera::cli
