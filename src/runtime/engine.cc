// The public engine API (tessera/engine.h) over the runtime's Session and the generator.
#include "tessera/engine.h"

#include <string>

#include "model/drafter.h"
#include "model/gguf_config.h"
#include "model/gguf_vocab.h"
#include "model/loaded_model.h"
#include "model/reference_configs.h"
#include "runtime/quantize_model_meta.h"
#include "runtime/generator.h"
#include "runtime/model_vision.h"
#include "runtime/session.h"
#include "runtime/session_plan.h"
#include "runtime/speculative.h"

namespace tessera {
namespace {

std::optional<int32_t> Id(const std::optional<int64_t>& v) {
  if (!v) return std::nullopt;
  return static_cast<int32_t>(*v);
}

ModelInfo Describe(const model::LoadedModel& m) {
  const model::GemmaArch& a = m.model().arch();
  const model::ModelConfig& c = m.config();
  ModelInfo info;
  info.model_type = a.model_type;
  info.vocab = a.vocab;
  info.hidden = a.hidden;
  info.q_heads = a.q_heads;
  info.ple_dim = a.ple_dim;
  for (const model::LayerArch& la : a.layers) {
    LayerInfo l{kv::LayerKindName(la.kind), la.kv_heads, la.head_dim, la.window, la.has_v_proj, la.shared_kv, 0,
                model::MaskRuleName(la)};
    for (float f : la.inv_freq) l.rotary_pairs += f != 0.0f;
    info.layers.push_back(l);
  }
  for (int64_t e : c.eos_token_ids) info.eos_token_ids.push_back(static_cast<int32_t>(e));
  info.image_token_ids = a.image_token_ids;
  info.bos_token_id = Id(c.bos_token_id);
  info.pad_token_id = Id(c.pad_token_id);
  info.image_token_id = Id(c.image_token_id);
  info.boi_token_id = Id(c.boi_token_id);
  info.eoi_token_id = Id(c.eoi_token_id);
  info.video_token_id = Id(c.video_token_id);
  info.audio_token_id = Id(c.audio_token_id);
  info.boa_token_id = Id(c.boa_token_id);
  info.eoa_token_id = Id(c.eoa_token_id);
  info.repacked = m.model().weights().repacked();
  info.attention_scale = a.attn_scale;
  info.final_softcap = a.final_softcap;
  info.gguf = m.is_gguf();
  info.inferred = m.inferred();
  return info;
}

}  // namespace

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

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kContext: return "context";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

StatusOr<KvMemoryReport> ReferenceKvMemory(ReferenceShape shape, int64_t context, int64_t max_chunk) {
  const kv::KvCacheConfig c = shape == ReferenceShape::kGemma4_12B ? model::Gemma4_12BCache(context, max_chunk)
                                                                   : model::Gemma3_12BCache(context, max_chunk);
  StatusOr<kv::KvMemoryPlan> plan = kv::KvCache::Plan(c);
  if (!plan.ok()) return plan.status();
  return KvMemoryReport{plan.value().total_bytes, plan.value().Format()};
}

Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->vision_ = std::make_unique<Vision>();
  m->pool_ = options.pool;
  if (!m->pool_) {
    StatusOr<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(options.threads > 0 ? options.threads : DefaultThreadCount());
    if (!pool.ok()) return Status(pool.status().code(), "threads (--threads): " + pool.status().message());
    m->own_pool_ = std::move(pool.value());
    m->pool_ = m->own_pool_.get();
  }
  model::WeightLoadOptions wo;
  wo.convert_to = options.convert_to;
  wo.pack_panels_for = options.repack_for;
  wo.pool = m->pool_;
  if (options.quantize) {
    if (model::IsGgufFile(dir))
      return InvalidArgument("quantize on load (" + std::string(QuantizeFileTypeName(*options.quantize)) +
                             ") needs a checkpoint directory; '" + dir + "' is a GGUF, loaded as stored");
    auto rewrite = QuantizeOnLoad(dir, *options.quantize, m->pool_);
    if (!rewrite.ok()) return rewrite.status();
    wo.rewrite_matrix = std::move(rewrite.value());
  }
  StatusOr<std::unique_ptr<model::LoadedModel>> loaded = model::LoadedModel::Load(dir, wo);
  if (!loaded.ok()) return loaded.status();
  m->loaded_ = std::move(loaded.value());
  m->info_ = Describe(*m->loaded_);
  if (options.draft_quantize && options.draft.empty())
    return InvalidArgument("draft_quantize (--draft-quantize) needs a drafter (--draft DIR)");
  if (!options.draft.empty()) {
    model::WeightLoadOptions dq;
    if (options.draft_quantize) {
      auto rewrite = QuantizeDrafterOnLoad(*options.draft_quantize, m->pool_);
      if (!rewrite.ok()) return rewrite.status();
      dq.rewrite_matrix = std::move(rewrite.value());
    }
    StatusOr<std::unique_ptr<model::Drafter>> d = model::Drafter::Load(options.draft, m->loaded_->model(), dq);
    if (!d.ok()) return Status(d.status().code(), "draft (--draft): " + d.status().message());
    m->drafter_ = std::move(d.value());
    m->info_.draft = true;
  }
  return m;
}

