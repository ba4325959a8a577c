// Speculative decoding's cost model (docs/speculative.md): one verification step of n = k + 1
// tokens against one decode step, at a given context, on the main model; the drafter's step when
// --draft is given; and from those the tokens/s a drafter with per-token acceptance a would give
// (expected tokens per round (1 - a^(k+1)) / (1 - a)) and the acceptance needed to break even.
// Memory-bound decode reads every weight once per step whatever n is, so verification should cost
// close to one decode step; the roofline is the weight bytes over the measured read bandwidth.
//
//   build/release/tessera_bench_speculative --model DIR [--draft DIR] [--context 512] [--threads N]
//                                           [--reps 9] [--precision bf16] [--quantize q4_0|q8_0|q4_k_m|q5_k_m]
//                                           [--draft-quantize q8_0|q4_0]
// --quantize: the main model's matrices quantized on load (a checkpoint directory; a GGUF given as
// --model runs as stored), the CPU user's case; --precision then sets KV and attention only.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "roofline.h"
#include "tessera/engine.h"
#include "tessera/quantize.h"

using namespace tessera;

namespace {

// Expected tokens per round with k drafts, each accepted with probability a independently.
double TokensPerRound(double a, int k) { return a >= 1 ? k + 1 : (1 - std::pow(a, k + 1)) / (1 - a); }

// The smallest acceptance at which a round of k drafts beats plain decoding (bisection).
double BreakEven(double round_ms, double decode_ms, int k) {
  double lo = 0, hi = 1;
  if (TokensPerRound(1, k) * decode_ms < round_ms) return NAN;
  for (int i = 0; i < 50; ++i) {
    const double mid = (lo + hi) / 2;
    (TokensPerRound(mid, k) * decode_ms >= round_ms ? hi : lo) = mid;
  }
  return hi;
}

// End to end with the drafter: generated tok/s for k drafted tokens against plain decoding (k = 0),
// the acceptance, the draft step as timed (GenerateStats::draft_seconds per proposal) and the rest
// of each round (its verification step, acceptance and rewind) against the plain decode step of
// the same run. Tokens must equal plain decoding's (k = 0). False when a step failed.
bool PrintGeneration(Session& s, Prompt p, int64_t context) {
  bool ok = true;
  std::printf("\n| k | generated tok/s | / plain | acceptance | tokens per round | draft step (ms) "
              "| rest of a round / plain step | same tokens as plain |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::vector<int32_t> plain_tokens;
  double plain_tps = 0, plain_step = 0;
  for (int k : {0, 1, 2, 3, 4, 8}) {
    GenerateOptions g;
    g.max_new_tokens = 48;
    g.draft_tokens = k;
    GenerateOutput out;
    p.tokens.resize(std::min<int64_t>(context, 256));
    ok &= s.Generate({p}, g, &out).ok();
    const GenerateStats& st = out.stats;
    const double tps = st.decode_seconds > 0 ? (st.generated_tokens - 1) / st.decode_seconds : 0;
    const double rounds = static_cast<double>(st.decode_steps);
    if (k == 0) plain_tokens = out.rows.at(0).tokens, plain_tps = tps, plain_step = st.decode_seconds / rounds;
    const double draft_ms = st.drafted_tokens ? 1e3 * st.draft_seconds / static_cast<double>(st.drafted_tokens) : 0.0;
    const double rest = (st.decode_seconds - st.draft_seconds) / rounds;
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n", k, tps,
                plain_tps > 0 ? tps / plain_tps : 0.0,
                st.drafted_tokens ? double(st.accepted_tokens) / st.drafted_tokens : 0.0,
                rounds > 0 ? double(st.generated_tokens - 1) / rounds : 0.0, draft_ms,
                plain_step > 0 ? rest / plain_step : 0.0, out.rows.at(0).tokens == plain_tokens ? "yes" : "NO");
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = bench::CheckArgs(argc, argv,
                                      " --model DIR [--draft DIR] [--context 512] [--threads N] [--reps 9] "
                                      "[--precision bf16] [--quantize TYPE] [--draft-quantize q8_0|q4_0]\n");
      rc >= 0)
    return rc;
  std::string dir, draft;
  int64_t context = 512, reps = 9;
  int threads = DefaultThreadCount();
  bool bf16 = false;  // --precision bf16: bf16 matmuls, KV and attention (a bf16 checkpoint)
  std::optional<QuantizeFileType> quantize, draft_quantize;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") dir = argv[i + 1];
    else if (a == "--draft") draft = argv[i + 1];
    else if (a == "--context") context = std::atoll(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--reps") reps = std::atoll(argv[i + 1]);
    else if (a == "--precision") bf16 = std::string(argv[i + 1]) == "bf16";
    else if (a == "--quantize" || a == "--draft-quantize") {
      QuantizeFileType q;
      if (!ParseQuantizeFileType(argv[i + 1], &q))
        return std::fprintf(stderr, "%s: unknown type %s\n", a.c_str(), argv[i + 1]), 2;
      (a == "--quantize" ? quantize : draft_quantize) = q;
    }
  }
  if (dir.empty()) return std::fprintf(stderr, "--model DIR is required\n"), 2;
  LoadOptions lo;
  lo.threads = threads;
  lo.draft = draft;
  lo.quantize = quantize;
  lo.draft_quantize = draft_quantize;
  if (bf16 && !quantize) lo.repack_for = ops::MatmulPrecision::kBf16;
  auto model = Model::Load(dir, lo);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().message().c_str()), 1;
  const ModelInfo& info = model.value()->info();
  SessionOptions so;
  so.max_context = context + 64;
  so.max_chunk = 16;
  so.verify_tokens = 9;
  if (bf16) {
    if (!quantize) so.matmul_precision = ops::MatmulPrecision::kBf16;
    so.kv_dtype = DType::kBF16;
    so.attention_precision = AttentionPrecision::kBf16;
  }
  auto session = model.value()->NewSession(so);
  if (!session.ok()) return std::fprintf(stderr, "%s\n", session.status().message().c_str()), 1;
  Session& s = *session.value();
  Prompt p;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> text(16, static_cast<int32_t>(info.vocab - 1));
  for (int64_t i = 0; i < context; ++i) p.tokens.push_back(text(rng));
  std::vector<float> logits(9 * info.vocab);
  if (Status st = s.Prefill({p}, logits.data()); !st.ok()) return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  std::vector<int32_t> step(9);
  for (int32_t& t : step) t = text(rng);
  bool ok = true;
  auto verify_ms = [&](int64_t n) {
    return bench::MedianMs(static_cast<int>(reps), [&] {
      ok &= s.Verify(step.data(), n, logits.data()).ok();
      ok &= s.Rewind(0, n).ok();
    });
  };
  const double decode = bench::MedianMs(static_cast<int>(reps), [&] {
    ok &= s.Decode(step.data(), nullptr, logits.data()).ok();
    ok &= s.Rewind(0, 1).ok();
  });
  const double gbs = bench::ReadBandwidthGBs(threads);
  std::printf("model %s%s%s, context %lld, %d threads, precision %s; read bandwidth %.1f GB/s\n",
              info.model_type.c_str(), quantize ? " quantized " : "", quantize ? QuantizeFileTypeName(*quantize) : "",
              static_cast<long long>(context), threads, bf16 ? "bf16" : "f32", gbs);
  std::printf("decode step: %.2f ms\n\n", decode);
  std::printf("| k | verify k+1 tokens (ms) | / decode step | break-even acceptance (drafter free) |\n");
  std::printf("| --- | --- | --- | --- |\n");
  for (int k = 1; k <= 8; ++k) {
    const double v = verify_ms(k + 1);
    std::printf("| %d | %.2f | %.2f | %.2f |\n", k, v, v / decode, BreakEven(v, decode, k));
  }
  if (!draft.empty()) ok &= PrintGeneration(s, p, context);
  if (!ok) return std::fprintf(stderr, "a step failed\n"), 1;
  return 0;
}
