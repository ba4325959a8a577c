#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "runtime/generator.h"
#include "runtime/sampler.h"

namespace tessera::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The first index of the largest value: greedy sampling's choice (lowest id on ties).
int32_t Argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

Status CheckOptions(const Session& s, const std::vector<Prompt>& prompts, const GenerateOptions& o) {
  TESSERA_RETURN_IF_ERROR(ValidateGenerateOptions(o));
  const int64_t k = o.draft_tokens;
  if (k < 1 || k + 1 > s.options().verify_tokens)
    return InvalidArgument("Generate: draft_tokens " + std::to_string(k) +
                           " needs 1 <= draft_tokens < the session's verify_tokens " +
                           std::to_string(s.options().verify_tokens));
  if (prompts.size() != 1 || s.options().max_batch != 1 || s.options().mode != Mode::kUnified)
    return InvalidArgument("Generate: speculative decoding (draft_tokens) takes one prompt in a one-row unified "
                           "session, got " + std::to_string(prompts.size()) + " prompts, max_batch " +
                           std::to_string(s.options().max_batch));
  return Status::Ok();
}

// One generation's state: its buffers (sized once) and the row's output so far.
class Run {
 public:
  Run(Session& s, const model::Drafter& d, const GenerateOptions& o, GenerateOutput* out)
      : s_(s), d_(d), o_(o), out_(out), V_(s.model().arch().vocab), H_(s.model().arch().hidden),
        sampler_(o.sampling, V_) {
    logits_.resize((o.draft_tokens + 1) * V_);
    hidden_.resize((o.draft_tokens + 1) * H_);
    state_.resize(H_);
    step_.resize(o.draft_tokens + 1);
  }

  Status Prefill(const Prompt& p) {
    TESSERA_RETURN_IF_ERROR(s_.ClearRow(0));
    s_.set_cancel(o_.cancel);
    const Status st = s_.Prefill({p}, logits_.data());
    s_.set_cancel(nullptr);
    if (st.code() == StatusCode::kCancelled) return Finish(FinishReason::kCancelled), Status::Ok();
    TESSERA_RETURN_IF_ERROR(st);
    std::memcpy(state_.data(), s_.last_hidden(0), H_ * sizeof(float));
    if (o_.max_new_tokens == 0) return Finish(FinishReason::kLength), Status::Ok();
    int32_t first = 0;
    TESSERA_RETURN_IF_ERROR(sampler_.Sample(logits_.data(), &first));
    Emit(first, s_.position(0));
    return Status::Ok();
  }

  // One round: k drafts from the last seen token, one verification step, rewind.
  Status Round(model::DrafterScratch& scratch) {
    if (o_.cancel && o_.cancel->load()) return Finish(FinishReason::kCancelled), Status::Ok();
    const int64_t s = s_.position(0);  // the last seen token's position: its K/V is not cached yet
    const int64_t room = s_.options().max_context - s - 1;  // >= 0: Emit finished the row otherwise
    const int64_t left = o_.max_new_tokens - static_cast<int64_t>(row().tokens.size());
    const int64_t k = std::min({o_.draft_tokens, left - 1, room});  // a round emits up to k + 1
    step_[0] = row().tokens.back();
    const Clock::time_point t0 = Clock::now();
    for (int64_t j = 0; j < k; ++j) {  // state_ carries each step's projected output to the next
      TESSERA_RETURN_IF_ERROR(d_.Step(s_.cache(), 0, step_[j], static_cast<int32_t>(s), state_.data(), logits_.data(),
                                      state_.data(), scratch, s_.pool()));
      step_[j + 1] = Argmax(logits_.data(), V_);
    }
    out_->stats.draft_seconds += Since(t0);
    TESSERA_RETURN_IF_ERROR(s_.Verify(step_.data(), k + 1, logits_.data(), hidden_.data()));
    ++out_->stats.decode_steps;
    // Drafts accepted (greedy: each is the model's own argmax after the tokens before it; sampling:
    // the distribution-preserving rule, Sampler::Verify), then the token after them: the
    // correction at the first rejection, else the bonus token drawn from the last row.
    int64_t n = 0;
    int32_t next = 0;
    for (;; ++n) {
      if (n == k) {
        TESSERA_RETURN_IF_ERROR(sampler_.Sample(logits_.data() + k * V_, &next));
        break;
      }
      bool accepted = false;
      TESSERA_RETURN_IF_ERROR(sampler_.Verify(logits_.data() + n * V_, step_[n + 1], &accepted, &next));
      if (!accepted) break;
    }
    out_->stats.drafted_tokens += k;
    out_->stats.accepted_tokens += n;
    for (int64_t j = 1; j <= n && !done_; ++j) Emit(step_[j], s + j);
    if (done_) return Status::Ok();
    Emit(next, s + n + 1);
    if (done_) return Status::Ok();
    // Keep the K/V of positions s .. s + n; the new last seen token's comes next round.
    if (k > n) TESSERA_RETURN_IF_ERROR(s_.RewindRow(0, k - n));
    std::memcpy(state_.data(), hidden_.data() + n * H_, H_ * sizeof(float));
    return Status::Ok();
  }