StatusOr<tokenizer::TokenizerVocab> Model::TokenizerVocab() const {
  if (!loaded_->is_gguf())
    return InvalidArgument(loaded_->dir() + " is a checkpoint directory: its tokenizer is tokenizer.model");
  return model::ReadGgufVocab(*loaded_->gguf());
}

Status Model::CheckSession(const SessionOptions& options) const {
  StatusOr<runtime::SessionMemoryPlan> plan = runtime::PlanSession(loaded_->model(), options, pool_->num_threads());
  if (!plan.ok()) return plan.status();
  return runtime::CheckSessionFits(plan.value(), options);
}

StatusOr<std::unique_ptr<Session>> Model::NewSession(const SessionOptions& options, ThreadPool* pool) const {
  StatusOr<std::unique_ptr<runtime::Session>> s = runtime::Session::Create(loaded_->model(), options, pool ? pool : pool_);
  if (!s.ok()) return s.status();
  return std::unique_ptr<Session>(new Session(std::move(s.value()), drafter_.get()));
}

StatusOr<size_t> Model::KvCacheBytes(const SessionOptions& options) const {
  StatusOr<kv::KvMemoryPlan> plan = kv::KvCache::Plan(runtime::KvCacheConfigFor(loaded_->model().arch(), options));
  if (!plan.ok()) return plan.status();
  return plan.value().total_bytes;
}

StatusOr<std::vector<TileCensus>> Model::PrefillTiles(const Prompt& prompt) const {
  const model::GemmaArch& a = loaded_->model().arch();
  const int64_t S = static_cast<int64_t>(prompt.tokens.size());
  if (!prompt.token_types.empty() && static_cast<int64_t>(prompt.token_types.size()) != S)
    return InvalidArgument("Model::PrefillTiles: " + std::to_string(prompt.token_types.size()) + " token types for " +
                           std::to_string(S) + " tokens");
  std::vector<int32_t> pos(S), blk;
  for (int64_t i = 0; i < S; ++i) pos[i] = static_cast<int32_t>(i);
  runtime::BlockIds(prompt, a.block_token_types, blk);
  std::vector<TileCensus> out;
  for (const model::LayerArch& la : a.layers) {
    AttentionParams q;
    q.q = {nullptr, DType::kF32, 1, a.q_heads, S, la.head_dim, 0, 0, 0};
    q.k = {nullptr, DType::kF32, 1, la.kv_heads, S, la.head_dim, 0, 0, 0};
    q.mask.q_pos = q.mask.k_pos = pos.data();
    model::SetLayerMask(la, a.causal, blk.data(), blk.data(), &q.mask);
    out.push_back(CensusPrefillTiles(q));
  }
  return out;
}

Session::Session(std::unique_ptr<runtime::Session> impl, const model::Drafter* drafter)
    : impl_(std::move(impl)), drafter_(drafter) {}
Session::~Session() = default;

Status Session::Prefill(const std::vector<Prompt>& prompts, float* last_logits, float* all_logits,
                        float* hidden_after_layer) {
  model::ActivationTap tap{hidden_after_layer};
  return impl_->Prefill(prompts, last_logits, all_logits, hidden_after_layer ? &tap : nullptr);
}

Status Session::Decode(const int32_t* tokens, const uint8_t* active, float* logits) {
  return impl_->Decode(tokens, active, logits);
}

Status Session::Generate(const std::vector<Prompt>& prompts, const GenerateOptions& options, GenerateOutput* out) {
  if (options.draft_tokens != 0) {
    if (!drafter_)
      return InvalidArgument("Generate: draft_tokens " + std::to_string(options.draft_tokens) +
                             " needs a drafter loaded beside the model (LoadOptions::draft, --draft)");
    return runtime::GenerateSpeculative(*impl_, *drafter_, prompts, options, out);
  }
  return runtime::Generate(*impl_, prompts, options, out);
}

Status Session::Verify(const int32_t* tokens, int64_t n, float* logits) {
  return impl_->Verify(tokens, n, logits, nullptr);
}
Status Session::Rewind(int64_t b, int64_t n) {
  if (b < 0 || b >= impl_->max_batch() || n < 0 || n > impl_->position(b))
    return InvalidArgument("Session::Rewind: row " + std::to_string(b) + ", " + std::to_string(n) + " tokens");
  return impl_->RewindRow(b, n);
}

void Session::set_progress(std::function<void(int64_t, int64_t)> fn) { impl_->set_progress(std::move(fn)); }
int64_t Session::batch() const { return impl_->batch(); }
int64_t Session::position(int64_t b) const { return impl_->position(b); }
const SessionOptions& Session::options() const { return impl_->options(); }

SessionMemory Session::memory() const {
  return {impl_->cache().bytes(), impl_->activation_bytes(), impl_->planned_bytes()};
}

}  // namespace tessera
