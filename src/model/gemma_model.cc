#include "model/gemma_model.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "model/moe.h"
#include "ops/elementwise.h"
#include "tessera/gemm.h"
#include "tessera/attention.h"
#include "tessera/quant.h"

namespace tessera::model {
namespace {

float* F(AlignedBuffer& b) { return b.as<float>(); }
// The GEMM's rounded-x scratch (ops/gemm.h), shared by every Linear call of the pass.
uint32_t* XPairs(Activations& act) { return act.x_pairs.as<uint32_t>(); }

// [B, heads, S, dim] view over a token-major [B*S, heads*dim] buffer.
HeadsView TokenMajor(const float* data, int64_t B, int64_t heads, int64_t S, int64_t dim) {
  return {data, DType::kF32, B, heads, S, dim, S * heads * dim, dim, heads * dim};
}

// Cache rows [first, first + B) of a layer's view: the rows a step computes, as its rows 0 .. B - 1.
kv::KvView RowsOf(kv::KvView v, int64_t first, int64_t B) {
  const int64_t slots = v.k.seq;
  v.k.data = v.k.At(first, 0, 0), v.v.data = v.v.At(first, 0, 0);
  v.k.batch = v.v.batch = B;
  v.k_pos += first * slots;
  if (v.k_block) v.k_block += first * slots;
  v.kv_valid += first;
  return v;
}

}  // namespace

Status GemmaModel::ValidateBatch(const ForwardBatch& in) const {
  if (in.batch < 1 || in.seq < 1 || in.tokens == nullptr || in.count == nullptr || in.pos == nullptr)
    return InvalidArgument("GemmaModel::Forward: batch " + std::to_string(in.batch) + " x seq " +
                           std::to_string(in.seq) + " needs tokens, count and pos");
  for (int64_t b = 0; b < in.batch; ++b) {
    if (in.count[b] < 0 || in.count[b] > in.seq)
      return InvalidArgument("GemmaModel::Forward: count[" + std::to_string(b) + "] = " + std::to_string(in.count[b]) +
                             " outside [0, " + std::to_string(in.seq) + "]");
    for (int64_t i = 0; i < in.seq; ++i) {
      const int32_t t = in.tokens[b * in.seq + i];
      if (!TokenOk(t, in.use_embed && in.use_embed[b * in.seq + i]))
        return TokenError(t, "GemmaModel::Forward: ", " at [" + std::to_string(b) + ", " + std::to_string(i) + "]");
    }
  }
  if (in.use_embed && !in.embeds) return InvalidArgument("GemmaModel::Forward: use_embed given without embeds");
  return Status::Ok();
}

bool GemmaModel::TokenOk(int32_t t, bool embedded) const {
  // Soft (image) tokens are replaced by their embedding: their id may lie outside the
  // vocabulary (Gemma 3 configs allow it), it is never looked up.
  return embedded || (t >= 0 && t < arch_.vocab && (arch_.ple_dim == 0 || t < arch_.ple_vocab));
}

Status GemmaModel::TokenError(int32_t t, const std::string& who, const std::string& at) const {
  if (t < 0 || t >= arch_.vocab)
    return OutOfRange(who + "token id " + std::to_string(t) + at + " is outside the vocabulary [0, " +
                      std::to_string(arch_.vocab) + ")");
  return OutOfRange(who + "token id " + std::to_string(t) + at + " is outside the per-layer-embedding vocabulary " +
                    std::to_string(arch_.ple_vocab));
}

// An image block must be prefilled in one step: if a row's first new token continues the block of
// the newest cached token, the caller split it (its earlier part already attended without the rest).
Status GemmaModel::CheckBlocksNotSplit(const ForwardBatch& in, const kv::KvCache& cache) const {
  if (!in.block) return Status::Ok();
  for (int64_t l = 0; l < arch_.num_layers(); ++l) {
    if (arch_.layers[l].shared_kv || !arch_.layers[l].image_blocks) continue;
    const kv::KvStore& store = cache.store(l);
    const kv::KvView view = store.View();
    for (int64_t b = 0; b < in.batch; ++b) {
      const int32_t first = in.block[b * in.seq];
      const int64_t r = in.first_row + b, written = store.write_pos(r);
      if (first < 0 || in.count[b] == 0 || written == 0) continue;
      const int64_t slot = (written - 1) % store.capacity();
      if (view.k_block[r * view.k.seq + slot] == first)
        return InvalidArgument("GemmaModel::Forward: image block " + std::to_string(first) + " of row " +
                               std::to_string(r) + " is split across prefill chunks (it continues from position " +
                               std::to_string(view.k_pos[r * view.k.seq + slot]) +
                               "); prefill each image block in one chunk");
    }
    return Status::Ok();  // one store holding block ids is enough
  }
  return Status::Ok();
}

void GemmaModel::EmbedToken(int32_t t, float* row) const {
  const int64_t H = arch_.hidden;
  const int32_t tok = arch_.LookupId(t);
  // A tied embedding packed as the LM head: its mapped rows were released.
  if (weights_.embed.pairs) {
    ops::PairPanelRowToF32(weights_.embed.pairs, H, tok, row);
  } else if (weights_.embed.panels) {
    ops::F32PanelRowToF32(weights_.embed.panels, H, tok, row);
  } else if (weights_.embed.quant != QuantType::kNone) {
    const int64_t row_bytes = QuantRowBytes(weights_.embed.quant, H);
    DequantizeRow(weights_.embed.quant, static_cast<const char*>(weights_.embed.data) + tok * row_bytes, row, H);
  } else {
    const size_t es = DTypeSize(weights_.embed.dtype);
    DecodeToF32(weights_.embed.dtype, static_cast<const char*>(weights_.embed.data) + tok * H * es, row, H);
  }
  for (int64_t i = 0; i < H; ++i) row[i] *= weights_.embed_scale;
}

void GemmaModel::Embed(const ForwardBatch& in, Activations& act) const {
  const int64_t H = arch_.hidden, n = in.batch * in.seq;
  float* h = F(act.h);
  for (int64_t t = 0; t < n; ++t) {
    float* row = h + t * H;
    if (in.use_embed && in.use_embed[t]) {
      std::memcpy(row, in.embeds + t * H, H * sizeof(float));  // soft tokens are not scaled
      continue;
    }
    EmbedToken(in.tokens[t], row);
  }
}

// Gemma 4 PLE: ple[t, l, :] = (norm(h0[t] W_proj^T / sqrt(hidden))[l] + E_ple[token][l] * sqrt(P)) / sqrt(2).
void GemmaModel::PerLayerInputs(const ForwardBatch& in, Activations& act, ThreadPool* pool) const {
  const int64_t P = arch_.ple_dim, L = arch_.num_layers(), n = in.batch * in.seq, LP = L * P;
  float* ple = F(act.ple);
  ops::Linear(weights_.ple_model_proj, F(act.h), n, arch_.hidden, ple, LP, pool, in.matmul_precision, XPairs(act), in.rows_as_steps);
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(arch_.hidden));
  for (int64_t i = 0; i < n * LP; ++i) ple[i] *= proj_scale;
  ops::RmsNorm(ple, P, weights_.ple_proj_norm, 0.0f, arch_.rms_eps, n * L, P, ple, P);
  const size_t es = DTypeSize(weights_.ple_embed.dtype);
  float* ident = F(act.ple_tmp);  // [P] staging for one layer's slice of the token's PLE row
  for (int64_t t = 0; t < n; ++t) {
    // transformers looks up soft (image/audio/video) tokens' identity under the pad id, and so a
    // placeholder id without an embedding (a generated one) too.
    const int32_t tok = in.use_embed && in.use_embed[t] ? arch_.pad_token_id : arch_.LookupId(in.tokens[t]);
    for (int64_t l = 0; l < L; ++l) {
      float* row = ple + t * LP + l * P;
      const QuantType q = weights_.ple_embed.quant;
      if (q != QuantType::kNone) {  // the loader checked that P is a whole number of blocks
        const char* base = static_cast<const char*>(weights_.ple_embed.data) + tok * QuantRowBytes(q, LP);
        DequantizeRow(q, base + l * P / QuantBlockElems(q) * QuantBlockBytes(q), ident, P);
      } else {
        DecodeToF32(weights_.ple_embed.dtype,
                    static_cast<const char*>(weights_.ple_embed.data) + (tok * LP + l * P) * es, ident, P);
      }
      for (int64_t i = 0; i < P; ++i) row[i] = (row[i] + ident[i] * weights_.ple_embed_scale) * 0.70710678118654752f;
    }
  }
}

