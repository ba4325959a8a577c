#include "runtime/session.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "runtime/session_plan.h"

namespace tessera::runtime {
namespace {

bool Contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Block ids of one prompt: each maximal run of block-forming token types gets its own id.
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

// The chunk end at or before `end` that does not cut an image block of row b (tokens [done, end)).
StatusOr<int64_t> ChunkEnd(const std::vector<int32_t>& blk, int64_t done, int64_t end, int64_t b) {
  const int64_t len = static_cast<int64_t>(blk.size());
  if (end >= len || end <= done || blk[end] < 0 || blk[end - 1] != blk[end]) return end;
  int64_t start = end - 1;  // the block straddles the boundary: end the chunk before it
  while (start > done && blk[start - 1] == blk[end]) --start;
  if (start == done)
    return InvalidArgument("Session::Prefill: image block of prompt " + std::to_string(b) + " at token " +
                           std::to_string(done) + " is longer than the prefill chunk (max_chunk) and cannot be " +
                           "prefilled in one chunk");
  return start;
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

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kUnified: return "unified";
    case Mode::kBias: return "bias";
    case Mode::kSplit: return "split";
  }
  return "?";
}

bool ParseMode(const std::string& name, Mode* out) {
  if (name == "unified") *out = Mode::kUnified;
  else if (name == "bias") *out = Mode::kBias;
  else if (name == "split") *out = Mode::kSplit;
  else return false;
  return true;
}

Status CheckMatmulPrecision(const model::GemmaModel& model, ops::MatmulPrecision precision) {
  if (precision != ops::MatmulPrecision::kBf16) return Status::Ok();
  const model::GemmaWeights& w = model.weights();
  auto check = [](const ops::WeightView& v, const std::string& name) -> Status {
    if (v.data == nullptr) return Status::Ok();
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
  const int64_t n = o.max_batch * o.max_chunk;
  act_.Allocate(a, n, o.all_logits ? n : o.max_batch);
  attn_scratch_.Reserve(plan.scratch_bytes);
  next_pos_.assign(o.max_batch, 0);
  tokens_.resize(n);
  pos_.resize(n);
  block_.resize(n);
  count_.resize(o.max_batch);
  use_embed_.resize(n);
  embeds_.resize(n * a.hidden);
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
    for (int32_t t : p.tokens) placeholders += Contains(a.image_token_ids, t);
    if (placeholders != p.image_rows)
      return InvalidArgument("Session::Prefill: " + row + " has " + std::to_string(placeholders) +
                             " image placeholder tokens but " + std::to_string(p.image_rows) + " image embedding rows");
    if (p.image_rows > 0 && p.image_embeds == nullptr)
      return InvalidArgument("Session::Prefill: " + row + " has no image embeddings");
  }
  return Status::Ok();
}

Status Session::Prefill(const std::vector<Prompt>& prompts, float* last_logits, float* all_logits,
                        const model::ActivationTap* tap) {
  TESSERA_RETURN_IF_ERROR(ValidatePrompts(prompts));
  const bool baseline = opt_.mode != Mode::kUnified;
  if (baseline)
    for (const Prompt& p : prompts)
      if (p.tokens.size() != prompts[0].tokens.size())
        return InvalidArgument(std::string("Session::Prefill: mode ") + ModeName(opt_.mode) +
                               " needs prompts of equal length (its concat cache has one length per batch)");
  if (tap)
    for (const Prompt& p : prompts)
      if (static_cast<int64_t>(p.tokens.size()) > opt_.max_chunk)
        return InvalidArgument("Session::Prefill: activation taps need every prompt to fit one chunk of " +
                               std::to_string(opt_.max_chunk));
  if (all_logits && !opt_.all_logits)
    return InvalidArgument("Session::Prefill: all_logits needs SessionOptions.all_logits");
  const model::GemmaArch& a = model_.arch();
  const int64_t B = static_cast<int64_t>(prompts.size()), H = a.hidden, V = a.vocab;
  // A fresh cache for this batch.
  cache_->Reset();
  live_ = cache_.get();
  if (baseline) {
    kv::KvCacheConfig cc = KvCacheConfigFor(a, opt_);
    cc.batch = B;
    cc.concat_baseline = true;
    StatusOr<std::unique_ptr<kv::KvCache>> concat = kv::KvCache::Create(cc);
    if (!concat.ok()) return concat.status();
    concat_cache_ = std::move(concat.value());
    live_ = concat_cache_.get();
  }
  std::fill(next_pos_.begin(), next_pos_.end(), 0);
  batch_ = B;
  std::vector<std::vector<int32_t>> blocks(B);  // small, per call: prompts are caller data
  for (int64_t b = 0; b < B; ++b) BlockIds(prompts[b], a.block_token_types, blocks[b]);
  std::vector<int64_t> done(B, 0), image_row(B, 0);
  int64_t s_max = 0;
  for (const Prompt& p : prompts) s_max = std::max<int64_t>(s_max, p.tokens.size());
  for (;;) {
    // Next chunk: each row takes up to max_chunk tokens, ending before (not inside) an image
    // block. The baselines' concat cache needs one common boundary: shrink it until no row's
    // block straddles it.
    int64_t S = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = static_cast<int64_t>(prompts[b].tokens.size());
      StatusOr<int64_t> end = ChunkEnd(blocks[b], done[b], std::min(len, done[b] + opt_.max_chunk), b);
      if (!end.ok()) return end.status();
      count_[b] = static_cast<int32_t>(end.value() - done[b]);
    }
    if (baseline) {
      for (bool moved = true; moved;) {
        moved = false;
        for (int64_t b = 0; b < B; ++b) {
          StatusOr<int64_t> end = ChunkEnd(blocks[b], done[b], done[b] + count_[0], b);
          if (!end.ok()) return end.status();
          if (end.value() - done[b] < count_[0]) count_[0] = static_cast<int32_t>(end.value() - done[b]), moved = true;
        }
      }
      std::fill(count_.begin(), count_.begin() + B, count_[0]);
    }
    for (int64_t b = 0; b < B; ++b) S = std::max<int64_t>(S, count_[b]);
    if (S == 0) break;
    for (int64_t b = 0; b < B; ++b) {
      const Prompt& p = prompts[b];
      for (int64_t i = 0; i < S; ++i) {
        const int64_t t = b * S + i;
        const bool real = i < count_[b];
        const int64_t src = done[b] + i;
        tokens_[t] = real ? p.tokens[src] : 0;
        pos_[t] = static_cast<int32_t>(next_pos_[b] + i);
        block_[t] = real ? blocks[b][src] : -1;
        use_embed_[t] = real && Contains(a.image_token_ids, p.tokens[src]);
        if (use_embed_[t]) {
          std::memcpy(embeds_.data() + t * H, p.image_embeds + image_row[b] * H, H * sizeof(float));
          ++image_row[b];
        }
      }
    }
    model::ForwardBatch in;
    in.batch = B;
    in.seq = S;
    in.tokens = tokens_.data();
    in.count = count_.data();
    in.pos = pos_.data();
    in.block = block_.data();
    in.embeds = embeds_.data();
    in.use_embed = use_embed_.data();
    in.all_logits = all_logits != nullptr;
    in.dense_bias = baseline ? &dense_bias_ : nullptr;
    in.attention_precision = opt_.attention_precision;
    in.matmul_precision = opt_.matmul_precision;
    float* out = act_.logits.as<float>();
    TESSERA_RETURN_IF_ERROR(model_.Forward(in, *live_, act_, pool_, attn_scratch_, out, tap));
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
      next_pos_[b] += count_[b];
    }
    if (progress_) {
      int64_t sum = 0, total = 0;
      for (int64_t b = 0; b < B; ++b) sum += done[b], total += static_cast<int64_t>(prompts[b].tokens.size());
      progress_(sum, total);
    }
  }
  if (opt_.mode == Mode::kSplit) return HandOver();
  return Status::Ok();
}

