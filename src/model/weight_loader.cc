#include "model/weight_loader.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "ops/bf16_dot.h"
#include "tessera/gemm.h"

namespace tessera::model {
namespace {

constexpr int64_t kPackChunkBytes = int64_t{32} << 20;  // stored bytes packed per step (whole 16-row panels)

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Binder {
 public:
  Binder(const WeightSource& src, const WeightLoadOptions& opt, GemmaWeights& w) : src_(src), opt_(opt), w_(w) {}

  StatusOr<StoredTensor> Tensor(const std::string& name, const std::vector<int64_t>& shape) {
    StatusOr<StoredTensor> t = src_.Get(name);
    if (!t.ok()) return t.status();
    if (t.value().shape != shape)
      return InvalidArgument("LoadGemmaWeights: tensor " + t.value().name + " in " + src_.path() + " has shape " +
                             ShapeString(t.value().shape) + ", expected " + ShapeString(shape));
    return t;
  }

  // use kLinear: a matrix some Linear reads (packed into panels on request); kLookup: a table
  // read by row (the embeddings); a tied embedding is both.
  enum class Use { kLookup, kLinear };

  Status Matrix(const std::string& name, int64_t out, int64_t in, ops::WeightView* view, Use use = Use::kLinear) {
    StatusOr<StoredTensor> t = Tensor(name, {out, in});
    if (t.ok() && opt_.rewrite_matrix) t = opt_.rewrite_matrix(name, t.value(), &w_.owned);
    if (!t.ok()) return t.status();
    if (t.value().quant != QuantType::kNone) return BindQuant(t.value(), out, in, view);
    return Bind(t.value().name, t.value(), out, in, view, use);
  }

  // A block-quantized matrix stays as stored (its row size a whole number of blocks); every block
  // scale is checked finite after the prefault.
  Status BindQuant(const StoredTensor& v, int64_t out, int64_t in, ops::WeightView* view) {
    const int64_t be = QuantBlockElems(v.quant), bb = QuantBlockBytes(v.quant);
    if (QuantRowBytes(v.quant, in) <= 0)
      return InvalidArgument("LoadGemmaWeights: tensor " + v.name + " in " + src_.path() + " is " +
                             QuantTypeName(v.quant) + " with rows of " + std::to_string(in) +
                             " values, not a multiple of its block size " + std::to_string(be));
    if (in > ops::kMaxQuantRowDotIn)  // the decode kernel quantizes x on the stack
      return InvalidArgument("LoadGemmaWeights: tensor " + v.name + " in " + src_.path() + " is " +
                             QuantTypeName(v.quant) + " with rows of " + std::to_string(in) +
                             " values; quantized rows of up to " + std::to_string(ops::kMaxQuantRowDotIn) +
                             " are supported");
    *view = {v.data, DType::kF32, out, in};
    view->quant = v.quant;
    io::MappedFile::Prefault(v.data, v.nbytes);
    const char* data = static_cast<const char*>(v.data);
    const int64_t bad = FirstBadInParts(out * in, [&](int64_t i0, int64_t len) {
      const int64_t b = FirstNonFiniteBlock(v.quant, data + i0 / be * bb, len);
      return b < 0 ? -1 : b * be;
    });
    if (bad >= 0)
      return InvalidArgument("LoadGemmaWeights: tensor " + v.name + " in " + src_.path() + " (" +
                             QuantTypeName(v.quant) + ") has a non-finite block scale in block " +
                             std::to_string(bad / be) + " (row " + std::to_string(bad / in) + ")");
    return Status::Ok();
  }

  // Every element of a matrix is checked finite (docs/reliability.md) where a pass already reads
  // it (the conversion, the packing), else after the prefault; on the pool.
  Status Bind(const std::string& name, const StoredTensor& v, int64_t out, int64_t in, ops::WeightView* view,
              Use use) {
    const bool convert = opt_.convert_to && *opt_.convert_to != v.dtype;
    const DType dtype = convert ? *opt_.convert_to : v.dtype;
    const Panels panels = use == Use::kLinear ? PanelsFor(dtype, convert) : Panels::kNone;
    if (convert) {
      w_.owned.emplace_back(static_cast<size_t>(out * in) * DTypeSize(dtype));
      *view = {w_.owned.back().data(), dtype, out, in};
      // Converted in parts over the pool, each checked while it is still in cache.
      const char* from = static_cast<const char*>(v.data);
      char* to = static_cast<char*>(w_.owned.back().data());
      const size_t es_from = DTypeSize(v.dtype), es_to = DTypeSize(dtype);
      const int64_t bad = FirstBadInParts(out * in, [&](int64_t i0, int64_t len) {
        ConvertDType(v.dtype, from + i0 * es_from, dtype, to + i0 * es_to, len);
        return FirstNonFinite(dtype, to + i0 * es_to, len);
      });
      if (bad >= 0) return NonFiniteError(name, *view, bad, /*converted=*/true);
      if (panels != Panels::kNone) return PackPanels(name, panels, view, /*mapped=*/false, /*checked=*/true);
      return Status::Ok();
    }
    *view = {v.data, v.dtype, out, in};
    // (A matrix to pack is read chunk by chunk there.)
    if (panels != Panels::kNone) return PackPanels(name, panels, view, /*mapped=*/true, /*checked=*/false);
    io::MappedFile::Prefault(v.data, v.nbytes);  // a hint: the weights stay usable either way
    const char* data = static_cast<const char*>(view->data);
    const size_t es = DTypeSize(view->dtype);
    const int64_t bad =
        FirstBadInParts(out * in, [&](int64_t i0, int64_t len) { return FirstNonFinite(view->dtype, data + i0 * es, len); });
    if (bad >= 0) return NonFiniteError(name, *view, bad, /*converted=*/false);
    return Status::Ok();
  }

  // Runs part(i0, len) over [0, n) in runs of kCheckElems spread over the pool; part returns the
  // index of a non-finite element within its run, or -1. Returns the lowest such index, or -1.
  template <typename Part>
  int64_t FirstBadInParts(int64_t n, Part part) {
    constexpr int64_t kCheckElems = int64_t{1} << 16;
    constexpr int64_t kMinParallelParts = 16;  // smaller matrices: less work than waking the threads
    const int64_t parts = (n + kCheckElems - 1) / kCheckElems;
    std::vector<int64_t> first(parts, -1);
    auto run = [&](int64_t k, int) {
      const int64_t i0 = k * kCheckElems, bad = part(i0, std::min(kCheckElems, n - i0));
      if (bad >= 0) first[k] = i0 + bad;
    };
    if (opt_.pool && parts >= kMinParallelParts) {
      opt_.pool->ParallelFor(parts, run);
    } else {
      for (int64_t k = 0; k < parts; ++k) run(k, 0);
    }
    for (int64_t f : first)
      if (f >= 0) return f;
    return -1;
  }

  // The error for the non-finite element `index` (row-major) of matrix `name` as held in `view`.
  Status NonFiniteError(const std::string& name, const ops::WeightView& view, int64_t index, bool converted) const {
    float x;
    DecodeToF32(view.dtype, static_cast<const char*>(view.data) + index * DTypeSize(view.dtype), &x, 1);
    return InvalidArgument("LoadGemmaWeights: tensor " + name + " in " + src_.path() + " has a non-finite value (" +
                           (std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf") + ") at [" +
                           std::to_string(index / view.in) + ", " + std::to_string(index % view.in) + "]" +
                           (converted ? std::string(" after conversion to ") + DTypeName(view.dtype) : ""));
  }

  // The panels Linear reads at WeightLoadOptions::pack_panels_for, for a matrix held as dtype
  // (converted to it on load or not): pair panels of bf16 matrices at precision bf16 (CPUs with the
  // dot product), f32 panels of f32 matrices at precision f32 unless converted; none otherwise. A
  // bf16 matrix at precision f32 stays bf16 (f32 panels would double its memory), and so does a
  // matrix converted to f32 (Model.load's default on a bf16 checkpoint): its converted copy is
  // already owned memory, which panels beside it would double.
  enum class Panels { kNone, kPairs, kF32 };
  Panels PanelsFor(DType dtype, bool converted) const {
    if (!opt_.pack_panels_for) return Panels::kNone;
    if (*opt_.pack_panels_for == ops::MatmulPrecision::kBf16)
      return dtype == DType::kBF16 && ops::Bf16Dot() ? Panels::kPairs : Panels::kNone;
    return dtype == DType::kF32 && !converted ? Panels::kF32 : Panels::kNone;
  }

  // Adds a matrix's panels (pair or f32, WeightLoadOptions::pack_panels_for), in chunks of 16-row
  // panels; a mapped original's pages are released chunk by chunk once packed, so loading holds
  // the panels plus one chunk, not both copies. Each run of kCheckRows rows is checked finite just
  // before it is packed, while it is in cache.
  Status PackPanels(const std::string& name, Panels kind, ops::WeightView* view, bool mapped, bool checked) {
    constexpr int64_t kCheckRows = 64;
    const bool pairs = kind == Panels::kPairs;
    // Elements (4 bytes: pair words or floats) of one 16-row panel.
    const int64_t panel_elems = 16 * (pairs ? (view->in + 1) / 2 : view->in);
    const int64_t row_bytes = view->in * static_cast<int64_t>(DTypeSize(view->dtype));
    const int64_t chunk_rows = std::max<int64_t>(16, kPackChunkBytes / row_bytes / 16 * 16);
    // On huge pages: the first touch of fresh memory is the load's main cost, and it is several
    // times faster on huge pages (bench/results/kernel_choices.md, "Panels on huge pages"); decode
    // also streams the panels as attention streams the KV cache. Every element is written below
    // (both packers zero-fill past out and in), by the threads.
    AlignedBuffer panels = AlignedBuffer::Untouched(static_cast<size_t>((view->out + 15) / 16 * panel_elems) * 4,
                                                    AlignedBuffer::Pages::kHuge);
    const char* src = static_cast<const char*>(view->data);
    for (int64_t r0 = 0; r0 < view->out; r0 += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, view->out - r0);
      const char* chunk = src + r0 * row_bytes;
      if (mapped) io::MappedFile::Prefault(chunk, rows * row_bytes);
      // The chunk's 16-row panels split over the threads.
      const int64_t blocks = (rows + 15) / 16, threads = opt_.pool ? opt_.pool->num_threads() : 1;
      const int64_t per = (blocks + threads - 1) / threads;
      std::vector<int64_t> bad(threads, -1);  // per part: the first non-finite element, row-major
      auto pack = [&](int64_t part, int) {
        const int64_t b0 = part * per, b1 = std::min(blocks, b0 + per);
        const int64_t end = std::min(r0 + rows, r0 + 16 * b1);
        for (int64_t first = r0 + 16 * b0; first < end; first += kCheckRows) {
          const int64_t n = std::min(kCheckRows, end - first);
          const int64_t at = checked ? -1 : FirstNonFinite(view->dtype, src + first * row_bytes, n * view->in);
          if (at >= 0) {
            bad[part] = first * view->in + at;
            return;
          }
          const ops::WeightView part_view{src + first * row_bytes, view->dtype, n, view->in};
          const int64_t offset = first / 16 * panel_elems;
          // (PackPairPanels cannot fail here: bf16 weights, the dot product present, PanelsFor.)
          if (pairs) {
            ops::PackPairPanels(part_view, panels.as<uint32_t>() + offset);
          } else {
            ops::PackF32Panels(part_view, panels.as<float>() + offset);
          }
        }
      };
      if (opt_.pool) {
        opt_.pool->ParallelFor(threads, pack);
      } else {
        pack(0, 0);
      }
      for (int64_t at : bad)
        if (at >= 0) return NonFiniteError(name, *view, at, /*converted=*/false);
      if (mapped) io::MappedFile::Release(chunk, rows * row_bytes);
    }
    if (pairs) {
      view->pairs = panels.as<uint32_t>();
    } else {
      view->panels = panels.as<float>();
    }
    w_.owned.push_back(std::move(panels));
    return Status::Ok();
  }

  // Rows [row0, row0 + out) of each expert of a stacked [experts, rows, in] tensor, bound as a
  // matrix of its own (converted, packed and checked as any other; quantize-on-load rewrites each
  // slice, passed with the stacked tensor's name, so the quantized Linears apply per expert). A
  // block-quantized tensor's rows are whole blocks, so each slice is whole rows of blocks.
  Status ExpertMatrices(const std::string& name, int64_t experts, int64_t rows, int64_t in, int64_t row0,
                        int64_t out, std::vector<ops::WeightView>* views) {
    StatusOr<StoredTensor> t = Tensor(name, {experts, rows, in});
    if (!t.ok()) return t.status();
    const StoredTensor& st = t.value();
    const int64_t row_bytes = st.quant != QuantType::kNone ? QuantRowBytes(st.quant, in)
                                                            : in * static_cast<int64_t>(DTypeSize(st.dtype));
    if (row_bytes <= 0)
      return InvalidArgument("LoadGemmaWeights: tensor " + st.name + " in " + src_.path() + " is " +
                             QuantTypeName(st.quant) + " with rows of " + std::to_string(in) +
                             " values, not a multiple of its block size " +
                             std::to_string(QuantBlockElems(st.quant)));
    views->resize(experts);
    for (int64_t e = 0; e < experts; ++e) {
      StoredTensor part = st;
      part.data = static_cast<const char*>(st.data) + static_cast<size_t>((e * rows + row0) * row_bytes);
      part.shape = {out, in};
      part.nbytes = static_cast<uint64_t>(out * row_bytes);
      const std::string which = st.name + "[" + std::to_string(e) + ", " + std::to_string(row0) + ":" +
                                std::to_string(row0 + out) + "]";
      part.name = which;
      if (opt_.rewrite_matrix) {
        StatusOr<StoredTensor> q = opt_.rewrite_matrix(name, part, &w_.owned);
        if (!q.ok()) return q.status();
        if (q.value().quant != QuantType::kNone) {
          TESSERA_RETURN_IF_ERROR(BindQuant(q.value(), out, in, &(*views)[e]));
          continue;
        }
        part = q.value();
      }
      if (part.quant != QuantType::kNone) {
        TESSERA_RETURN_IF_ERROR(BindQuant(part, out, in, &(*views)[e]));
        continue;
      }
      TESSERA_RETURN_IF_ERROR(Bind(which, part, out, in, &(*views)[e], Use::kLinear));
    }
    return Status::Ok();
  }

  // A vector of n values as f32 (owned copy).
  Status Vector(const std::string& name, int64_t n, const float** out) {
    StatusOr<StoredTensor> t = Tensor(name, {n});
    if (!t.ok()) return t.status();
    const StoredTensor& st = t.value();
    if (st.quant != QuantType::kNone && QuantRowBytes(st.quant, n) <= 0)
      return InvalidArgument("LoadGemmaWeights: tensor " + st.name + " in " + src_.path() + " is " +
                             QuantTypeName(st.quant) + " with " + std::to_string(n) +
                             " values, not a multiple of its block size");
    w_.owned.emplace_back(n * sizeof(float));
    float* v = w_.owned.back().as<float>();
    if (st.quant != QuantType::kNone) {
      DequantizeRow(st.quant, st.data, v, n);
    } else {
      DecodeToF32(st.dtype, st.data, v, n);
    }
    // Converting the checkpoint means converting every weight: round vectors through the target
    // dtype too (kept as f32 values for the f32 compute).
    if (opt_.convert_to && *opt_.convert_to != DType::kF32)
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        EncodeFromF32(*opt_.convert_to, v + i, &h, 1);
        DecodeToF32(*opt_.convert_to, &h, v + i, 1);
      }
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(w_.owned.back().as<float>()[i]))
        return InvalidArgument("LoadGemmaWeights: tensor " + st.name + " in " + src_.path() +
                               " has a non-finite value at " + std::to_string(i));
    *out = w_.owned.back().as<float>();
    return Status::Ok();
  }