Status GemmaModel::Attention(int64_t l, const ForwardBatch& in, kv::KvCache& cache, Activations& act,
                             ThreadPool* pool, Arena& attn_scratch) const {
  const LayerArch& la = arch_.layers[l];
  const LayerWeights& w = weights_.layers[l];
  const int64_t B = in.batch, S = in.seq, n = B * S, D = la.head_dim, Hq = arch_.q_heads, Hkv = la.kv_heads;
  float* x = F(act.x);
  float* q = F(act.q);
  float* k = F(act.k);
  float* v = F(act.v);
  // q, k and v read the same x: one LinearBatch (in decode one dispatch over all their rows).
  const int64_t H = arch_.hidden;
  ops::LinearJob qkv[3] = {{w.q_proj, x, n, H, q, Hq * D}};
  int64_t jobs = 1;
  if (!la.shared_kv) qkv[jobs++] = {w.k_proj, x, n, H, k, Hkv * D};
  if (!la.shared_kv && la.has_v_proj) qkv[jobs++] = {w.v_proj, x, n, H, v, Hkv * D};
  ops::LinearBatch(qkv, jobs, pool, in.matmul_precision, XPairs(act), in.rows_as_steps);
  ops::RmsNorm(q, D, w.q_norm, arch_.norm_offset, arch_.rms_eps, n * Hq, D, q, D);
  ops::Rope(q, n, Hq, D, Hq * D, D, in.pos, la.inv_freq.data(), la.rope_attention_scaling);
  if (!la.shared_kv) {
    if (!la.has_v_proj) std::memcpy(v, k, n * Hkv * D * sizeof(float));  // attention_k_eq_v: V is the raw k_proj output
    ops::RmsNorm(k, D, w.k_norm, arch_.norm_offset, arch_.rms_eps, n * Hkv, D, k, D);
    ops::Rope(k, n, Hkv, D, Hkv * D, D, in.pos, la.inv_freq.data(), la.rope_attention_scaling);
    if (arch_.v_norm) ops::RmsNorm(v, D, nullptr, 0.0f, arch_.rms_eps, n * Hkv, D, v, D);
    kv::KvAppend append;
    append.k = TokenMajor(k, B, Hkv, S, D);
    append.v = TokenMajor(v, B, Hkv, S, D);
    append.pos = in.pos;
    append.count = in.count;
    append.block = in.block;
    append.first_row = in.first_row;
    TESSERA_RETURN_IF_ERROR(cache.Append(l, append));
  }
  const kv::KvView view = RowsOf(cache.View(l), in.first_row, B);
  AttentionParams p;
  p.q = TokenMajor(q, B, Hq, S, D);
  p.k = view.k;
  p.v = view.v;
  p.out = {F(act.attn), B, Hq, S, D, S * Hq * D, D, Hq * D};
  p.mask.q_pos = in.pos;
  p.mask.k_pos = view.k_pos;
  p.mask.kv_valid = view.kv_valid;
  SetLayerMask(la, arch_.causal, in.block, view.k_block, &p.mask);
  p.scale = arch_.attn_scale;
  p.softcap = arch_.attn_softcap;
  p.precision = in.attention_precision;
  p.rows_as_steps = in.rows_as_steps && S > 1;  // one query row is a step already
  AttentionContext ctx{pool, &attn_scratch};
  TESSERA_RETURN_IF_ERROR(in.attention ? in.attention->Attend(p, ctx) : tessera::Attention(p, ctx));
  ops::Linear(w.o_proj, F(act.attn), n, Hq * D, x, arch_.hidden, pool, in.matmul_precision, XPairs(act), in.rows_as_steps);
  return Status::Ok();
}

