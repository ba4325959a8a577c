#include "runtime/request_runner.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace tessera::runtime {

RequestRunner::RequestRunner(const model::GemmaModel& model, std::unique_ptr<Session> session)
    : model_(model), session_(std::move(session)) {
  const int64_t n = session_->max_batch(), context = session_->options().max_context;
  slots_.resize(n);
  for (Slot& s : slots_) {  // a slot's history never exceeds its cache row: no growth in Step()
    s.tokens.reserve(context);
    s.types.reserve(context);
    s.blocks.reserve(context);
    s.embedded.reserve(context);
  }
  chunks_.resize(n);
  logits_.resize(n * model.arch().vocab);
}

StatusOr<std::unique_ptr<RequestRunner>> RequestRunner::Create(const model::GemmaModel& model,
                                                               const SessionOptions& options, ThreadPool* pool) {
  if (options.mode != Mode::kUnified)
    return InvalidArgument(std::string("RequestBatch: requests at their own positions need mode unified, not ") +
                           ModeName(options.mode));
  if (options.all_logits) return InvalidArgument("RequestBatch: all_logits is for Session::Prefill only");
  StatusOr<std::unique_ptr<Session>> s = Session::Create(model, options, pool);
  if (!s.ok()) return s.status();
  return std::unique_ptr<RequestRunner>(new RequestRunner(model, std::move(s.value())));
}

Status RequestRunner::Validate(const Prompt& p) const {
  const model::GemmaArch& a = model_.arch();
  const SessionOptions& o = session_->options();
  const int64_t len = static_cast<int64_t>(p.tokens.size());
  if (len == 0) return InvalidArgument("RequestBatch::Add: the prompt is empty");
  if (len > o.max_context)
    return OutOfRange("RequestBatch::Add: the prompt has " + std::to_string(len) + " tokens, more than max_context " +
                      std::to_string(o.max_context));
  if (!p.token_types.empty() && static_cast<int64_t>(p.token_types.size()) != len)
    return InvalidArgument("RequestBatch::Add: " + std::to_string(p.token_types.size()) + " token types for " +
                           std::to_string(len) + " tokens");
  int64_t placeholders = 0;
  for (int64_t i = 0; i < len; ++i) {
    const bool image = a.IsPlaceholder(p.tokens[i]);
    placeholders += image;
    if (!model_.TokenOk(p.tokens[i], image))
      return model_.TokenError(p.tokens[i], "RequestBatch::Add: ", " at prompt position " + std::to_string(i));
  }
  if (placeholders != p.image_rows || (p.image_rows > 0 && p.image_embeds == nullptr))
    return InvalidArgument("RequestBatch::Add: the prompt has " + std::to_string(placeholders) +
                           " image placeholder tokens but " + std::to_string(p.image_rows) + " image embedding rows");
  std::vector<int32_t> blocks;
  BlockIds(p, a.block_token_types, blocks);
  for (int64_t i = 0, start = 0; i < len; ++i) {
    if (i > 0 && blocks[i] != blocks[i - 1]) start = i;
    if (blocks[i] >= 0 && i - start + 1 > o.max_chunk)
      return InvalidArgument("RequestBatch::Add: the image block at token " + std::to_string(start) +
                             " is longer than max_chunk " + std::to_string(o.max_chunk) + " (it is prefilled in one step)");
  }
  return Status::Ok();
}