 private:
  const WeightSource& src_;
  const WeightLoadOptions& opt_;
  GemmaWeights& w_;
};

// sqrt(n) rounded to `dtype`, as transformers casts the embedding scale to the weight dtype.
float ScaleInDType(int64_t n, DType dtype) {
  const float s = std::sqrt(static_cast<float>(n));
  if (dtype == DType::kBF16) return Bf16ToF32(F32ToBf16(s));
  if (dtype == DType::kF16) return F16ToF32(F32ToF16(s));
  return s;
}

// The MoE block of one layer (names relative to "layers.<l>."; shapes: gemma_weights.h).
Status BindExperts(Binder& bind, const GemmaArch& a, const std::string& p, LayerWeights* lw) {
  const int64_t H = a.hidden, E = a.experts, I = a.expert_intermediate;
  TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "router.proj.weight", E, H, &lw->router));
  TESSERA_RETURN_IF_ERROR(bind.Vector(p + "router.scale", H, &lw->router_scale));
  TESSERA_RETURN_IF_ERROR(bind.Vector(p + "router.per_expert_scale", E, &lw->expert_scale));
  TESSERA_RETURN_IF_ERROR(bind.ExpertMatrices(p + "experts.gate_up_proj", E, 2 * I, H, 0, I, &lw->expert_gate));
  TESSERA_RETURN_IF_ERROR(bind.ExpertMatrices(p + "experts.gate_up_proj", E, 2 * I, H, I, I, &lw->expert_up));
  TESSERA_RETURN_IF_ERROR(bind.ExpertMatrices(p + "experts.down_proj", E, H, I, 0, H, &lw->expert_down));
  TESSERA_RETURN_IF_ERROR(bind.Vector(p + "post_feedforward_layernorm_1.weight", H, &lw->post_ffw_norm_1));
  TESSERA_RETURN_IF_ERROR(bind.Vector(p + "pre_feedforward_layernorm_2.weight", H, &lw->pre_ffw_norm_2));
  return bind.Vector(p + "post_feedforward_layernorm_2.weight", H, &lw->post_ffw_norm_2);
}

}  // namespace