void GemmaModel::Mlp(int64_t l, int64_t n, const ForwardBatch& in, Activations& act, ThreadPool* pool) const {
  const LayerWeights& w = weights_.layers[l];
  const int64_t I = arch_.layers[l].intermediate, H = arch_.hidden;
  float* gate = F(act.gate);
  float* up = F(act.up);
  const ops::LinearJob gate_up[2] = {{w.gate, F(act.x), n, H, gate, I}, {w.up, F(act.x), n, H, up, I}};
  ops::LinearBatch(gate_up, 2, pool, in.matmul_precision, XPairs(act), in.rows_as_steps);
  ops::GeGlu(gate, up, n * I, gate, pool);
  ops::Linear(w.down, gate, n, I, F(act.x), H, pool, in.matmul_precision, XPairs(act), in.rows_as_steps);
}

// Gemma 4 PLE residual: h += norm(proj(gelu(gate(h)) * ple[:, layer])).
void GemmaModel::PerLayerResidual(int64_t l, int64_t n, const ForwardBatch& in, Activations& act,
                                  ThreadPool* pool) const {
  const LayerWeights& w = weights_.layers[l];
  const int64_t P = arch_.ple_dim, H = arch_.hidden, LP = arch_.num_layers() * P;
  float* g = F(act.ple_tmp);
  ops::Linear(w.ple_gate, F(act.h), n, H, g, P, pool, in.matmul_precision, XPairs(act), in.rows_as_steps);
  ops::GeluTanh(g, n * P, pool);
  const float* ple = F(act.ple);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < P; ++i) g[t * P + i] *= ple[t * LP + l * P + i];
  float* x = F(act.x);
  ops::Linear(w.ple_proj, g, n, P, x, H, pool, in.matmul_precision, XPairs(act), in.rows_as_steps);
  ops::RmsNorm(x, H, w.ple_post_norm, arch_.norm_offset, arch_.rms_eps, n, H, x, H);
  float* h = F(act.h);
  for (int64_t i = 0; i < n * H; ++i) h[i] += x[i];
}

