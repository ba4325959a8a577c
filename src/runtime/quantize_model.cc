#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "io/input_file.h"
#include "io/json_nesting.h"
#include "io/safetensors_checkpoint.h"
#include "model/config.h"
#include "model/gguf_weights.h"
#include "runtime/quantize_model_meta.h"
#include "tessera/gguf.h"
#include "tessera/quantize.h"
#include "tessera/thread_pool.h"

namespace tessera {
namespace {

bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

int LayerOf(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

QuantType BaseType(QuantizeFileType t) {
  switch (t) {
    case QuantizeFileType::kQ8_0:
      return QuantType::kQ8_0;
    case QuantizeFileType::kQ4_0:
      return QuantType::kQ4_0;
    case QuantizeFileType::kQ4_K_M:
      return QuantType::kQ4_K;
    case QuantizeFileType::kQ5_K_M:
      return QuantType::kQ5_K;
  }
  return QuantType::kNone;
}

// llama.cpp quantizes weight matrices only: not vectors, norms, or the PLE model projection.
bool AllowsQuantization(const TensorPlan& t) {
  const std::string& n = t.name;
  return t.shape.size() >= 2 && n.size() >= 6 && n.compare(n.size() - 6, 6, "weight") == 0 &&
         !Contains(n, "_norm.weight") && !Contains(n, "ffn_gate_inp.weight") && !Contains(n, "per_layer_model_proj");
}

bool IsTokenEmbedding(const std::string& n) { return n == "token_embd.weight" || n == "per_layer_token_embd.weight"; }

// Layers that get more bits in the K-quant mixes: the first and last eighth, and every third between.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// A row that is not whole blocks of `q` takes llama.cpp's next type whose blocks fit, at worst F16.
GgufElementType Fallback(QuantType q, int64_t ncols) {
  if (ncols % QuantBlockElems(q) == 0) return {q, DType::kF32};
  if (q == QuantType::kQ4_K)
    q = QuantType::kQ5_0;
  else if (q == QuantType::kQ5_K)
    q = QuantType::kQ5_1;
  else if (q == QuantType::kQ6_K)
    q = QuantType::kQ8_0;
  if (ncols % QuantBlockElems(q) == 0) return {q, DType::kF32};
  return {QuantType::kNone, DType::kF16};
}

std::string Lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

bool ParseQuantizeFileType(std::string_view name, QuantizeFileType* out) {
  const std::string n = Lower(name);
  if (n == "q8_0")
    *out = QuantizeFileType::kQ8_0;
  else if (n == "q4_0")
    *out = QuantizeFileType::kQ4_0;
  else if (n == "q4_k_m")
    *out = QuantizeFileType::kQ4_K_M;
  else if (n == "q5_k_m")
    *out = QuantizeFileType::kQ5_K_M;
  else
    return false;
  return true;
}

const char* QuantizeFileTypeName(QuantizeFileType t) {
  switch (t) {
    case QuantizeFileType::kQ8_0:
      return "q8_0";
    case QuantizeFileType::kQ4_0:
      return "q4_0";
    case QuantizeFileType::kQ4_K_M:
      return "q4_k_m";
    case QuantizeFileType::kQ5_K_M:
      return "q5_k_m";
  }
  return "?";
}

uint32_t LlamaFtype(QuantizeFileType t) {
  switch (t) {
    case QuantizeFileType::kQ8_0:
      return 7;
    case QuantizeFileType::kQ4_0:
      return 2;
    case QuantizeFileType::kQ4_K_M:
      return 15;
    case QuantizeFileType::kQ5_K_M:
      return 17;
  }
  return 0;
}

std::string GgufElementType::Name() const {
  return quant != QuantType::kNone ? QuantTypeName(quant) : DTypeName(dtype);
}

bool LlamaTensorOrderLess(const std::string& a, const std::string& b) {
  const int la = LayerOf(a), lb = LayerOf(b);
  return la != lb ? la < lb : a < b;
}

std::vector<GgufElementType> ChooseTensorTypes(QuantizeFileType type, const std::vector<TensorPlan>& tensors,
                                               int64_t n_layers, int64_t n_experts) {
  bool tied = true;
  int n_attn_v = 0;
  for (const TensorPlan& t : tensors) {
    if (t.name == "output.weight") tied = false;
    if (Contains(t.name, "attn_v.weight")) ++n_attn_v;
  }
  const bool eight_experts = n_experts == 8;  // llama.cpp's rules for Mixtral-like models
  const bool k_mix = type == QuantizeFileType::kQ4_K_M || type == QuantizeFileType::kQ5_K_M;
  // The counters advance in llama.cpp's tensor order, whatever order `tensors` is in.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return LlamaTensorOrderLess(tensors[a].name, tensors[b].name); });
  std::vector<GgufElementType> out(tensors.size());
  int i_attn_v = 0, i_ffn_down = 0;
  for (size_t k : order) {
    const TensorPlan& t = tensors[k];
    if (!AllowsQuantization(t)) {
      out[k] = {QuantType::kNone, DType::kF32};
      continue;
    }
    const int64_t ncols = t.shape.back();
    QuantType q = BaseType(type);
    if (t.name == "output.weight" || (tied && IsTokenEmbedding(t.name))) {
      if (ncols % QuantBlockElems(q) != 0)
        q = QuantType::kQ8_0;
      else if (q != QuantType::kQ8_0)
        q = QuantType::kQ6_K;
    } else if (IsTokenEmbedding(t.name)) {
      // the base type
    } else if (Contains(t.name, "attn_v.weight")) {
      if (k_mix && UseMoreBits(i_attn_v, n_attn_v)) q = QuantType::kQ6_K;
      if (eight_experts) q = QuantType::kQ8_0;
      ++i_attn_v;
    } else if (Contains(t.name, "attn_k.weight")) {
      if (eight_experts) q = QuantType::kQ8_0;
    } else if (Contains(t.name, "attn_output.weight")) {
      if (eight_experts && type == QuantizeFileType::kQ4_K_M) q = QuantType::kQ5_K;
    } else if (Contains(t.name, "ffn_down")) {
      // With experts a layer holds two ffn_down matrices (dense and the expert stack): the layer
      // is then the one in the name, not the count of ffn_down tensors so far.
      const int layer = n_experts > 1 ? LayerOf(t.name) : i_ffn_down;
      if (k_mix && UseMoreBits(layer, static_cast<int>(n_layers))) q = QuantType::kQ6_K;
      ++i_ffn_down;
    }
    out[k] = Fallback(q, ncols);
  }
  return out;
}

namespace {

// The part of "layers.N.rest" after the layer number, or "" for any other name.
std::string LayerSuffix(const std::string& canonical) {
  if (canonical.compare(0, 7, "layers.") != 0) return "";
  const size_t dot = canonical.find('.', 7);
  return dot == std::string::npos ? "" : canonical.substr(dot + 1);
}

// The stacked expert matrices, which the loader quantizes one expert's slice at a time.
bool IsExpertMatrix(const std::string& canonical) {
  const std::string rest = LayerSuffix(canonical);
  return rest == "experts.gate_up_proj" || rest == "experts.down_proj";
}

struct SourceTensor {
  TensorPlan plan;
  std::string hf_name;        // empty: generated (rope_freqs)
  std::vector<float> values;  // generated tensors' data
  bool add_one = false;       // Gemma 3 norms are stored as 1 + w
};

StatusOr<nlohmann::json> TextConfigJson(const std::string& dir) {
  StatusOr<std::string> text = io::ReadInputFile(dir + "/config.json", "config", 64ull << 20);
  if (!text.ok()) return Status(text.status().code(), "quantize: " + text.status().message());
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(text.value(), dir + "/config.json"));
  nlohmann::json j = nlohmann::json::parse(text.value(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("quantize: '" + dir + "/config.json' is not a JSON object");
  if (j.contains("text_config") && j["text_config"].is_object()) return nlohmann::json(j["text_config"]);
  return j;
}

// Gemma 4's proportional RoPE on full layers, as the converter encodes it: factor 1 for each
// rotated pair, 1e30 for the pairs left in place.
void AddRopeFreqs(const model::ModelConfig& c, std::vector<SourceTensor>* out) {
  if (!c.is_gemma4() || c.rope_full.type != model::RopeType::kProportional) return;
  int64_t hd = 0;
  for (const model::LayerConfig& l : c.layers)
    if (l.kind == kv::LayerKind::kFull) hd = l.head_dim;
  if (hd == 0) return;
  const int64_t rot = static_cast<int64_t>(static_cast<double>(hd) * c.rope_full.partial_rotary_factor / 2);
  SourceTensor t;
  t.plan = {"rope_freqs.weight", {hd / 2}};
  t.values.assign(hd / 2, 1e30f);
  std::fill(t.values.begin(), t.values.begin() + std::min(rot, hd / 2), 1.0f);
  out->push_back(std::move(t));
}

StatusOr<std::vector<SourceTensor>> PlanTensors(const std::string& dir, const io::SafetensorsCheckpoint& ck,
                                                const model::ModelConfig& cfg, int64_t n_tokens) {
  StatusOr<std::string> prefix = ck.LanguageModelPrefix();
  if (!prefix.ok()) return Status(prefix.status().code(), "quantize: " + prefix.status().message());
  const std::optional<std::string> head = ck.LmHeadName();
  std::vector<SourceTensor> out;
  for (const std::string& name : ck.TensorNames()) {
    std::string canonical;
    if (head && name == *head)
      canonical = "lm_head.weight";
    else if (name.compare(0, prefix.value().size(), prefix.value()) == 0)
      canonical = name.substr(prefix.value().size());
    else
      continue;  // a vision / audio tower: not part of a text GGUF
    SourceTensor t;
    t.hf_name = name;
    t.plan.name = model::GgufTensorName(canonical, /*experts=*/cfg.has_moe());
    if (t.plan.name.empty())
      return Unimplemented("quantize: tensor " + name + " of '" + dir + "' has no GGUF counterpart this engine knows");
    StatusOr<io::SafetensorsTensor> st = ck.Get(name);
    if (!st.ok()) return Status(st.status().code(), "quantize: " + st.status().message());
    t.plan.shape = st.value().shape;
    if (t.plan.shape.empty()) t.plan.shape = {1};
    if (t.plan.name == "token_embd.weight" && t.plan.shape[0] > n_tokens) t.plan.shape[0] = n_tokens;
    const std::string& c = canonical;
    t.add_one = !cfg.is_gemma4() && c.size() >= 11 && c.compare(c.size() - 11, 11, "norm.weight") == 0;
    out.push_back(std::move(t));
  }
  AddRopeFreqs(cfg, &out);
  std::stable_sort(out.begin(), out.end(), [](const SourceTensor& a, const SourceTensor& b) {
    return LlamaTensorOrderLess(a.plan.name, b.plan.name);
  });
  return out;
}

// One f32 row of `cols` values stored as `type` at out; false, with the column in *bad_col, where
// it holds a non-finite value (nothing stored).
bool StoreRow(GgufElementType type, const float* row, int64_t cols, char* out, int64_t* bad_col) {
  const int64_t bad = FirstNonFinite(DType::kF32, row, cols);
  if (bad >= 0) {
    *bad_col = bad;
    return false;
  }
  if (type.quant != QuantType::kNone)
    QuantizeRow(type.quant, row, out, cols);
  else
    EncodeFromF32(type.dtype, row, out, cols);
  return true;
}

// fill(r0, r1, &bad_row, &bad_col) over a matrix's rows in chunks spread over `pool` (null: this
// thread); the first non-finite value a chunk reports (by row) as the error, `what` naming the tensor.
template <typename Fill>
Status InChunks(int64_t rows, int64_t cols, ThreadPool* pool, const std::string& what, const Fill& fill) {
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(cols, 1));
  const int64_t items = (rows + chunk - 1) / chunk;
  std::vector<int64_t> bad_row(items, -1), bad_col(items, -1);
  const auto item = [&](int64_t i, int) { fill(i * chunk, std::min(rows, (i + 1) * chunk), &bad_row[i], &bad_col[i]); };
  if (pool != nullptr)
    pool->ParallelFor(items, item);
  else
    for (int64_t i = 0; i < items; ++i) item(i, 0);
  for (int64_t i = 0; i < items; ++i)
    if (bad_row[i] >= 0)
      return InvalidArgument(what + " has a non-finite value at row " + std::to_string(bad_row[i]) + ", column " +
                             std::to_string(bad_col[i]));
  return Status::Ok();
}

// Writes rows [r0, r1) of one tensor: each row decoded to f32, shifted where the converter shifts,
// then stored. The first non-finite value's row and column go to *bad_row / *bad_col.
void FillRows(const SourceTensor& t, const io::SafetensorsTensor& src, GgufElementType type, char* dst, int64_t r0,
              int64_t r1, int64_t* bad_row, int64_t* bad_col) {
  const int64_t cols = t.plan.shape.back();
  std::vector<float> row(cols);
  const size_t esize = DTypeSize(src.dtype);
  const int64_t out_row = type.quant != QuantType::kNone ? QuantRowBytes(type.quant, cols)
                                                         : cols * static_cast<int64_t>(DTypeSize(type.dtype));
  for (int64_t r = r0; r < r1; ++r) {
    if (t.hf_name.empty())
      std::memcpy(row.data(), t.values.data() + r * cols, cols * sizeof(float));
    else
      DecodeToF32(src.dtype, static_cast<const char*>(src.data) + r * cols * esize, row.data(), cols);
    // The converter adds in the checkpoint's dtype: exact for f32, and an f16 checkpoint's sum is
    // rounded back to f16 (bf16 ones it widens to f32 first).
    if (t.add_one)
      for (float& v : row) v = src.dtype == DType::kF16 ? F16ToF32(F32ToF16(v + 1.0f)) : v + 1.0f;
    if (!StoreRow(type, row.data(), cols, dst + r * out_row, bad_col)) {
      *bad_row = r;
      return;
    }
  }
}

// Writes one tensor, its rows in chunks spread over `pool` (null: this thread).
Status FillTensor(const SourceTensor& t, const io::SafetensorsCheckpoint& ck, GgufElementType type, char* dst,
                  ThreadPool* pool) {
  const int64_t cols = t.plan.shape.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < t.plan.shape.size(); ++i) rows *= t.plan.shape[i];
  io::SafetensorsTensor src;
  if (!t.hf_name.empty()) {
    StatusOr<io::SafetensorsTensor> st = ck.Get(t.hf_name);
    if (!st.ok()) return st.status();
    src = st.value();
  }
  return InChunks(rows, cols, pool, "quantize: tensor " + (t.hf_name.empty() ? t.plan.name : t.hf_name),
                  [&](int64_t r0, int64_t r1, int64_t* bad_row, int64_t* bad_col) {
                    FillRows(t, src, type, dst, r0, r1, bad_row, bad_col);
                  });
}

// Rows [r0, r1) of one matrix decoded to f32 and stored as `type` at out; the first non-finite
// value's row and column go to *bad_row / *bad_col.
void StoreRows(const model::StoredTensor& s, GgufElementType type, int64_t row_bytes, char* out, int64_t r0,
               int64_t r1, int64_t* bad_row, int64_t* bad_col) {
  const int64_t cols = s.shape[1];
  std::vector<float> row(cols);
  const size_t esize = DTypeSize(s.dtype);
  for (int64_t r = r0; r < r1; ++r) {
    DecodeToF32(s.dtype, static_cast<const char*>(s.data) + r * cols * esize, row.data(), cols);
    if (!StoreRow(type, row.data(), cols, out + r * row_bytes, bad_col)) {
      *bad_row = r;
      return;
    }
  }
}

// One matrix stored as `type` in a buffer kept in `keep`, its rows in chunks spread over `pool`
// (null: this thread; rows are independent, so the bytes are the same).
StatusOr<model::StoredTensor> StoreAs(const model::StoredTensor& s, GgufElementType type,
                                      std::vector<AlignedBuffer>* keep, ThreadPool* pool) {
  const int64_t rows = s.shape[0], cols = s.shape[1];
  const int64_t row_bytes = type.quant != QuantType::kNone ? QuantRowBytes(type.quant, cols)
                                                           : cols * static_cast<int64_t>(DTypeSize(type.dtype));
  keep->emplace_back(static_cast<size_t>(rows * row_bytes));
  char* out = static_cast<char*>(keep->back().data());
  TESSERA_RETURN_IF_ERROR(InChunks(rows, cols, pool, "quantize on load: tensor " + s.name,
                                   [&](int64_t r0, int64_t r1, int64_t* bad_row, int64_t* bad_col) {
                                     StoreRows(s, type, row_bytes, out, r0, r1, bad_row, bad_col);
                                   }));
  model::StoredTensor q = s;
  q.data = out;
  q.quant = type.quant;
  q.dtype = type.quant != QuantType::kNone ? DType::kF32 : type.dtype;
  q.nbytes = static_cast<uint64_t>(rows * row_bytes);
  return q;
}

}  // namespace

StatusOr<decltype(model::WeightLoadOptions::rewrite_matrix)> QuantizeOnLoad(const std::string& dir,
                                                                            QuantizeFileType type, ThreadPool* pool) {
  StatusOr<model::ModelConfig> cfg = model::LoadModelConfig(dir);
  if (!cfg.ok()) return Status(cfg.status().code(), "quantize on load: " + cfg.status().message());
  StatusOr<io::SafetensorsCheckpoint> ck = io::SafetensorsCheckpoint::Open(dir);
  if (!ck.ok()) return Status(ck.status().code(), "quantize on load: " + ck.status().message());
  StatusOr<std::vector<SourceTensor>> plan = PlanTensors(dir, ck.value(), cfg.value(), INT64_MAX);
  if (!plan.ok()) return plan.status();
  std::vector<TensorPlan> tensors;
  for (const SourceTensor& t : plan.value()) tensors.push_back(t.plan);
  const std::vector<GgufElementType> types =
      ChooseTensorTypes(type, tensors, cfg.value().num_hidden_layers, cfg.value().num_experts);
  std::map<std::string, GgufElementType> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) by_name[tensors[i].name] = types[i];
  return decltype(model::WeightLoadOptions::rewrite_matrix)(
      [by_name, pool](const std::string& name, const model::StoredTensor& s,
                      std::vector<AlignedBuffer>* keep) -> StatusOr<model::StoredTensor> {
        // An expert's slice takes its stack's type, as in the GGUF.
        const auto it = by_name.find(model::GgufTensorName(name, /*experts=*/IsExpertMatrix(name)));
        if (it == by_name.end() || s.quant != QuantType::kNone || s.shape.size() != 2) return s;
        if (it->second.quant == QuantType::kNone && it->second.dtype == s.dtype) return s;
        return StoreAs(s, it->second, keep, pool);
      });
}

StatusOr<decltype(model::WeightLoadOptions::rewrite_matrix)> QuantizeDrafterOnLoad(QuantizeFileType type,
                                                                                   ThreadPool* pool) {
  if (type != QuantizeFileType::kQ8_0 && type != QuantizeFileType::kQ4_0)
    return InvalidArgument(std::string("draft_quantize (--draft-quantize) must be q8_0 or q4_0, got ") +
                           QuantizeFileTypeName(type));
  const GgufElementType to{type == QuantizeFileType::kQ8_0 ? QuantType::kQ8_0 : QuantType::kQ4_0, DType::kF32};
  return decltype(model::WeightLoadOptions::rewrite_matrix)(
      [to, pool](const std::string&, const model::StoredTensor& s,
                 std::vector<AlignedBuffer>* keep) -> StatusOr<model::StoredTensor> {
        if (s.quant != QuantType::kNone || s.shape.size() != 2 || s.shape[1] % QuantBlockElems(to.quant) != 0) return s;
        return StoreAs(s, to, keep, pool);
      });
}

StatusOr<QuantizeReport> QuantizeCheckpoint(const std::string& hf_dir, QuantizeFileType type,
                                            const std::string& out_path, ThreadPool* pool) {
  StatusOr<model::ModelConfig> cfg = model::LoadModelConfig(hf_dir);
  if (!cfg.ok()) return Status(cfg.status().code(), "quantize: " + cfg.status().message());
  StatusOr<nlohmann::json> tc = TextConfigJson(hf_dir);
  if (!tc.ok()) return tc.status();
  StatusOr<io::SafetensorsCheckpoint> ck = io::SafetensorsCheckpoint::Open(hf_dir);
  if (!ck.ok()) return Status(ck.status().code(), "quantize: " + ck.status().message());
  io::GgufWriter w;
  int64_t n_tokens = 0;
  TESSERA_RETURN_IF_ERROR(WriteQuantizeMetadata(hf_dir, cfg.value(), tc.value(), type, &w, &n_tokens));
  StatusOr<std::vector<SourceTensor>> plan = PlanTensors(hf_dir, ck.value(), cfg.value(), n_tokens);
  if (!plan.ok()) return plan.status();
  QuantizeReport report;
  for (const SourceTensor& t : plan.value()) report.tensors.push_back(t.plan);
  report.types = ChooseTensorTypes(type, report.tensors, cfg.value().num_hidden_layers, cfg.value().num_experts);
  const io::SafetensorsCheckpoint& checkpoint = ck.value();
  for (size_t i = 0; i < plan.value().size(); ++i) {
    const SourceTensor* t = &plan.value()[i];
    const GgufElementType ty = report.types[i];
    auto fill = [t, ty, &checkpoint, pool](char* dst) { return FillTensor(*t, checkpoint, ty, dst, pool); };
    if (ty.quant != QuantType::kNone)
      w.AddQuantTensor(t->plan.name, t->plan.shape, ty.quant, fill);
    else
      w.AddTensor(t->plan.name, t->plan.shape, ty.dtype, fill);
  }
  const Status written = w.Write(out_path);
  if (!written.ok()) return Status(written.code(), "quantize: " + written.message());
  return report;
}

}  // namespace tessera
