#include "runtime/session.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "runtime/session_plan.h"

namespace tessera::runtime {
namespace {

bool Contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The switch the exactness tests and the before/after benchmark turn the prefill skips off with.
bool SkipUnreadFromEnv() {
  const char* v = std::getenv("TESSERA_PREFILL_SKIP");
  return v == nullptr || std::string(v) != "0";
}

}  // namespace

void BlockIds(const Prompt& p, const std::vector<int32_t>& block_types, std::vector<int32_t>& ids) {
  ids.assign(p.tokens.size(), -1);
  if (p.token_types.empty()) return;
  int32_t next = 0;
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    if (!Contains(block_types, p.token_types[i])) continue;
    const bool starts = i == 0 || !Contains(block_types, p.token_types[i - 1]);
    if (starts) ++next;
    ids[i] = next - 1;
  }
}

int64_t BlockStart(const std::vector<int32_t>& blocks, int64_t end) {
  if (end <= 0 || end >= static_cast<int64_t>(blocks.size()) || blocks[end] < 0 || blocks[end - 1] != blocks[end])
    return end;
  while (end > 0 && blocks[end - 1] == blocks[end]) --end;
  return end;
}

namespace {

// The chunk end at or before `end` that does not cut an image block of row b (tokens [done, end)).
StatusOr<int64_t> ChunkEnd(const std::vector<int32_t>& blk, int64_t done, int64_t end, int64_t b) {
  if (end <= done) return end;
  const int64_t start = BlockStart(blk, end);  // a block straddling the boundary: end the chunk before it
  if (start > done || start == end) return start;
  return InvalidArgument("Session::Prefill: image block of prompt " + std::to_string(b) + " at token " +
                         std::to_string(done) + " is longer than the prefill chunk (max_chunk) and cannot be " +
                         "prefilled in one chunk");
}

}  // namespace

kv::KvCacheConfig KvCacheConfigFor(const model::GemmaArch& a, const SessionOptions& o) {
  kv::KvCacheConfig c;
  int64_t shared = 0;
  for (const model::LayerArch& l : a.layers) {
    c.layers.push_back({l.kind, l.kv_heads, l.head_dim, l.head_dim, l.window});
    shared += l.shared_kv;
  }
  c.num_kv_shared_layers = shared;
  c.batch = o.max_batch;
  c.max_context = o.max_context;
  c.max_chunk = o.max_chunk;
  c.dtype = o.kv_dtype;
  return c;
}