Status Session::HandOver() {
  // Every row has the same length here (checked in Prefill). Tokens move in chunks of at most
  // max_chunk, which rings accept; a ring keeps only its last W - 1 + max_chunk tokens.
  const int64_t B = batch_, len = next_pos_[0];
  std::vector<int32_t> pos, blk;
  for (int64_t l = 0; l < model_.arch().num_layers(); ++l) {
    if (model_.arch().layers[l].shared_kv) continue;
    const kv::KvView src = concat_cache_->View(l);
    for (int64_t j0 = 0; j0 < len; j0 += opt_.max_chunk) {
      const int64_t n = std::min(opt_.max_chunk, len - j0);
      pos.resize(B * n);
      blk.resize(B * n);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < n; ++i) {
          pos[b * n + i] = src.k_pos[b * len + j0 + i];
          blk[b * n + i] = src.k_block[b * len + j0 + i];
        }
      kv::KvAppend in;
      in.k = src.k;
      in.v = src.v;
      in.k.data = src.k.At(0, 0, j0);
      in.v.data = src.v.At(0, 0, j0);
      in.k.seq = in.v.seq = n;
      in.pos = pos.data();
      in.block = blk.data();
      TESSERA_RETURN_IF_ERROR(cache_->Append(l, in));
    }
  }
  concat_cache_.reset();
  live_ = cache_.get();
  return Status::Ok();
}