  bool done() const { return done_; }
  RowOutput& row() { return row_; }

 private:
  // Records and streams token t, which stands at position pos; finishes the row as
  // TokenStream::Next would (cancelled, stop, length, then no room to decode it).
  void Emit(int32_t t, int64_t pos) {
    row_.tokens.push_back(t);
    const std::vector<int32_t>& stop = o_.stop_tokens;
    if (o_.on_token && !o_.on_token(0, t)) Finish(FinishReason::kCancelled);
    else if (std::find(stop.begin(), stop.end(), t) != stop.end()) Finish(FinishReason::kStop);
    else if (static_cast<int64_t>(row_.tokens.size()) >= o_.max_new_tokens) Finish(FinishReason::kLength);
    else if (pos + 1 > s_.options().max_context) Finish(FinishReason::kContext);
  }
  void Finish(FinishReason r) { done_ = true, row_.finish = r; }

  Session& s_;
  const model::Drafter& d_;
  const GenerateOptions& o_;
  GenerateOutput* out_;
  const int64_t V_, H_;
  std::vector<float> logits_, hidden_, state_;  // [k + 1, vocab], [k + 1, hidden], [hidden]
  std::vector<int32_t> step_;                   // [k + 1] the last seen token, then the drafts
  Sampler sampler_;                             // the row's, seeded by o.sampling.seed
  RowOutput row_;
  bool done_ = false;
};

}  // namespace

Status GenerateSpeculative(Session& session, const model::Drafter& drafter, const std::vector<Prompt>& prompts,
                           const GenerateOptions& o, GenerateOutput* out) {
  TESSERA_RETURN_IF_ERROR(CheckOptions(session, prompts, o));
  StatusOr<std::unique_ptr<model::DrafterScratch>> scratch = drafter.NewScratch(session.cache(), session.pool());
  if (!scratch.ok()) return scratch.status();
  *out = {};
  out->stats.prompt_tokens = static_cast<int64_t>(prompts[0].tokens.size());
  Run run(session, drafter, o, out);
  const auto t0 = Clock::now();
  const Status prefilled = run.Prefill(prompts[0]);
  out->stats.prefill_seconds = Since(t0);
  Status st = prefilled;
  const auto t1 = Clock::now();
  while (st.ok() && !run.done()) st = run.Round(*scratch.value());
  out->stats.decode_seconds = Since(t1);
  out->stats.generated_tokens = static_cast<int64_t>(run.row().tokens.size());
  out->rows.push_back(std::move(run.row()));  // on an error too: the tokens streamed stay in *out
  return st;
}

}  // namespace tessera::runtime
