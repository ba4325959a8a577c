#include "runtime/speculative.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace tessera::runtime {
namespace {

// The first index of the largest value: what greedy decoding and torch's argmax pick.
int32_t Argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// The generation's buffers, sized once before the first round.
struct Buffers {
  std::vector<float> logits, verify_logits, verify_hidden, state, draft_logits;
  std::vector<int32_t> step;  // [k + 1] the last seen token and the drafts
};

}  // namespace

Status SpeculativeGenerate(Session& session, const model::Drafter& drafter, const Prompt& prompt,
                           const SpeculativeOptions& o, ThreadPool* pool, std::vector<int32_t>* out,
                           SpeculativeStats* stats) {
  const int64_t V = session.model().arch().vocab, H = session.model().arch().hidden, k = o.draft_tokens;
  if (k < 1 || k + 1 > session.options().verify_tokens)
    return InvalidArgument("SpeculativeGenerate: draft_tokens " + std::to_string(k) +
                           " needs 1 <= k and k + 1 <= the session's verify_tokens " +
                           std::to_string(session.options().verify_tokens));
  if (session.options().max_batch != 1)
    return InvalidArgument("SpeculativeGenerate: needs a one-row session (max_batch 1)");
  out->clear();
  *stats = SpeculativeStats{};
  if (o.max_new_tokens <= 0) return Status::Ok();
  StatusOr<std::unique_ptr<model::DrafterScratch>> scratch = drafter.NewScratch(session.cache(), pool);
  if (!scratch.ok()) return scratch.status();
  Buffers b;
  b.logits.resize(V);
  b.verify_logits.resize((k + 1) * V);
  b.verify_hidden.resize((k + 1) * H);
  b.state.resize(H);
  b.draft_logits.resize(V);
  b.step.resize(k + 1);
  TESSERA_RETURN_IF_ERROR(session.ClearRow(0));
  TESSERA_RETURN_IF_ERROR(session.Prefill({prompt}, b.logits.data()));
  std::memcpy(b.state.data(), session.last_hidden(0), H * sizeof(float));
  auto stop = [&](int32_t t) { return std::find(o.stop_tokens.begin(), o.stop_tokens.end(), t) != o.stop_tokens.end(); };
  int32_t last = Argmax(b.logits.data(), V);  // the last seen token: its K/V is not cached yet
  out->push_back(last);
  const int64_t max_context = session.options().max_context;
  while (static_cast<int64_t>(out->size()) < o.max_new_tokens && !stop(last)) {
    const int64_t s = session.position(0);  // the last seen token's position
    // A round emits up to kr + 1 tokens, and needs kr + 1 cache slots.
    const int64_t kr = std::min({k, o.max_new_tokens - static_cast<int64_t>(out->size()) - 1, max_context - s - 1});
    if (kr < 0)
      return OutOfRange("SpeculativeGenerate: row 0 is at max_context " + std::to_string(max_context));
    b.step[0] = last;
    int32_t token = last;
    for (int64_t j = 0; j < kr; ++j) {  // the state carries each step's projected output on
      TESSERA_RETURN_IF_ERROR(drafter.Step(session.cache(), 0, token, static_cast<int32_t>(s), b.state.data(),
                                           b.draft_logits.data(), b.state.data(), *scratch.value(), pool));
      token = Argmax(b.draft_logits.data(), V);
      b.step[j + 1] = token;
    }
    TESSERA_RETURN_IF_ERROR(session.Verify(b.step.data(), kr + 1, b.verify_logits.data(), b.verify_hidden.data()));
    int64_t n = 0;  // drafts accepted: each equals the main model's argmax after the tokens before it
    while (n < kr && Argmax(b.verify_logits.data() + n * V, V) == b.step[n + 1]) ++n;
    ++stats->rounds;
    stats->drafted += kr;
    stats->accepted += n;
    for (int64_t j = 1; j <= n && !stop(out->back()); ++j) out->push_back(b.step[j]);
    if (stop(out->back())) break;
    last = Argmax(b.verify_logits.data() + n * V, V);  // the correction, or the bonus token
    out->push_back(last);
    // Keep the K/V of positions s .. s + n; the last seen token's is computed next round.
    if (kr > n) TESSERA_RETURN_IF_ERROR(session.RewindRow(0, kr - n));
    std::memcpy(b.state.data(), b.verify_hidden.data() + n * H, H * sizeof(float));
  }
  return Status::Ok();
}

}  // namespace tessera::runtime