Status CheckMatmulPrecision(const model::GemmaModel& model, ops::MatmulPrecision precision) {
  if (precision != ops::MatmulPrecision::kBf16) return Status::Ok();
  const model::GemmaWeights& w = model.weights();
  auto check = [](const ops::WeightView& v, const std::string& name) -> Status {
    // Quantized matrices take any precision: it only picks their prefill kernel and activation
    // bytes (decode quantizes x to int8 blocks at all three).
    if (v.data == nullptr || v.quant != QuantType::kNone) return Status::Ok();
    if (v.dtype != DType::kBF16)
      return InvalidArgument("Session: matmul precision bf16 needs bf16 weights, got " + std::string(DTypeName(v.dtype)) +
                             " for " + name);
    if (v.in > ops::kMaxRoundedRowDotFloats)
      return InvalidArgument("Session: matmul precision bf16 supports inputs of up to " +
                             std::to_string(ops::kMaxRoundedRowDotFloats) + " features, " + name + " has " +
                             std::to_string(v.in));
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(check(w.lm_head, "lm_head"));
  TESSERA_RETURN_IF_ERROR(check(w.ple_model_proj, "per_layer_model_projection"));
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const model::LayerWeights& L = w.layers[l];
    const std::string at = " of layer " + std::to_string(l);
    for (auto [v, name] : {std::pair{&L.q_proj, "q_proj"}, {&L.k_proj, "k_proj"}, {&L.v_proj, "v_proj"},
                           {&L.o_proj, "o_proj"}, {&L.gate, "gate_proj"}, {&L.up, "up_proj"}, {&L.down, "down_proj"},
                           {&L.ple_gate, "per_layer_input_gate"}, {&L.ple_proj, "per_layer_projection"}})
      TESSERA_RETURN_IF_ERROR(check(*v, name + at));
    // The MoE block's matrices too: llama.cpp's converter keeps the router (ffn_gate_inp) f32 even in
    // a bf16 GGUF, which the GEMM at precision bf16 would otherwise stop on.
    TESSERA_RETURN_IF_ERROR(check(L.router, "router.proj" + at));
    for (size_t e = 0; e < L.expert_gate.size(); ++e) {
      const std::string ex = " of expert " + std::to_string(e) + at;
      TESSERA_RETURN_IF_ERROR(check(L.expert_gate[e], "experts.gate_up_proj (gate)" + ex));
      TESSERA_RETURN_IF_ERROR(check(L.expert_up[e], "experts.gate_up_proj (up)" + ex));
      TESSERA_RETURN_IF_ERROR(check(L.expert_down[e], "experts.down_proj" + ex));
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Session>> Session::Create(const model::GemmaModel& model, const SessionOptions& o,
                                                   ThreadPool* pool) {
  const int threads = pool ? pool->num_threads() : 1;
  StatusOr<SessionMemoryPlan> plan = PlanSession(model, o, threads);
  if (!plan.ok()) return plan.status();
  TESSERA_RETURN_IF_ERROR(CheckSessionFits(plan.value(), o));
  std::unique_ptr<Session> s(new Session(model, o, pool));
  s->skip_unread_ = SkipUnreadFromEnv();
  s->planned_bytes_ = plan.value().total();
  try {
    TESSERA_RETURN_IF_ERROR(s->Allocate(plan.value()));
  } catch (const std::bad_alloc&) {  // the plan fit, but the memory went elsewhere meanwhile
    return ResourceExhausted("Session: out of memory allocating " + plan.value().Describe());
  }
  return s;
}

Status Session::Allocate(const SessionMemoryPlan& plan) {
  const model::GemmaArch& a = model_.arch();
  const SessionOptions& o = opt_;
  StatusOr<std::unique_ptr<kv::KvCache>> cache = kv::KvCache::Create(KvCacheConfigFor(a, o));
  if (!cache.ok()) return cache.status();
  cache_ = std::move(cache.value());
  live_ = cache_.get();
  if (o.mode != Mode::kUnified) baseline_ = std::make_unique<BaselineMode>(o.mode, KvCacheConfigFor(a, o));
  const int64_t n = o.max_batch * o.max_chunk;
  act_.Allocate(a, n, o.all_logits ? n : std::max(o.max_batch, o.verify_tokens));
  attn_scratch_.Reserve(plan.scratch_bytes);
  next_pos_.assign(o.max_batch, 0);
  tokens_.resize(n);
  pos_.resize(n);
  block_.resize(n);
  count_.resize(o.max_batch);
  use_embed_.resize(n);
  embeds_.resize(n * a.hidden);
  chunks_.resize(o.max_batch);
  return Status::Ok();
}

Status Session::ValidatePrompts(const std::vector<Prompt>& prompts) const {
  const model::GemmaArch& a = model_.arch();
  if (prompts.empty() || static_cast<int64_t>(prompts.size()) > opt_.max_batch)
    return InvalidArgument("Session::Prefill: " + std::to_string(prompts.size()) + " prompts, max_batch is " +
                           std::to_string(opt_.max_batch));
  for (size_t b = 0; b < prompts.size(); ++b) {
    const Prompt& p = prompts[b];
    const std::string row = "prompt " + std::to_string(b);
    if (p.tokens.empty()) return InvalidArgument("Session::Prefill: " + row + " is empty");
    if (static_cast<int64_t>(p.tokens.size()) > opt_.max_context)
      return OutOfRange("Session::Prefill: " + row + " has " + std::to_string(p.tokens.size()) +
                        " tokens, more than max_context " + std::to_string(opt_.max_context));
    if (!p.token_types.empty() && p.token_types.size() != p.tokens.size())
      return InvalidArgument("Session::Prefill: " + row + " has " + std::to_string(p.token_types.size()) +
                             " token types for " + std::to_string(p.tokens.size()) + " tokens");
    int64_t placeholders = 0;
    for (int32_t t : p.tokens) placeholders += a.IsPlaceholder(t);
    if (placeholders != p.image_rows)
      return InvalidArgument("Session::Prefill: " + row + " has " + std::to_string(placeholders) +
                             " image placeholder tokens but " + std::to_string(p.image_rows) + " image embedding rows");
    if (p.image_rows > 0 && p.image_embeds == nullptr)
      return InvalidArgument("Session::Prefill: " + row + " has no image embeddings");
  }
  if (opt_.mode != Mode::kUnified)
    for (const Prompt& p : prompts)
      if (p.tokens.size() != prompts[0].tokens.size())
        return InvalidArgument(std::string("Session::Prefill: mode ") + ModeName(opt_.mode) +
                               " needs prompts of equal length (its concat cache has one length per batch)");
  return Status::Ok();
}

Status Session::NextChunk(const std::vector<Prompt>& prompts, const std::vector<std::vector<int32_t>>& blocks,
                          const std::vector<int64_t>& done) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = static_cast<int64_t>(prompts[b].tokens.size());
    StatusOr<int64_t> end = ChunkEnd(blocks[b], done[b], std::min(len, done[b] + opt_.max_chunk), b);
    if (!end.ok()) return end.status();
    count_[b] = static_cast<int32_t>(end.value() - done[b]);
  }
  if (opt_.mode == Mode::kUnified) return Status::Ok();
  // One common boundary: shrink it until no row's block straddles it.
  for (bool moved = true; moved;) {
    moved = false;
    for (int64_t b = 0; b < B; ++b) {
      StatusOr<int64_t> end = ChunkEnd(blocks[b], done[b], done[b] + count_[0], b);
      if (!end.ok()) return end.status();
      if (end.value() - done[b] < count_[0]) count_[0] = static_cast<int32_t>(end.value() - done[b]), moved = true;
    }
  }
  std::fill(count_.begin(), count_.begin() + B, count_[0]);
  return Status::Ok();
}

int64_t Session::Stage(const RowChunk* chunks, int64_t rows, int64_t min_seq, int64_t first_row) {
  const model::GemmaArch& a = model_.arch();
  const int64_t H = a.hidden;
  int64_t S = min_seq;
  for (int64_t b = 0; b < rows; ++b) S = std::max(S, chunks[b].count);
  staged_blocks_ = false;
  staged_first_ = first_row;
  for (int64_t b = 0; b < rows; ++b) {
    const RowChunk& c = chunks[b];
    int64_t embed_row = 0;
    count_[b] = static_cast<int32_t>(c.count);
    for (int64_t i = 0; i < S; ++i) {
      const int64_t t = b * S + i;
      const bool real = i < c.count;
      tokens_[t] = real ? c.tokens[i] : 0;
      pos_[t] = static_cast<int32_t>(next_pos_[first_row + b] + i);
      block_[t] = real && c.block ? c.block[i] : -1;
      staged_blocks_ |= block_[t] >= 0;
      use_embed_[t] = real && c.embeds && a.IsPlaceholder(tokens_[t]);
      if (use_embed_[t]) std::memcpy(embeds_.data() + t * H, c.embeds + embed_row++ * H, H * sizeof(float));
    }
  }
  return S;
}

Status Session::RunStep(int64_t B, int64_t S, bool all_logits, bool logits_read, const model::ActivationTap* tap,
                        bool rows_as_steps) {
  model::ForwardBatch in;
  in.batch = B;
  in.seq = S;
  in.first_row = staged_first_;
  in.tokens = tokens_.data();
  in.count = count_.data();
  in.pos = pos_.data();
  in.block = staged_blocks_ ? block_.data() : nullptr;
  in.embeds = embeds_.data();
  in.use_embed = use_embed_.data();
  in.all_logits = all_logits;
  in.skip_unread = skip_unread_;
  in.logits_read = logits_read;
  in.counts = &counts_;
  in.attention = baseline_ && live_ != cache_.get() ? baseline_.get() : nullptr;
  in.attention_precision = opt_.attention_precision;
  in.matmul_precision = opt_.matmul_precision;
  // A one-token step (decode, of any row count) gives each row its bits alone: tessera serve's
  // streams then equal the same requests run alone, whatever else is decoding.
  in.rows_as_steps = rows_as_steps || S == 1;
  TESSERA_RETURN_IF_ERROR(model_.Forward(in, *live_, act_, pool_, attn_scratch_, act_.logits.as<float>(), tap));
  for (int64_t b = 0; b < B; ++b) next_pos_[staged_first_ + b] += count_[b];
  return Status::Ok();
}

Status Session::Prefill(const std::vector<Prompt>& prompts, float* last_logits, float* all_logits,
                        const model::ActivationTap* tap) {
  TESSERA_RETURN_IF_ERROR(ValidatePrompts(prompts));
  if (tap)
    for (const Prompt& p : prompts)
      if (static_cast<int64_t>(p.tokens.size()) > opt_.max_chunk)
        return InvalidArgument("Session::Prefill: activation taps need every prompt to fit one chunk of " +
                               std::to_string(opt_.max_chunk));
  if (all_logits && !opt_.all_logits)
    return InvalidArgument("Session::Prefill: all_logits needs SessionOptions.all_logits");
  const model::GemmaArch& a = model_.arch();
  const int64_t B = static_cast<int64_t>(prompts.size()), H = a.hidden, V = a.vocab;
  cache_->Reset();  // a fresh cache for this batch
  live_ = cache_.get();
  if (baseline_) {
    StatusOr<kv::KvCache*> concat = baseline_->Begin(B);
    if (!concat.ok()) return concat.status();
    live_ = concat.value();
  }
  std::fill(next_pos_.begin(), next_pos_.end(), 0);
  batch_ = B;
  std::vector<std::vector<int32_t>> blocks(B);  // small, per call: prompts are caller data
  for (int64_t b = 0; b < B; ++b) BlockIds(prompts[b], a.block_token_types, blocks[b]);
  std::vector<int64_t> done(B, 0), image_row(B, 0);
  int64_t s_max = 0, total = 0;
  for (const Prompt& p : prompts) s_max = std::max<int64_t>(s_max, p.tokens.size()), total += p.tokens.size();
  for (int64_t sum = 0; sum < total;) {
    if (cancel_ && cancel_->load())
      return Cancelled("Session::Prefill: cancelled after " + std::to_string(sum) + " of " + std::to_string(total) +
                       " prompt tokens");
    TESSERA_RETURN_IF_ERROR(NextChunk(prompts, blocks, done));
    for (int64_t b = 0; b < B; ++b) {
      const Prompt& p = prompts[b];
      chunks_[b] = {p.tokens.data() + done[b], blocks[b].data() + done[b],
                    p.image_embeds ? p.image_embeds + image_row[b] * H : nullptr, count_[b]};
      for (int64_t i = 0; i < count_[b]; ++i) image_row[b] += a.IsPlaceholder(p.tokens[done[b] + i]);
    }
    const int64_t S = Stage(chunks_.data(), B, 0);
    bool read = false;  // some row's prompt ends in this chunk and its last logits are asked for
    for (int64_t b = 0; b < B; ++b)
      read |= last_logits && count_[b] > 0 && done[b] + count_[b] == static_cast<int64_t>(prompts[b].tokens.size());
    TESSERA_RETURN_IF_ERROR(RunStep(B, S, all_logits != nullptr, read, tap));
    const float* out = act_.logits.as<float>();
    for (int64_t b = 0; b < B; ++b) {
      if (count_[b] == 0) continue;
      if (all_logits) {
        std::memcpy(all_logits + (b * s_max + done[b]) * V, out + b * S * V, count_[b] * V * sizeof(float));
      }
      if (done[b] + count_[b] == static_cast<int64_t>(prompts[b].tokens.size()) && last_logits) {
        const float* row = all_logits ? out + (b * S + count_[b] - 1) * V : out + b * V;
        std::memcpy(last_logits + b * V, row, V * sizeof(float));
      }
      done[b] += count_[b];
      sum += count_[b];
    }
    if (progress_) progress_(sum, total);
  }
  if (opt_.mode != Mode::kSplit) return Status::Ok();
  TESSERA_RETURN_IF_ERROR(baseline_->HandOver(a, next_pos_[0], *cache_));  // every row has this length
  live_ = cache_.get();
  return Status::Ok();
}

Status Session::Decode(const int32_t* tokens, const uint8_t* active, float* logits) {
  if (batch_ == 0) return InvalidArgument("Session::Decode: no prefilled rows");
  if (opt_.mode == Mode::kBias && active)
    for (int64_t b = 0; b < batch_; ++b)
      if (!active[b]) return InvalidArgument("Session::Decode: mode bias decodes every row (one concat length)");
  for (int64_t b = 0; b < batch_; ++b) {
    const bool on = !active || active[b];
    if (on && next_pos_[b] + 1 > opt_.max_context)
      return OutOfRange("Session::Decode: row " + std::to_string(b) + " is at max_context " +
                        std::to_string(opt_.max_context));
    chunks_[b] = {tokens + b, nullptr, nullptr, on ? 1 : 0};
  }
  Stage(chunks_.data(), batch_, 1);
  TESSERA_RETURN_IF_ERROR(RunStep(batch_, 1, false, true, nullptr));
  std::memcpy(logits, act_.logits.as<float>(), batch_ * model_.arch().vocab * sizeof(float));
  return Status::Ok();
}

Status Session::Step(const RowChunk* chunks, int64_t rows, float* last_logits) {
  if (opt_.mode != Mode::kUnified)
    return InvalidArgument(std::string("Session::Step: rows at their own positions need mode unified, not ") +
                           ModeName(opt_.mode));
  const int64_t B = rows;
  if (B <= 0 || B > opt_.max_batch)
    return InvalidArgument("Session::Step: " + std::to_string(B) + " rows, max_batch is " + std::to_string(opt_.max_batch));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = chunks[b].count;
    if (n < 0 || n > opt_.max_chunk)
      return InvalidArgument("Session::Step: row " + std::to_string(b) + " appends " + std::to_string(n) +
                             " tokens; a step takes 0 to max_chunk " + std::to_string(opt_.max_chunk));
    if (n > 0 && chunks[b].tokens == nullptr)
      return InvalidArgument("Session::Step: row " + std::to_string(b) + " has no tokens");
    if (next_pos_[b] + n > opt_.max_context)
      return OutOfRange("Session::Step: row " + std::to_string(b) + " holds " + std::to_string(next_pos_[b]) +
                        " tokens; " + std::to_string(n) + " more exceed max_context " + std::to_string(opt_.max_context));
  }
  live_ = cache_.get();
  batch_ = B;
  // One-token rows (decoding) as one decode step, then each run of adjacent rows with longer chunks
  // (prompts) as a step over just those cache rows: no row computes padding for another's chunk,
  // and a decoding row gets the bits it gets decoding alone (docs/runtime.md, "Requests and slots").
  int64_t decode_rows = 0;  // rows [0, decode_rows) hold every one-token row
  for (int64_t b = 0; b < B; ++b) {
    chunks_[b] = chunks[b].count == 1 ? chunks[b] : RowChunk{};
    if (chunks[b].count == 1) decode_rows = b + 1;
  }
  if (decode_rows > 0) TESSERA_RETURN_IF_ERROR(StepRows(chunks_.data(), decode_rows, 0, last_logits));
  for (int64_t b = 0; b < B;) {
    if (chunks[b].count <= 1) {
      ++b;
      continue;
    }
    const int64_t first = b;
    while (b < B && chunks[b].count > 1) ++b;
    TESSERA_RETURN_IF_ERROR(StepRows(chunks + first, b - first, first, last_logits));
  }
  return Status::Ok();
}

