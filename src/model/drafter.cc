#include "model/drafter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "io/mapped_file.h"
#include "model/weight_loader.h"
#include "ops/elementwise.h"
#include "tessera/attention.h"
#include "tessera/quant.h"

namespace tessera::model {
namespace {

float* F(AlignedBuffer& b) { return b.as<float>(); }

// The main model's last layer of `kind` that computes K/V itself (the one its KV-shared tail
// reads, transformers' store_full_length_kv), or -1.
int64_t LastWriter(const GemmaArch& main, kv::LayerKind kind) {
  for (int64_t l = main.num_layers() - 1; l >= 0; --l)
    if (main.layers[l].kind == kind && !main.layers[l].shared_kv) return l;
  return -1;
}

// A projection as f32 (it is small: a few widths squared), checked for shape and finiteness, then
// through `rewrite` where one is given (quantize on load).
Status LoadProjection(const io::SafetensorsCheckpoint& ckpt, const std::string& name, int64_t out, int64_t in,
                      const WeightLoadOptions& options, std::vector<AlignedBuffer>* owned, ops::WeightView* view) {
  StatusOr<io::SafetensorsTensor> t = ckpt.Get(name);
  if (!t.ok()) return Status(t.status().code(), "Drafter::Load: " + t.status().message());
  const io::SafetensorsTensor& st = t.value();
  if (st.shape != std::vector<int64_t>{out, in})
    return InvalidArgument("Drafter::Load: '" + ckpt.path() + "' tensor " + name + " has shape " +
                           (st.shape.size() == 2 ? "[" + std::to_string(st.shape[0]) + ", " +
                                                       std::to_string(st.shape[1]) + "]"
                                                 : "of rank " + std::to_string(st.shape.size())) +
                           ", expected [" + std::to_string(out) + ", " + std::to_string(in) + "]");
  if (st.dtype != DType::kF32 && st.dtype != DType::kBF16 && st.dtype != DType::kF16)
    return InvalidArgument("Drafter::Load: '" + ckpt.path() + "' tensor " + name + " has dtype " +
                           DTypeName(st.dtype) + "; expected F32, BF16 or F16");
  AlignedBuffer buf;
  buf.Resize(out * in * sizeof(float));
  DecodeToF32(st.dtype, st.data, buf.as<float>(), out * in);
  for (int64_t i = 0; i < out * in; ++i)
    if (!std::isfinite(buf.as<float>()[i]))
      return InvalidArgument("Drafter::Load: '" + ckpt.path() + "' tensor " + name + " holds a non-finite value at " +
                             std::to_string(i));
  *view = ops::WeightView{};
  view->data = buf.as<float>();
  view->out = out;
  view->in = in;
  if (options.rewrite_matrix) {
    const StoredTensor f32{name, buf.as<float>(), DType::kF32, QuantType::kNone, {out, in},
                           static_cast<uint64_t>(out * in * sizeof(float))};
    StatusOr<StoredTensor> r = options.rewrite_matrix(name, f32, owned);
    if (!r.ok()) return Status(r.status().code(), "Drafter::Load: " + r.status().message());
    if (r.value().data != f32.data) {  // rewritten: the f32 copy is no longer needed
      view->data = r.value().data;
      view->dtype = r.value().dtype;
      view->quant = r.value().quant;
      return Status::Ok();
    }
  }
  owned->push_back(std::move(buf));
  return Status::Ok();
}

// Bytes of one row of w as stored.
int64_t RowBytes(const ops::WeightView& w) {
  return w.quant != QuantType::kNone ? QuantRowBytes(w.quant, w.in) : w.in * static_cast<int64_t>(DTypeSize(w.dtype));
}

}  // namespace

StatusOr<std::unique_ptr<Drafter>> Drafter::Load(const std::string& dir, const GemmaModel& main,
                                                 const WeightLoadOptions& options) {
  StatusOr<DrafterConfig> cfg = LoadDrafterConfig(dir);
  if (!cfg.ok()) return cfg.status();
  std::unique_ptr<Drafter> d(new Drafter(main, std::move(cfg.value())));
  const GemmaArch& m = main.arch();
  if (main.arch().family != Family::kGemma4)
    return InvalidArgument("Drafter::Load: a gemma4_assistant drafts for a Gemma 4 model, not " + m.model_type);
  if (d->config_.backbone_hidden_size != m.hidden)
    return InvalidArgument("Drafter::Load: '" + dir + "' backbone_hidden_size = " +
                           std::to_string(d->config_.backbone_hidden_size) + " but the main model's hidden_size is " +
                           std::to_string(m.hidden));
  if (d->config_.text.vocab_size != m.vocab)
    return InvalidArgument("Drafter::Load: '" + dir + "' text_config.vocab_size = " +
                           std::to_string(d->config_.text.vocab_size) + " but the main model's is " +
                           std::to_string(m.vocab));
  StatusOr<GemmaArch> arch = BuildArch(d->config_.text);
  if (!arch.ok()) return Status(arch.status().code(), "Drafter::Load: '" + dir + "': " + arch.status().message());
  d->arch_ = std::move(arch.value());
  for (int64_t l = 0; l < d->arch_.num_layers(); ++l) {
    LayerArch& la = d->arch_.layers[l];
    la.shared_kv = true;  // no k_proj/v_proj/k_norm: every layer reads the main model's K/V
    la.has_v_proj = false;
    la.image_blocks = false;
    const int64_t src = LastWriter(m, la.kind);
    const std::string what = "Drafter::Load: '" + dir + "' layer " + std::to_string(l) + " (" +
                             (la.kind == kv::LayerKind::kSliding ? "sliding" : "full") + ")";
    if (src < 0) return InvalidArgument(what + ": the main model has no layer of that type to read K/V from");
    const LayerArch& ml = m.layers[src];
    if (ml.kv_heads != la.kv_heads || ml.head_dim != la.head_dim)
      return InvalidArgument(what + " has " + std::to_string(la.kv_heads) + " KV heads x " +
                             std::to_string(la.head_dim) + " but reads main layer " + std::to_string(src) + " with " +
                             std::to_string(ml.kv_heads) + " x " + std::to_string(ml.head_dim));
    if (la.kind == kv::LayerKind::kSliding && la.window != ml.window)
      return InvalidArgument(what + " has sliding_window " + std::to_string(la.window) + ", the main model " +
                             std::to_string(ml.window));
    d->source_.push_back(src);
  }
  StatusOr<io::SafetensorsCheckpoint> ckpt = io::SafetensorsCheckpoint::Open(dir);
  if (!ckpt.ok()) return Status(ckpt.status().code(), "Drafter::Load: " + ckpt.status().message());
  d->ckpt_.emplace(std::move(ckpt.value()));
  try {
    WeightLoadOptions wo;
    wo.rewrite_matrix = options.rewrite_matrix;
    if (wo.rewrite_matrix && d->config_.ordered_embeddings)  // the head is rewritten once clustered (ClusterHead)
      wo.rewrite_matrix = [rewrite = options.rewrite_matrix](const std::string& name, const StoredTensor& s,
                                                             std::vector<AlignedBuffer>* keep) {
        return name == "embed_tokens.weight" || name == "lm_head.weight" ? StatusOr<StoredTensor>(s)
                                                                          : rewrite(name, s, keep);
      };
    StatusOr<GemmaWeights> w = LoadGemmaWeights(*d->ckpt_, d->arch_, wo);
    if (!w.ok()) return Status(w.status().code(), "Drafter::Load: " + w.status().message());
    d->weights_ = std::move(w.value());
    TESSERA_RETURN_IF_ERROR(d->BindProjections(options));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("Drafter::Load: out of memory loading " + dir);
  }
  return d;
}

Status Drafter::BindProjections(const WeightLoadOptions& options) {
  const int64_t Ha = arch_.hidden, Hm = config_.backbone_hidden_size;
  TESSERA_RETURN_IF_ERROR(LoadProjection(*ckpt_, "pre_projection.weight", Ha, 2 * Hm, options, &owned_, &pre_proj_));
  TESSERA_RETURN_IF_ERROR(LoadProjection(*ckpt_, "post_projection.weight", Hm, Ha, options, &owned_, &post_proj_));
  if (!config_.ordered_embeddings) return Status::Ok();
  TESSERA_RETURN_IF_ERROR(LoadProjection(*ckpt_, "masked_embedding.centroids.weight", config_.num_centroids, Ha,
                                         options, &owned_, &centroids_));
  TESSERA_RETURN_IF_ERROR(BindOrderedHead());
  return ClusterHead(options);
}

// The LM head's rows copied in token_ordering's order, so each cluster's rows are one contiguous
// matrix that a step scores in one call (a row at a time, each call would quantize its input again,
// and a sixteen-row kernel would compute fifteen idle lanes per row), then quantized by `options`
// if asked. The mapped rows read for the copy are released: the step never reads them again.
Status Drafter::ClusterHead(const WeightLoadOptions& options) {
  const ops::WeightView& head = weights_.lm_head;  // [V, Ha] as stored (Load deferred its rewrite)
  const int64_t V = arch_.vocab, bytes = RowBytes(head);
  AlignedBuffer buf;
  buf.Resize(static_cast<size_t>(V * bytes));
  const char* src = static_cast<const char*>(head.data);
  for (int64_t i = 0; i < V; ++i) std::memcpy(buf.as<char>() + i * bytes, src + int64_t{clusters_[i]} * bytes, bytes);
  io::MappedFile::Release(src, static_cast<size_t>(V * bytes));
  clustered_ = head;
  clustered_.data = buf.as<char>();
  clustered_.pairs = nullptr;
  clustered_.panels = nullptr;
  if (options.rewrite_matrix) {
    const StoredTensor rows{"embed_tokens.weight", buf.data(), head.dtype, head.quant, {V, head.in},
                            static_cast<uint64_t>(V * bytes)};
    StatusOr<StoredTensor> r = options.rewrite_matrix(rows.name, rows, &owned_);
    if (!r.ok()) return Status(r.status().code(), "Drafter::Load: " + r.status().message());
    if (r.value().data != rows.data) {
      clustered_.data = r.value().data, clustered_.dtype = r.value().dtype, clustered_.quant = r.value().quant;
      return Status::Ok();
    }
  }
  owned_.push_back(std::move(buf));
  return Status::Ok();
}

// use_ordered_embeddings' token_ordering (its centroids are bound with the projections): it must be
// a permutation of the vocabulary, since a token listed twice would be scored twice, one never
// listed never proposed.
Status Drafter::BindOrderedHead() {
  const int64_t V = arch_.vocab;
  const std::string name = "masked_embedding.token_ordering";
  std::vector<int64_t> shape;
  StatusOr<std::vector<int64_t>> ids = ckpt_->GetIntegers(name, &shape);
  if (!ids.ok()) return Status(ids.status().code(), "Drafter::Load: " + ids.status().message());
  const std::string where = "Drafter::Load: '" + ckpt_->path() + "' tensor " + name;
  if (shape != std::vector<int64_t>{V})
    return InvalidArgument(where + " has " + std::to_string(shape.size()) + " dims / " +
                           std::to_string(ids.value().size()) + " values, expected [" + std::to_string(V) + "]");
  std::vector<uint8_t> seen(V, 0);
  clusters_.resize(V);
  for (int64_t i = 0; i < V; ++i) {
    const int64_t t = ids.value()[i];
    if (t < 0 || t >= V)
      return InvalidArgument(where + "[" + std::to_string(i) + "] = " + std::to_string(t) + " is outside [0, " +
                             std::to_string(V) + ")");
    if (seen[t]++)
      return InvalidArgument(where + " lists token " + std::to_string(t) + " twice (must be a permutation)");
    clusters_[i] = static_cast<int32_t>(t);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<DrafterScratch>> Drafter::NewScratch(const kv::KvCache& cache, ThreadPool* pool) const {
  auto s = std::make_unique<DrafterScratch>();
  const int64_t Hm = config_.backbone_hidden_size, Ha = arch_.hidden, QD = arch_.q_heads * arch_.max_head_dim();
  try {
    s->in.Reserve(2 * Hm * sizeof(float));
    s->h.Reserve(Ha * sizeof(float));
    s->x.Reserve(Ha * sizeof(float));
    s->q.Reserve(QD * sizeof(float));
    s->attn.Reserve(QD * sizeof(float));
    s->gate.Reserve(arch_.max_intermediate() * sizeof(float));
    s->up.Reserve(arch_.max_intermediate() * sizeof(float));
    if (config_.ordered_embeddings) {
      const int64_t C = config_.num_centroids, K = config_.centroid_top_k;
      s->centroid_logits.Reserve(C * sizeof(float));
      s->top.Reserve(K * sizeof(int32_t));
      s->selected.Reserve(K * (arch_.vocab / C) * sizeof(float));
    }
    size_t need = 0;
    const int threads = pool ? pool->num_threads() : 1;
    for (int64_t l = 0; l < arch_.num_layers(); ++l) {
      const kv::KvView view = cache.View(source_[l]);
      AttentionParams p;
      p.q = {nullptr, DType::kF32, 1, arch_.q_heads, 1, arch_.layers[l].head_dim, 0, 0, 0};
      p.k = view.k;
      p.v = view.v;
      p.k.batch = p.v.batch = 1;
      need = std::max(need, AttentionScratchBytes(p, threads));
    }
    s->attn_scratch.Reserve(need);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("Drafter::NewScratch: out of memory");
  }
  return s;
}

Status Drafter::Attention(int64_t l, const kv::KvCache& cache, int64_t row, int32_t pos, DrafterScratch& s,
                          ThreadPool* pool) const {
  const LayerArch& la = arch_.layers[l];
  const LayerWeights& w = weights_.layers[l];
  const int64_t D = la.head_dim, Hq = arch_.q_heads, H = arch_.hidden;
  float* q = F(s.q);
  ops::Linear(w.q_proj, F(s.x), 1, H, q, Hq * D, pool);
  ops::RmsNorm(q, D, w.q_norm, arch_.norm_offset, arch_.rms_eps, Hq, D, q, D);
  ops::Rope(q, 1, Hq, D, Hq * D, D, &pos, la.inv_freq.data(), la.rope_attention_scaling);
  const kv::KvView view = cache.View(source_[l]);
  AttentionParams p;
  p.q = {q, DType::kF32, 1, Hq, 1, D, Hq * D, D, Hq * D};
  p.k = view.k;
  p.v = view.v;
  // One row of the main cache: offset the views to `row`.
  p.k.data = static_cast<const char*>(p.k.data) + row * p.k.stride_batch * DTypeSize(p.k.dtype);
  p.v.data = static_cast<const char*>(p.v.data) + row * p.v.stride_batch * DTypeSize(p.v.dtype);
  p.k.batch = p.v.batch = 1;
  p.out = {F(s.attn), 1, Hq, 1, D, Hq * D, D, Hq * D};
  p.mask.q_pos = &pos;
  p.mask.k_pos = view.k_pos + row * view.k.seq;
  p.mask.kv_valid = view.kv_valid ? view.kv_valid + row : nullptr;
  p.mask.causal = true;
  // Sliding: the W + 1 positions before s (docs/speculative.md), one more than the main model's
  // own sliding layers see; full: every cached position.
  if (la.kind == kv::LayerKind::kSliding) {
    p.mask.window_left = static_cast<int32_t>(la.window + 1);
    p.mask.window_right = 0;
  }
  p.scale = arch_.attn_scale;
  p.softcap = arch_.attn_softcap;
  s.attn_scratch.Reset();
  AttentionContext ctx{pool, &s.attn_scratch};
  TESSERA_RETURN_IF_ERROR(tessera::Attention(p, ctx));
  ops::Linear(w.o_proj, F(s.attn), 1, Hq * D, F(s.x), H, pool);
  return Status::Ok();
}

void Drafter::Mlp(int64_t l, DrafterScratch& s, ThreadPool* pool) const {
  const LayerWeights& w = weights_.layers[l];
  const int64_t I = arch_.layers[l].intermediate, H = arch_.hidden;
  const ops::LinearJob gate_up[2] = {{w.gate, F(s.x), 1, H, F(s.gate), I}, {w.up, F(s.x), 1, H, F(s.up), I}};
  ops::LinearBatch(gate_up, 2, pool);  // quantized: one dispatch over both matrices' rows
  ops::GeGlu(F(s.gate), F(s.up), I, F(s.gate), pool);
  ops::Linear(w.down, F(s.gate), 1, I, F(s.x), H, pool);
}

Status Drafter::Step(const kv::KvCache& cache, int64_t row, int32_t token, int32_t pos, const float* state,
                     float* logits, float* next_state, DrafterScratch& s, ThreadPool* pool) const {
  const int64_t Hm = config_.backbone_hidden_size, H = arch_.hidden;
  if (!main_.TokenOk(token, false)) return main_.TokenError(token, "Drafter::Step: ", "");
  const int64_t rows = cache.View(source_[0]).k.batch;
  if (row < 0 || row >= rows)
    return InvalidArgument("Drafter::Step: row " + std::to_string(row) + " is outside the cache's " +
                           std::to_string(rows) + " rows");
  if (pos < 1) return InvalidArgument("Drafter::Step: position " + std::to_string(pos) + ": nothing cached before it");
  float* in = F(s.in);
  main_.EmbedToken(token, in);
  std::memcpy(in + Hm, state, Hm * sizeof(float));
  float* h = F(s.h);
  float* x = F(s.x);
  ops::Linear(pre_proj_, in, 1, 2 * Hm, h, H, pool);
  const float off = arch_.norm_offset, eps = arch_.rms_eps;
  for (int64_t l = 0; l < arch_.num_layers(); ++l) {
    const LayerWeights& w = weights_.layers[l];
    ops::RmsNorm(h, H, w.input_norm, off, eps, 1, H, x, H);
    TESSERA_RETURN_IF_ERROR(Attention(l, cache, row, pos, s, pool));
    ops::RmsNorm(x, H, w.post_attn_norm, off, eps, 1, H, x, H);
    for (int64_t i = 0; i < H; ++i) h[i] += x[i];
    ops::RmsNorm(h, H, w.pre_ffw_norm, off, eps, 1, H, x, H);
    Mlp(l, s, pool);
    ops::RmsNorm(x, H, w.post_ffw_norm, off, eps, 1, H, x, H);
    for (int64_t i = 0; i < H; ++i) h[i] += x[i];
    if (w.layer_scalar != 1.0f)
      for (int64_t i = 0; i < H; ++i) h[i] *= w.layer_scalar;
  }
  ops::RmsNorm(h, H, weights_.final_norm, off, eps, 1, H, x, H);
  // No final_logit_softcapping: the assistant's head is the bare tied projection (docs/speculative.md).
  if (config_.ordered_embeddings) {
    OrderedHead(x, logits, s, pool);
  } else {
    ops::Linear(weights_.lm_head, x, 1, H, logits, arch_.vocab, pool);
  }
  ops::Linear(post_proj_, x, 1, H, next_state, Hm, pool);
  return Status::Ok();
}

// use_ordered_embeddings, as transformers' Gemma4AssistantMaskedEmbedder: the centroid logits pick
// the top-k clusters (ties to the lower index), only their tokens are scored against the LM head,
// and every other token gets the smallest score computed minus one (below every scored token, so
// the argmax is always a scored one).
void Drafter::OrderedHead(const float* x, float* logits, DrafterScratch& s, ThreadPool* pool) const {
  const int64_t C = config_.num_centroids, K = config_.centroid_top_k, per = arch_.vocab / C, H = arch_.hidden;
  float* cl = F(s.centroid_logits);
  ops::Linear(centroids_, x, 1, H, cl, C, pool);
  int32_t* top = s.top.as<int32_t>();  // descending by centroid logit
  int64_t n = 0;
  for (int64_t c = 0; c < C; ++c) {
    if (n == K && !(cl[c] > cl[top[K - 1]])) continue;
    int64_t at = n < K ? n++ : K - 1;
    for (; at > 0 && cl[c] > cl[top[at - 1]]; --at) top[at] = top[at - 1];
    top[at] = static_cast<int32_t>(c);
  }
  float* sel = F(s.selected);  // [K, per]
  auto score = [&](int64_t i, int) {  // cluster top[i]: rows [top[i] * per, + per) of the clustered head
    ops::WeightView rows = clustered_;
    rows.data = static_cast<const char*>(clustered_.data) + int64_t{top[i]} * per * RowBytes(clustered_);
    rows.out = per;
    ops::LinearRowDot(rows, x, 1, H, sel + i * per, per, nullptr);
  };
  if (pool) {
    pool->ParallelFor(K, score);
  } else {
    for (int64_t i = 0; i < K; ++i) score(i, 0);
  }
  float lo = sel[0];
  for (int64_t i = 1; i < K * per; ++i) lo = std::min(lo, sel[i]);
  std::fill(logits, logits + arch_.vocab, lo - 1.0f);
  for (int64_t i = 0; i < K; ++i) {
    const int32_t* ids = clusters_.data() + int64_t{top[i]} * per;
    for (int64_t j = 0; j < per; ++j) logits[ids[j]] = sel[i * per + j];
  }
}

}  // namespace tessera::model
