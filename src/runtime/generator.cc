#include "runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace tessera::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool Cancelled(const GenerateOptions& o) { return o.cancel && o.cancel->load(); }

// After the prefill: per row sample / stream / stop, then one decode step for the rows still
// going, until none is. `logits` holds [rows, vocab] for the current step.
Status DecodeRows(Session& s, const GenerateOptions& o, std::vector<TokenStream>& rows, std::vector<float>& logits,
                  GenerateStats* stats) {
  const int64_t B = static_cast<int64_t>(rows.size()), V = s.model().arch().vocab;
  const int64_t max_context = s.options().max_context;
  std::vector<int32_t> next(B, 0);
  std::vector<uint8_t> active(B, 1);
  for (;;) {
    bool any = false;
    for (int64_t b = 0; b < B; ++b) {
      if (!active[b]) continue;
      if (Cancelled(o)) rows[b].Cancel();
      else TESSERA_RETURN_IF_ERROR(rows[b].Next(logits.data() + b * V, s.position(b) + 1 <= max_context));
      if (rows[b].done()) active[b] = 0;
      else next[b] = rows[b].last();
      any |= active[b];
    }
    if (!any) return Status::Ok();
    // The bias baseline keeps one cache length for the batch: finished rows decode on (their
    // outputs are dropped) instead of pausing.
    const bool all_rows = s.options().mode == Mode::kBias;
    TESSERA_RETURN_IF_ERROR(s.Decode(next.data(), all_rows ? nullptr : active.data(), logits.data()));
    ++stats->decode_steps;
  }
}

}  // namespace

Status ValidateGenerateOptions(const GenerateOptions& o) {
  TESSERA_RETURN_IF_ERROR(ValidateSampling(o.sampling));
  if (o.max_new_tokens < 0)
    return InvalidArgument("Generate: max_new_tokens = " + std::to_string(o.max_new_tokens) + " must be >= 0");
  return Status::Ok();
}

Status TokenStream::Next(const float* logits, bool room) {
  if (options_.max_new_tokens == 0) {  // nothing to sample: the prompt alone was asked for
    Finish(FinishReason::kLength);
    return Status::Ok();
  }
  int32_t token = 0;
  const Status st = sampler_.Sample(logits, &token);
  if (!st.ok())
    return InvalidArgument("Generate: step " + std::to_string(out_.tokens.size()) + ", row " + std::to_string(row_) +
                           ": " + st.message());
  out_.tokens.push_back(token);
  const bool keep = !options_.on_token || options_.on_token(row_, token);
  const std::vector<int32_t>& stop = options_.stop_tokens;
  if (!keep) Finish(FinishReason::kCancelled);
  else if (std::find(stop.begin(), stop.end(), token) != stop.end()) Finish(FinishReason::kStop);
  else if (static_cast<int64_t>(out_.tokens.size()) >= options_.max_new_tokens) Finish(FinishReason::kLength);
  else if (!room) Finish(FinishReason::kContext);
  return Status::Ok();
}

Status Generate(Session& s, const std::vector<Prompt>& prompts, const GenerateOptions& o, GenerateOutput* out) {
  TESSERA_RETURN_IF_ERROR(ValidateGenerateOptions(o));
  const int64_t B = static_cast<int64_t>(prompts.size()), V = s.model().arch().vocab;
  std::vector<float> logits(B * V);
  std::vector<TokenStream> rows;
  rows.reserve(B);
  for (int64_t b = 0; b < B; ++b) rows.emplace_back(b, o, V);
  *out = {};
  for (const Prompt& p : prompts) out->stats.prompt_tokens += static_cast<int64_t>(p.tokens.size());
  auto finish = [&]() {
    for (TokenStream& r : rows) {
      out->stats.generated_tokens += static_cast<int64_t>(r.output().tokens.size());
      out->rows.push_back(std::move(r.output()));
    }
  };
  s.set_cancel(o.cancel);
  const auto t0 = Clock::now();
  const Status prefilled = s.Prefill(prompts, logits.data());
  s.set_cancel(nullptr);
  out->stats.prefill_seconds = Since(t0);
  if (prefilled.code() == StatusCode::kCancelled) {
    for (TokenStream& r : rows) r.Cancel();
    finish();
    return Status::Ok();
  }
  TESSERA_RETURN_IF_ERROR(prefilled);
  const auto t1 = Clock::now();
  const Status st = DecodeRows(s, o, rows, logits, &out->stats);
  out->stats.decode_seconds = Since(t1);
  finish();  // on an error too: the tokens made (and streamed) before it stay in *out
  return st;
}

}  // namespace tessera::runtime