StatusOr<GemmaWeights> BindGemmaWeights(const WeightSource& src, const GemmaArch& a, const WeightLoadOptions& opt) {
  GemmaWeights w;
  Binder bind(src, opt, w);
  const int64_t H = a.hidden, L = a.num_layers();
  const bool head = src.HasLmHead();  // false: tied to the embedding
  TESSERA_RETURN_IF_ERROR(bind.Matrix("embed_tokens.weight", a.vocab, H, &w.embed,
                                      head ? Binder::Use::kLookup : Binder::Use::kLinear));
  // (A block-quantized table has no dtype to round the scale to: f32, as llama.cpp scales.)
  w.embed_scale = ScaleInDType(H, w.embed.quant != QuantType::kNone ? DType::kF32 : w.embed.dtype);
  if (head) {
    TESSERA_RETURN_IF_ERROR(bind.Matrix("lm_head.weight", a.vocab, H, &w.lm_head));
  } else {
    w.lm_head = w.embed;  // with panels, the lookup reads them too (GemmaModel::Embed)
  }
  TESSERA_RETURN_IF_ERROR(bind.Vector("norm.weight", H, &w.final_norm));
  if (a.ple_dim > 0) {
    const int64_t LP = L * a.ple_dim;
    TESSERA_RETURN_IF_ERROR(
        bind.Matrix("embed_tokens_per_layer.weight", a.ple_vocab, LP, &w.ple_embed, Binder::Use::kLookup));
    w.ple_embed_scale =
        ScaleInDType(a.ple_dim, w.ple_embed.quant != QuantType::kNone ? DType::kF32 : w.ple_embed.dtype);
    // Each layer's slice of a PLE row is looked up alone: a quantized table must have its blocks
    // aligned to the slices.
    if (w.ple_embed.quant != QuantType::kNone && a.ple_dim % QuantBlockElems(w.ple_embed.quant) != 0)
      return Unimplemented("LoadGemmaWeights: the per-layer embedding table in " + src.path() + " is " +
                           QuantTypeName(w.ple_embed.quant) + " with per-layer width " + std::to_string(a.ple_dim) +
                           ", not a multiple of its block size " +
                           std::to_string(QuantBlockElems(w.ple_embed.quant)));
    TESSERA_RETURN_IF_ERROR(bind.Matrix("per_layer_model_projection.weight", LP, H, &w.ple_model_proj));
    TESSERA_RETURN_IF_ERROR(bind.Vector("per_layer_projection_norm.weight", a.ple_dim, &w.ple_proj_norm));
  }
  w.layers.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    const LayerArch& la = a.layers[l];
    LayerWeights& lw = w.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    const int64_t D = la.head_dim;
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "self_attn.q_proj.weight", a.q_heads * D, H, &lw.q_proj));
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "self_attn.o_proj.weight", H, a.q_heads * D, &lw.o_proj));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "self_attn.q_norm.weight", D, &lw.q_norm));
    if (!la.shared_kv) {
      TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "self_attn.k_proj.weight", la.kv_heads * D, H, &lw.k_proj));
      if (la.has_v_proj)
        TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "self_attn.v_proj.weight", la.kv_heads * D, H, &lw.v_proj));
      TESSERA_RETURN_IF_ERROR(bind.Vector(p + "self_attn.k_norm.weight", D, &lw.k_norm));
    }
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "mlp.gate_proj.weight", la.intermediate, H, &lw.gate));
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "mlp.up_proj.weight", la.intermediate, H, &lw.up));
    TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "mlp.down_proj.weight", H, la.intermediate, &lw.down));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "input_layernorm.weight", H, &lw.input_norm));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "post_attention_layernorm.weight", H, &lw.post_attn_norm));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "pre_feedforward_layernorm.weight", H, &lw.pre_ffw_norm));
    TESSERA_RETURN_IF_ERROR(bind.Vector(p + "post_feedforward_layernorm.weight", H, &lw.post_ffw_norm));
    if (a.family == Family::kGemma4) {
      const float* scalar = nullptr;
      TESSERA_RETURN_IF_ERROR(bind.Vector(p + "layer_scalar", 1, &scalar));
      lw.layer_scalar = *scalar;
    }
    if (a.experts > 0) TESSERA_RETURN_IF_ERROR(BindExperts(bind, a, p, &lw));
    if (a.ple_dim > 0) {
      TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "per_layer_input_gate.weight", a.ple_dim, H, &lw.ple_gate));
      TESSERA_RETURN_IF_ERROR(bind.Matrix(p + "per_layer_projection.weight", H, a.ple_dim, &lw.ple_proj));
      TESSERA_RETURN_IF_ERROR(bind.Vector(p + "post_per_layer_input_norm.weight", H, &lw.ple_post_norm));
    }
  }
  return w;
}