StatusOr<RequestId> RequestRunner::Add(const Prompt& p, const GenerateOptions& options) {
  TESSERA_RETURN_IF_ERROR(Validate(p));
  TESSERA_RETURN_IF_ERROR(ValidateGenerateOptions(options));
  if (running() == slots())
    return ResourceExhausted("RequestBatch::Add: all " + std::to_string(slots()) + " slots are busy");
  const model::GemmaArch& a = model_.arch();
  const RequestId id = next_id_++;
  auto r = std::make_unique<Request>(id, options, a.vocab);
  r->tokens = p.tokens;
  r->types = p.token_types.empty() ? std::vector<int32_t>(p.tokens.size(), 0) : p.token_types;
  BlockIds(p, a.block_token_types, r->blocks);
  for (int32_t t : p.tokens) r->embedded.push_back(a.IsPlaceholder(t));
  if (p.image_rows > 0) r->embeds.assign(p.image_embeds, p.image_embeds + p.image_rows * a.hidden);
  r->result.prompt_tokens = static_cast<int64_t>(p.tokens.size());
  TESSERA_RETURN_IF_ERROR(Place(*r));
  running_[id] = std::move(r);
  return id;
}

int64_t RequestRunner::CommonPrefix(const Slot& s, const Request& r) const {
  // Without causal attention every cached token saw the whole old prompt: nothing is reusable.
  if (!model_.arch().causal) return 0;
  const int64_t H = model_.arch().hidden;
  const int64_t n = std::min<int64_t>(s.tokens.size(), static_cast<int64_t>(r.tokens.size()) - 1);
  int64_t len = 0, row = 0;
  for (; len < n; ++len) {
    if (s.tokens[len] != r.tokens[len] || s.types[len] != r.types[len] || s.embedded[len] != r.embedded[len]) break;
    if (r.embedded[len]) {
      if (std::memcmp(s.embeds.data() + row * H, r.embeds.data() + row * H, H * sizeof(float)) != 0) break;
      ++row;
    }
  }
  // Neither the new prompt's block nor the cached one may be cut: a cached block token's K/V saw
  // the whole old block.
  len = BlockStart(r.blocks, len);
  return BlockStart(s.blocks, len);
}

Status RequestRunner::Place(Request& r) {
  int64_t best = -1, keep = -1;
  for (int64_t s = 0; s < slots(); ++s) {
    if (slots_[s].request) continue;
    const int64_t len = CommonPrefix(slots_[s], r);
    if (len > keep) best = s, keep = len;
  }
  Slot& slot = slots_[best];
  const int64_t held = session_->position(best);
  if (keep < held) {
    // A refused rewind (a ring that no longer holds the window) changes nothing: clear instead.
    if (keep == 0 || !session_->RewindRow(best, held - keep).ok()) {
      TESSERA_RETURN_IF_ERROR(session_->ClearRow(best));
      keep = 0;
    }
  }
  r.prefilled = keep;
  r.embed_row = std::count(r.embedded.begin(), r.embedded.begin() + keep, 1);
  slot.tokens.resize(keep);
  slot.types.resize(keep);
  slot.blocks.resize(keep);
  slot.embedded.resize(keep);
  slot.embeds.resize(r.embed_row * model_.arch().hidden);
  slot.request = &r;
  r.result.slot = best;
  r.result.reused_tokens = keep;
  return Status::Ok();
}

int64_t RequestRunner::ChunkLength(const Request& r) const {
  const int64_t len = static_cast<int64_t>(r.tokens.size());
  const int64_t end = std::min(len, r.prefilled + session_->options().max_chunk);
  const int64_t cut = BlockStart(r.blocks, end);
  return (cut > r.prefilled ? cut : end) - r.prefilled;  // Validate bounds blocks by max_chunk
}