Status Session::StepRows(const RowChunk* chunks, int64_t rows, int64_t first_row, float* last_logits) {
  const int64_t S = Stage(chunks, rows, 1, first_row), V = model_.arch().vocab;
  bool read = false;
  for (int64_t b = 0; b < rows; ++b) read |= chunks[b].count > 0 && chunks[b].logits;
  TESSERA_RETURN_IF_ERROR(RunStep(rows, S, false, read, nullptr));
  for (int64_t b = 0; b < rows; ++b)
    if (chunks[b].count > 0)
      std::memcpy(last_logits + (first_row + b) * V, act_.logits.as<float>() + b * V, V * sizeof(float));
  return Status::Ok();
}

Status Session::Verify(const int32_t* tokens, int64_t n, float* logits, float* hidden) {
  if (opt_.mode != Mode::kUnified || batch_ != 1)
    return InvalidArgument("Session::Verify: needs mode unified and one prefilled row, got " + std::to_string(batch_) +
                           " rows");
  if (n < 1 || n > opt_.verify_tokens)
    return InvalidArgument("Session::Verify: " + std::to_string(n) + " tokens; the session verifies 1 to " +
                           std::to_string(opt_.verify_tokens) + " (SessionOptions::verify_tokens)");
  if (next_pos_[0] + n > opt_.max_context)
    return OutOfRange("Session::Verify: row 0 holds " + std::to_string(next_pos_[0]) + " tokens; " +
                      std::to_string(n) + " more exceed max_context " + std::to_string(opt_.max_context));
  chunks_[0] = {tokens, nullptr, nullptr, n};
  const int64_t S = Stage(chunks_.data(), 1, 1);
  // Each row as the Decode step it stands for, to the bit: greedy speculative output is then plain
  // greedy output even at near-ties (docs/speculative.md).
  TESSERA_RETURN_IF_ERROR(RunStep(1, S, /*all_logits=*/true, true, nullptr, /*rows_as_steps=*/true));
  const int64_t V = model_.arch().vocab, H = model_.arch().hidden;
  std::memcpy(logits, act_.logits.as<float>(), n * V * sizeof(float));
  if (hidden) std::memcpy(hidden, act_.x.as<float>(), n * H * sizeof(float));
  return Status::Ok();
}

Status Session::ClearRow(int64_t b) {
  if (b < 0 || b >= opt_.max_batch) return InvalidArgument("Session::ClearRow: row " + std::to_string(b) + " out of range");
  TESSERA_RETURN_IF_ERROR(cache_->ClearRow(b));
  next_pos_[b] = 0;
  return Status::Ok();
}

Status Session::RewindRow(int64_t b, int64_t n) {
  TESSERA_RETURN_IF_ERROR(cache_->Rewind(b, n));
  next_pos_[b] -= n;
  return Status::Ok();
}

}  // namespace tessera::runtime