namespace {

// A safetensors checkpoint: names under its language-model prefix, the untied head by full key.
class SafetensorsSource : public WeightSource {
 public:
  explicit SafetensorsSource(const io::SafetensorsCheckpoint& ckpt) : ckpt_(ckpt), head_(ckpt.LmHeadName()) {}
  const std::string& path() const override { return ckpt_.path(); }
  bool HasLmHead() const override { return head_.has_value(); }
  StatusOr<StoredTensor> Get(const std::string& name) const override {
    const bool head = name == "lm_head.weight" && head_;
    StatusOr<io::SafetensorsTensor> t = head ? ckpt_.Get(*head_) : ckpt_.GetLanguageModelTensor(name);
    if (!t.ok()) return t.status();
    StoredTensor s;
    s.name = head ? *head_ : name;  // names relative to the language model, as messages always gave them
    s.data = t.value().data;
    s.dtype = t.value().dtype;
    s.shape = t.value().shape;
    s.nbytes = t.value().nbytes;
    return s;
  }

 private:
  const io::SafetensorsCheckpoint& ckpt_;
  std::optional<std::string> head_;
};

}  // namespace

StatusOr<GemmaWeights> LoadGemmaWeights(const io::SafetensorsCheckpoint& ckpt, const GemmaArch& a,
                                        const WeightLoadOptions& opt) {
  return BindGemmaWeights(SafetensorsSource(ckpt), a, opt);
}

}  // namespace tessera::model