Status GemmaModel::Layer(int64_t l, const ForwardBatch& in, kv::KvCache& cache, Activations& act, ThreadPool* pool,
                         Arena& attn_scratch) const {
  const LayerWeights& w = weights_.layers[l];
  const int64_t n = in.batch * in.seq, H = arch_.hidden;
  const float off = arch_.norm_offset, eps = arch_.rms_eps;
  float* h = F(act.h);
  float* x = F(act.x);
  ops::RmsNorm(h, H, w.input_norm, off, eps, n, H, x, H);
  TESSERA_RETURN_IF_ERROR(Attention(l, in, cache, act, pool, attn_scratch));
  ops::RmsNorm(x, H, w.post_attn_norm, off, eps, n, H, x, H);
  for (int64_t i = 0; i < n * H; ++i) h[i] += x[i];
  ops::RmsNorm(h, H, w.pre_ffw_norm, off, eps, n, H, x, H);
  Mlp(l, n, in, act, pool);
  if (arch_.experts > 0) {
    // Gemma 4 MoE: the dense branch normed, plus the routed experts on the pre-MLP residual h.
    ops::RmsNorm(x, H, w.post_ffw_norm_1, off, eps, n, H, x, H);
    const MoeShape shape = MoeShapeOf(arch_);
    MoeScratch scratch = MoeScratch::Carve(shape, n, F(act.moe));
    scratch.x_pairs = XPairs(act);
    MoeForward(w, shape, h, n, in.matmul_precision, in.rows_as_steps, pool, scratch, scratch.result);
    for (int64_t i = 0; i < n * H; ++i) x[i] += scratch.result[i];
  }
  ops::RmsNorm(x, H, w.post_ffw_norm, off, eps, n, H, x, H);
  for (int64_t i = 0; i < n * H; ++i) h[i] += x[i];
  if (arch_.ple_dim > 0) PerLayerResidual(l, n, in, act, pool);
  if (w.layer_scalar != 1.0f)
    for (int64_t i = 0; i < n * H; ++i) h[i] *= w.layer_scalar;
  return Status::Ok();
}

ForwardBatch GemmaModel::GatherLastTokens(const ForwardBatch& in, Activations& act) const {
  const int64_t B = in.batch, H = arch_.hidden, LP = arch_.num_layers() * arch_.ple_dim;
  int32_t* pos = act.tail.as<int32_t>();
  int32_t* block = pos + act.max_tokens;
  int32_t* count = block + act.max_tokens;
  float* h = F(act.h);
  float* ple = F(act.ple);
  for (int64_t b = 0; b < B; ++b) {
    // A row sitting the step out (count 0) keeps its first slot: its output is never read.
    const int64_t t = b * in.seq + std::max<int32_t>(in.count[b], 1) - 1;
    // t >= b: moving rows forward in order never overwrites a row still to be moved.
    std::memmove(h + b * H, h + t * H, H * sizeof(float));
    if (LP > 0) std::memmove(ple + b * LP, ple + t * LP, LP * sizeof(float));
    pos[b] = in.pos[t];
    block[b] = in.block ? in.block[t] : -1;
    count[b] = 1;
  }
  ForwardBatch last = in;
  last.seq = 1;
  last.tokens = nullptr;  // embedded already
  last.use_embed = nullptr;
  last.embeds = nullptr;
  last.pos = pos;
  last.count = count;
  last.block = in.block ? block : nullptr;
  return last;
}