Status Session::Decode(const int32_t* tokens, const uint8_t* active, float* logits) {
  if (batch_ == 0) return InvalidArgument("Session::Decode: no prefilled rows");
  if (opt_.mode == Mode::kBias && active)
    for (int64_t b = 0; b < batch_; ++b)
      if (!active[b]) return InvalidArgument("Session::Decode: mode bias decodes every row (one concat length)");
  const int64_t V = model_.arch().vocab;
  for (int64_t b = 0; b < batch_; ++b) {
    const bool on = !active || active[b];
    if (on && next_pos_[b] + 1 > opt_.max_context)
      return OutOfRange("Session::Decode: row " + std::to_string(b) + " is at max_context " +
                        std::to_string(opt_.max_context));
    tokens_[b] = on ? tokens[b] : 0;
    count_[b] = on ? 1 : 0;
    pos_[b] = static_cast<int32_t>(next_pos_[b]);
    block_[b] = -1;
    use_embed_[b] = 0;
  }
  model::ForwardBatch in;
  in.batch = batch_;
  in.seq = 1;
  in.tokens = tokens_.data();
  in.count = count_.data();
  in.pos = pos_.data();
  in.dense_bias = live_ == concat_cache_.get() ? &dense_bias_ : nullptr;
  in.attention_precision = opt_.attention_precision;
  in.matmul_precision = opt_.matmul_precision;
  float* out = act_.logits.as<float>();
  TESSERA_RETURN_IF_ERROR(model_.Forward(in, *live_, act_, pool_, attn_scratch_, out));
  for (int64_t b = 0; b < batch_; ++b) next_pos_[b] += count_[b];
  std::memcpy(logits, out, batch_ * V * sizeof(float));
  return Status::Ok();
}

Status Session::Generate(const std::vector<Prompt>& prompts, int64_t max_new, const SamplingParams& sampling,
                         const std::vector<int32_t>& stop_tokens, std::vector<std::vector<int32_t>>* out) {
  TESSERA_RETURN_IF_ERROR(ValidateSampling(sampling));
  if (max_new < 0)
    return InvalidArgument("Session::Generate: max_new_tokens = " + std::to_string(max_new) + " must be >= 0");
  const int64_t B = static_cast<int64_t>(prompts.size()), V = model_.arch().vocab;
  std::vector<float> logits(B * V);
  TESSERA_RETURN_IF_ERROR(Prefill(prompts, logits.data()));
  Sampler sampler(sampling, V);
  out->assign(B, {});
  std::vector<int32_t> next(B);
  std::vector<uint8_t> active(B, 1);
  for (int64_t step = 0; step < max_new; ++step) {
    bool any = false;
    for (int64_t b = 0; b < B; ++b) {
      if (!active[b]) continue;
      const Status st = sampler.Sample(logits.data() + b * V, &next[b]);
      if (!st.ok())
        return InvalidArgument("Session::Generate: step " + std::to_string(step) + ", row " + std::to_string(b) + ": " +
                               st.message());
      (*out)[b].push_back(next[b]);
      if (Contains(stop_tokens, next[b]) || next_pos_[b] + 1 > opt_.max_context) active[b] = 0;
      any |= active[b];
    }
    if (!any || step + 1 == max_new) break;
    // The bias baseline keeps one cache length for the batch: finished rows decode on (their
    // outputs are dropped) instead of pausing.
    TESSERA_RETURN_IF_ERROR(Decode(next.data(), opt_.mode == Mode::kBias ? nullptr : active.data(), logits.data()));
  }
  return Status::Ok();
}

}  // namespace tessera::runtime