Status RequestRunner::Step() {
  const int64_t H = model_.arch().hidden;
  int64_t rows = 0;
  last_step_ = {};
  for (int64_t s = 0; s < slots(); ++s) {
    chunks_[s] = {};
    Request* r = slots_[s].request;
    if (!r) continue;
    if (r->cancel || (r->options.cancel && r->options.cancel->load())) {
      r->stream.Cancel();
      Finish(s, *r);
      continue;
    }
    rows = s + 1;
    if (r->prefilled < static_cast<int64_t>(r->tokens.size())) {
      r->step_count = ChunkLength(*r);
      last_step_.prefill += r->step_count;
      chunks_[s] = {r->tokens.data() + r->prefilled, r->blocks.data() + r->prefilled,
                    r->embeds.empty() ? nullptr : r->embeds.data() + r->embed_row * H, r->step_count};
    } else {
      r->step_count = 1;
      ++last_step_.decode;
      chunks_[s] = {&r->next_token, nullptr, nullptr, 1};
    }
  }
  if (rows == 0) return Status::Ok();
  if (const Status st = session_->Step(chunks_.data(), rows, logits_.data()); !st.ok()) {
    FailStep(st, rows);
    return st;
  }
  for (int64_t s = 0; s < rows; ++s)
    if (slots_[s].request) Advance(s, *slots_[s].request, logits_.data() + s * model_.arch().vocab);
  return Status::Ok();
}

void RequestRunner::Advance(int64_t s, Request& r, const float* logits) {
  Slot& slot = slots_[s];
  const int64_t H = model_.arch().hidden;
  const int64_t len = static_cast<int64_t>(r.tokens.size());
  if (r.prefilled < len) {
    for (int64_t i = r.prefilled; i < r.prefilled + r.step_count; ++i) {
      slot.tokens.push_back(r.tokens[i]);
      slot.types.push_back(r.types[i]);
      slot.blocks.push_back(r.blocks[i]);
      slot.embedded.push_back(r.embedded[i]);
      if (!r.embedded[i]) continue;
      slot.embeds.insert(slot.embeds.end(), r.embeds.begin() + r.embed_row * H, r.embeds.begin() + (r.embed_row + 1) * H);
      ++r.embed_row;
    }
    r.prefilled += r.step_count;
    if (r.prefilled < len) return;  // the prompt goes on next step
  } else {
    slot.tokens.push_back(r.next_token);  // a generated token: text type, no block, no image row
    slot.types.push_back(0);
    slot.blocks.push_back(-1);
    slot.embedded.push_back(0);
  }
  const bool room = session_->position(s) + 1 <= session_->options().max_context;
  const Status st = r.stream.Next(logits, room);
  if (!st.ok()) {
    r.result.status = st;  // this request fails; the others go on
    Finish(s, r);
  } else if (r.stream.done()) {
    Finish(s, r);
  } else {
    r.next_token = r.stream.last();
  }
}

void RequestRunner::FailStep(const Status& st, int64_t rows) {
  // Validation in Add leaves only failures of the machine here (memory, a kernel error). The step
  // may have written some layers' KV before failing: its requests end with the error and their
  // rows are emptied, so no later request reuses a cache that does not match its tokens.
  for (int64_t s = 0; s < rows; ++s) {
    Request* r = slots_[s].request;
    if (!r || r->step_count == 0) continue;
    r->result.status = st;
    Finish(s, *r);
    if (!session_->ClearRow(s).ok()) continue;
    Slot& slot = slots_[s];
    for (auto* v : {&slot.tokens, &slot.types, &slot.blocks}) v->clear();
    slot.embedded.clear();
    slot.embeds.clear();
  }
}

void RequestRunner::Finish(int64_t s, Request& r) {
  slots_[s].request = nullptr;  // the slot keeps its tokens for prefix reuse
  r.result.output = std::move(r.stream.output());
  auto it = running_.find(r.id);
  done_[r.id] = std::move(it->second);
  running_.erase(it);
}

void RequestRunner::Cancel(RequestId id) {
  auto it = running_.find(id);
  if (it != running_.end()) it->second->cancel = true;
}

StatusOr<RequestResult> RequestRunner::Take(RequestId id) {
  auto it = done_.find(id);
  if (it == done_.end())
    return InvalidArgument("RequestBatch::Take: request " + std::to_string(id) +
                           (running_.count(id) ? " is still running" : " is unknown or was already taken"));
  RequestResult out = std::move(it->second->result);
  done_.erase(it);
  return out;
}

}  // namespace tessera::runtime