int64_t GemmaModel::Head(const ForwardBatch& in, Activations& act, ThreadPool* pool, float* logits) const {
  const int64_t H = arch_.hidden, n = in.batch * in.seq;
  const float* h = F(act.h);
  float* x = F(act.x);
  int64_t rows = 0;
  for (int64_t b = 0; b < in.batch; ++b) {
    if (in.all_logits) {
      std::memcpy(x + b * in.seq * H, h + b * in.seq * H, in.seq * H * 4);
      rows = n;
    } else {
      const int64_t last = std::max<int32_t>(in.count[b], 1) - 1;
      std::memmove(x + b * H, h + (b * in.seq + last) * H, H * 4);
      rows = in.batch;
    }
  }
  ops::RmsNorm(x, H, weights_.final_norm, arch_.norm_offset, arch_.rms_eps, rows, H, x, H);
  ops::Linear(weights_.lm_head, x, rows, H, logits, arch_.vocab, pool, in.matmul_precision, XPairs(act), in.rows_as_steps);
  if (arch_.final_softcap > 0) ops::SoftCap(logits, rows * arch_.vocab, arch_.final_softcap, pool);
  return rows;
}

Status GemmaModel::Forward(const ForwardBatch& in, kv::KvCache& cache, Activations& act, ThreadPool* pool,
                           Arena& attn_scratch, float* logits, const ActivationTap* tap) const {
  TESSERA_RETURN_IF_ERROR(ValidateBatch(in));
  const int64_t n = in.batch * in.seq, H = arch_.hidden, L = arch_.num_layers();
  if (n > act.max_tokens)
    return OutOfRange("GemmaModel::Forward: step of " + std::to_string(n) + " tokens exceeds the session's " +
                      std::to_string(act.max_tokens) + " (max_batch x max_chunk)");
  const int64_t cache_rows = cache.View(0).k.batch;
  if (in.first_row < 0 || in.first_row + in.batch > cache_rows)
    return InvalidArgument("GemmaModel::Forward: rows [" + std::to_string(in.first_row) + ", " +
                           std::to_string(in.first_row + in.batch) + ") are outside the cache's " +
                           std::to_string(cache_rows) + " rows");
  TESSERA_RETURN_IF_ERROR(CheckBlocksNotSplit(in, cache));
  const bool tapped = tap && tap->hidden_after_layer;
  const bool skip = in.skip_unread && !in.all_logits && !tapped;
  // Where the layers stop running on every token: the end, or the first of the KV-shared tail.
  const int64_t full_end = skip && (in.seq > 1 || !in.logits_read) ? arch_.kv_writers_end() : L;
  Embed(in, act);
  if (arch_.ple_dim > 0) PerLayerInputs(in, act, pool);
  for (int64_t l = 0; l < full_end; ++l) {
    TESSERA_RETURN_IF_ERROR(Layer(l, in, cache, act, pool, attn_scratch));
    if (tapped) std::memcpy(tap->hidden_after_layer + l * in.seq * H, F(act.h), in.seq * H * 4);
  }
  ForwardCounts ran;
  ran.layer_tokens = full_end * n;
  if (!skip || in.logits_read) {
    if (full_end == L) {
      ran.head_rows = Head(in, act, pool, logits);
    } else {
      const ForwardBatch last = GatherLastTokens(in, act);
      for (int64_t l = full_end; l < L; ++l) TESSERA_RETURN_IF_ERROR(Layer(l, last, cache, act, pool, attn_scratch));
      ran.layer_tokens += (L - full_end) * in.batch;
      ran.head_rows = Head(last, act, pool, logits);
    }
  }
  if (in.counts) in.counts->layer_tokens += ran.layer_tokens, in.counts->head_rows += ran.head_rows;
  return Status::Ok();
}

}  // namespace tessera::model
