// tessera.Model: load a Hugging Face Gemma checkpoint directory and run it, on the public engine
// API (tessera/engine.h). Prompts arrive as per-row token lists (python/tessera/model.py strips
// padding and splits image embeddings). Every call makes its own session over the immutable model,
// so calls from several Python threads need no lock: the shared pool takes turns itself.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "tessera/engine.h"
#include "tessera/image.h"
#include "tessera/tokenizer.h"

namespace tessera::py_bind {
namespace {

struct PyModel {
  std::unique_ptr<Model> model;  // immutable once loaded: shared by every call
  SessionOptions options;
  int64_t draft_tokens = 0;  // generate's default: the load's draft_tokens with a drafter, else 0
};

// The tokenizer a GGUF carries (Model.tokenizer for a .gguf path): encode / decode as _Tokenizer.
struct PyVocabTokenizer {
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

PyVocabTokenizer GgufTokenizer(const PyModel& m, const std::string& name) {
  StatusOr<tokenizer::TokenizerVocab> vocab = m.model->TokenizerVocab();
  ThrowIfError(vocab.status());
  StatusOr<std::unique_ptr<tokenizer::Tokenizer>> t = tokenizer::Tokenizer::FromVocab(vocab.value(), name);
  ThrowIfError(t.status());
  return PyVocabTokenizer{std::move(t.value())};
}

// A flag Python sets (from any thread) to stop a running generation at its next step.
struct PyCancel {
  std::atomic<bool> flag{false};
};

std::vector<Prompt> Prompts(const std::vector<std::vector<int32_t>>& tokens, const std::vector<std::vector<int32_t>>& types,
                            const std::vector<F32Array>& embeds) {
  if (!types.empty() && types.size() != tokens.size())
    throw py::value_error("token types must be given for every row or none");
  if (!embeds.empty() && embeds.size() != tokens.size())
    throw py::value_error("image embeddings must be given for every row or none");
  std::vector<Prompt> prompts(tokens.size());
  for (size_t b = 0; b < tokens.size(); ++b) {
    prompts[b].tokens = tokens[b];
    if (!types.empty()) prompts[b].token_types = types[b];
    if (!embeds.empty() && embeds[b].size() > 0) {
      if (embeds[b].ndim() != 2) throw py::value_error("image embeddings must be [rows, hidden]");
      prompts[b].image_embeds = embeds[b].data();
      prompts[b].image_rows = embeds[b].shape(0);
    }
  }
  return prompts;
}

void CheckHidden(const PyModel& m, const std::vector<F32Array>& embeds) {
  for (const F32Array& e : embeds)
    if (e.size() > 0 && e.shape(1) != m.model->info().hidden)
      throw py::value_error("image embeddings have width " + std::to_string(e.shape(1)) + ", the model's hidden size is " +
                            std::to_string(m.model->info().hidden));
}

// Options parsed by name; the checkpoint loaded with the GIL released (loading reads files and
// repacks on the shared pool: other Python threads go on), and a session of the options checked
// at load time (valid, and fits the memory the process can use).
std::unique_ptr<PyModel> MakeModel(const std::string& path, const std::string& dtype, int64_t max_batch,
                                   int64_t max_context, int64_t max_chunk, const std::string& kv_dtype, int threads,
                                   const std::string& mode, const std::string& attention_precision,
                                   const std::string& matmul_precision, bool repack, const std::string& quantize,
                                   const std::string& draft, int64_t draft_tokens, const std::string& draft_quantize) {
  auto pm = std::make_unique<PyModel>();
  LoadOptions lo;
  lo.draft = draft;
  if (!draft_quantize.empty()) {  // the type, and that there is a drafter, are checked by Model::Load
    QuantizeFileType q;
    if (!ParseQuantizeFileType(draft_quantize, &q))
      throw py::value_error("draft_quantize must be 'q8_0' or 'q4_0', got '" + draft_quantize + "'");
    lo.draft_quantize = q;
  }
  if (!draft.empty()) {
    if (draft_tokens < 1 || draft_tokens + 1 > max_chunk)
      throw py::value_error("draft_tokens " + std::to_string(draft_tokens) + " outside [1, max_chunk - 1 = " +
                            std::to_string(max_chunk - 1) + "]");
    pm->draft_tokens = draft_tokens;
    pm->options.verify_tokens = draft_tokens + 1;
  }
  if (!quantize.empty()) {
    QuantizeFileType q;
    if (!ParseQuantizeFileType(quantize, &q))
      throw py::value_error("unknown quantize '" + quantize + "' (q8_0, q4_0, q4_k_m, q5_k_m)");
    lo.quantize = q;
  }
  if (dtype != "auto") {
    DType d;
    if (!ParseDType(dtype, &d)) throw py::value_error("unknown dtype '" + dtype + "'");
    lo.convert_to = d;
  }
  SessionOptions& o = pm->options;
  o.max_batch = max_batch;
  o.max_context = max_context;
  o.max_chunk = max_chunk;
  if (!ParseDType(kv_dtype, &o.kv_dtype)) throw py::value_error("unknown kv_dtype '" + kv_dtype + "'");
  if (!ParseAttentionPrecision(attention_precision, &o.attention_precision))
    throw py::value_error("unknown attention_precision '" + attention_precision + "' (f32, bf16)");
  if (!ops::ParseMatmulPrecision(matmul_precision, &o.matmul_precision))
    throw py::value_error("unknown matmul_precision '" + matmul_precision + "' (f32, bf16, int8)");
  if (!ParseMode(mode, &o.mode)) throw py::value_error("unknown mode '" + mode + "' (unified, bias, split)");
  lo.repack_for = repack ? std::optional(o.matmul_precision) : std::nullopt;
  Status st;
  {
    py::gil_scoped_release release;
    StatusOr<ThreadPool*> pool = Runtime().TryPool(threads);
    st = pool.status();
    if (st.ok()) {
      lo.pool = pool.value();
      StatusOr<std::unique_ptr<Model>> loaded = Model::Load(path, lo);
      st = loaded.status();
      if (st.ok()) pm->model = std::move(loaded.value());
    }
    if (st.ok()) st = pm->model->CheckSession(o);
  }
  ThrowIfError(st);
  return pm;
}

py::array_t<float> Forward(const PyModel& m, const std::vector<std::vector<int32_t>>& tokens,
                           const std::vector<std::vector<int32_t>>& types, const std::vector<F32Array>& embeds) {
  CheckHidden(m, embeds);
  const std::vector<Prompt> prompts = Prompts(tokens, types, embeds);
  SessionOptions o = m.options;
  o.all_logits = true;
  o.max_batch = std::max<int64_t>(o.max_batch, static_cast<int64_t>(prompts.size()));
  size_t s_max = 0;
  for (const auto& t : tokens) s_max = std::max(s_max, t.size());
  const int64_t V = m.model->info().vocab;
  py::array_t<float> logits({static_cast<int64_t>(prompts.size()), static_cast<int64_t>(s_max), V});
  std::fill(logits.mutable_data(), logits.mutable_data() + logits.size(), 0.0f);
  float* out = logits.mutable_data();
  Status st;
  {
    py::gil_scoped_release release;
    auto s = m.model->NewSession(o);
    st = s.ok() ? s.value()->Prefill(prompts, nullptr, out) : s.status();
  }
  ThrowIfError(st);
  return logits;
}

// Residual stream after every layer for one prompt: [layers, S, hidden].
py::array_t<float> HiddenStates(const PyModel& m, const std::vector<int32_t>& tokens, const std::vector<int32_t>& types,
                                const F32Array& embeds) {
  std::vector<F32Array> e;
  if (embeds.size() > 0) e.push_back(embeds);
  CheckHidden(m, e);
  std::vector<std::vector<int32_t>> ty;
  if (!types.empty()) ty.push_back(types);
  const std::vector<Prompt> prompts = Prompts({tokens}, ty, e);
  const ModelInfo& a = m.model->info();
  const int64_t S = static_cast<int64_t>(tokens.size());
  py::array_t<float> hidden({static_cast<int64_t>(a.layers.size()), S, a.hidden});
  float* out = hidden.mutable_data();
  SessionOptions o = m.options;
  o.max_batch = 1;
  o.max_chunk = std::max<int64_t>(o.max_chunk, S);
  o.max_context = std::max(o.max_context, o.max_chunk);
  Status st;
  {
    py::gil_scoped_release release;
    auto s = m.model->NewSession(o);
    std::vector<float> last(a.vocab);
    st = s.ok() ? s.value()->Prefill(prompts, last.data(), nullptr, out) : s.status();
  }
  ThrowIfError(st);
  return hidden;
}

// Generation through the engine's one loop. on_token (optional) is called with the GIL held for
// every token; returning False stops that row. An exception it raises stops every row and is
// raised here once the loop has ended.
py::tuple Generate(const PyModel& m, const std::vector<std::vector<int32_t>>& tokens,
                   const std::vector<std::vector<int32_t>>& types, const std::vector<F32Array>& embeds,
                   int64_t max_new, float temperature, int64_t top_k, float top_p, uint64_t seed,
                   const std::vector<int32_t>& stop, int64_t draft_tokens, const py::object& on_token,
                   PyCancel* cancel) {
  CheckHidden(m, embeds);
  const std::vector<Prompt> prompts = Prompts(tokens, types, embeds);
  SessionOptions o = m.options;
  o.max_batch = std::max<int64_t>(o.max_batch, static_cast<int64_t>(prompts.size()));
  GenerateOptions g;
  g.max_new_tokens = max_new;
  g.sampling = {temperature, top_k, top_p, seed};
  g.stop_tokens = stop;
  g.draft_tokens = draft_tokens < 0 ? m.draft_tokens : draft_tokens;
  if (g.draft_tokens > 0) o.verify_tokens = std::max(o.verify_tokens, std::min(g.draft_tokens + 1, o.max_chunk));
  PyCancel own;
  PyCancel* flag = cancel ? cancel : &own;
  g.cancel = &flag->flag;
  std::exception_ptr raised;  // whatever the callback threw (a Python error, a failed cast)
  if (!on_token.is_none())
    g.on_token = [&](int64_t row, int32_t token) {
      py::gil_scoped_acquire gil;
      try {
        const py::object keep = on_token(row, token);
        return keep.is_none() || keep.cast<bool>();
      } catch (...) {
        raised = std::current_exception();
        flag->flag = true;
        return false;
      }
    };
  GenerateOutput out;
  Status st;
  {
    py::gil_scoped_release release;
    auto s = m.model->NewSession(o);
    st = s.ok() ? s.value()->Generate(prompts, g, &out) : s.status();
  }
  if (raised) std::rethrow_exception(raised);
  ThrowIfError(st);
  py::list rows, finish;
  for (const RowOutput& r : out.rows) rows.append(py::cast(r.tokens)), finish.append(FinishReasonName(r.finish));
  return py::make_tuple(rows, finish);
}

// One image argument: a path (decoded here) or a uint8 array [H, W] / [H, W, C], C in 1, 3, 4.
StatusOr<image::Image> DecodeImageArg(const py::handle& item, size_t index) {
  if (py::isinstance<py::str>(item) || py::hasattr(item, "__fspath__")) {
    const std::string path = py::str(py::module_::import("os").attr("fspath")(item));
    py::gil_scoped_release release;
    return image::LoadImageFile(path);
  }
  py::array a = py::array::ensure(item);
  if (!a || a.dtype().kind() != 'u' || a.itemsize() != 1)
    throw py::value_error("images[" + std::to_string(index) + "]: a path or a uint8 array [H, W(, C)] is needed");
  auto u8 = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(a);
  if (u8.ndim() != 2 && u8.ndim() != 3)
    throw py::value_error("images[" + std::to_string(index) + "]: array must be [H, W] or [H, W, C], got " +
                          std::to_string(u8.ndim()) + " dimensions");
  return image::ImageFromPixels(u8.data(), u8.shape(0), u8.shape(1), u8.ndim() == 3 ? u8.shape(2) : 1);
}

image::Image ToImage(const py::handle& item, size_t index) {
  StatusOr<image::Image> img = DecodeImageArg(item, index);
  if (!img.ok())
    ThrowIfError(Status(img.status().code(), "images[" + std::to_string(index) + "]: " + img.status().message()));
  return std::move(img).value();
}

py::array_t<float> Rows(const ImageFeatures& f) {
  const int64_t n = f.hidden > 0 ? static_cast<int64_t>(f.rows.size()) / f.hidden : 0;
  py::array_t<float> out({n, f.hidden});
  std::copy(f.rows.begin(), f.rows.end(), out.mutable_data());
  return out;
}

// Images (paths or arrays) to soft tokens: ([N, hidden] rows, soft tokens per image).
py::tuple EncodeImages(const PyModel& m, const py::list& items, int64_t image_tokens) {
  std::vector<image::Image> images;
  for (size_t i = 0; i < items.size(); ++i) images.push_back(ToImage(items[i], i));
  EncodeOptions eo{image_tokens, m.options.matmul_precision};
  std::optional<StatusOr<ImageFeatures>> f;
  {
    py::gil_scoped_release release;
    f = m.model->EncodeImages(images, eo);
  }
  ThrowIfError(f->status());
  return py::make_tuple(Rows(f->value()), f->value().tokens_per_image);
}

// Processed pixels (one array per image, as transformers' processors make them) to soft tokens.
py::array_t<float> EncodePixels(const PyModel& m, const std::vector<F32Array>& pixels,
                                const std::vector<std::optional<I32Array>>& positions,
                                const std::vector<int64_t>& soft_tokens) {
  if (positions.size() != pixels.size() || soft_tokens.size() != pixels.size())
    throw py::value_error("pixels, positions and soft_tokens need one entry per image");
  std::vector<image::PixelInput> inputs(pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) {
    image::PixelInput& in = inputs[i];
    in.pixels.assign(pixels[i].data(), pixels[i].data() + pixels[i].size());
    for (py::ssize_t d = 0; d < pixels[i].ndim(); ++d) in.shape.push_back(pixels[i].shape(d));
    in.valid_rows = in.shape.empty() ? 0 : in.shape[0];
    if (positions[i]) {
      const I32Array& p = *positions[i];
      if (p.ndim() != 2 || p.shape(1) != 2 || in.shape.empty() || p.shape(0) != in.shape[0])
        throw py::value_error("image_position_ids[" + std::to_string(i) + "] must be [" +
                              std::to_string(in.shape.empty() ? 0 : in.shape[0]) + ", 2]");
      in.positions.assign(p.data(), p.data() + p.size());
      in.valid_rows = 0;
      for (py::ssize_t r = 0; r < p.shape(0); ++r) in.valid_rows += !(p.at(r, 0) == -1 && p.at(r, 1) == -1);
    }
    in.soft_tokens = soft_tokens[i];
  }
  std::optional<StatusOr<ImageFeatures>> f;
  {
    py::gil_scoped_release release;
    f = m.model->EncodePixels(inputs, EncodeOptions{0, m.options.matmul_precision});
  }
  ThrowIfError(f->status());
  return Rows(f->value());
}

// One row's tokens with its images laid out: (tokens, token types).
py::tuple LayoutImages(const PyModel& m, const std::vector<int32_t>& tokens, const std::vector<int64_t>& counts,
                       std::optional<int32_t> double_newline) {
  ImageFeatures f;
  f.tokens_per_image = counts;
  StatusOr<Prompt> p = m.model->LayoutImagePrompt(tokens, f, double_newline);
  ThrowIfError(p.status());
  return py::make_tuple(p.value().tokens, p.value().token_types);
}

}  // namespace

void BindModel(py::module_& m) {
  py::class_<PyCancel>(m, "_Cancel")
      .def(py::init<>())
      .def("set", [](PyCancel& c) { c.flag = true; })
      .def_property_readonly("is_set", [](const PyCancel& c) { return c.flag.load(); });
  py::class_<PyVocabTokenizer>(m, "_VocabTokenizer")
      .def("encode", [](const PyVocabTokenizer& t, const std::string& text, bool add_bos) {
        StatusOr<std::vector<int32_t>> ids = t.tok->Encode(text, add_bos);
        ThrowIfError(ids.status());
        return ids.value();
      })
      .def("decode", [](const PyVocabTokenizer& t, const std::vector<int32_t>& ids) {
        StatusOr<std::string> s = t.tok->Decode(ids);
        ThrowIfError(s.status());
        return s.value();
      });
  py::class_<PyModel>(m, "_Model")
      .def(py::init(&MakeModel))
      .def_property_readonly("_is_gguf", [](const PyModel& m) { return m.model->info().gguf; })
      .def_property_readonly("_inferred", [](const PyModel& m) { return m.model->info().inferred; })
      .def_property_readonly("_attention_scale", [](const PyModel& m) { return m.model->info().attention_scale; })
      .def_property_readonly("_final_softcap", [](const PyModel& m) { return m.model->info().final_softcap; })
      .def_property_readonly("_layers", [](const PyModel& m) {
        py::list out;
        for (const LayerInfo& l : m.model->info().layers)
          out.append(py::dict(py::arg("kind") = l.kind, py::arg("kv_heads") = l.kv_heads,
                              py::arg("head_dim") = l.head_dim, py::arg("window") = l.window,
                              py::arg("has_v_proj") = l.has_v_proj, py::arg("shared_kv") = l.shared_kv,
                              py::arg("rotary_pairs") = l.rotary_pairs, py::arg("mask") = l.mask));
        return out;
      })
      .def("_gguf_tokenizer", &GgufTokenizer)
      .def_property_readonly("vocab_size", [](const PyModel& m) { return m.model->info().vocab; })
      .def_property_readonly("hidden_size", [](const PyModel& m) { return m.model->info().hidden; })
      .def_property_readonly("repacked", [](const PyModel& m) { return m.model->info().repacked; })
      .def_property_readonly("has_draft", [](const PyModel& m) { return m.model->info().draft; })
      .def_property_readonly("model_type", [](const PyModel& m) { return m.model->info().model_type; })
      .def_property_readonly("num_layers", [](const PyModel& m) { return m.model->info().layers.size(); })
      .def_property_readonly("eos_token_ids", [](const PyModel& m) { return m.model->info().eos_token_ids; })
      .def_property_readonly("_soft_token_ids", [](const PyModel& m) { return m.model->info().image_token_ids; })
      .def("_encode_images", &EncodeImages)
      .def("_encode_pixels", &EncodePixels)
      .def("_layout_images", &LayoutImages)
      .def_property_readonly("_special_ids", [](const PyModel& m) {
        const ModelInfo& i = m.model->info();
        py::dict d;
        auto put = [&d](const char* k, const std::optional<int32_t>& v) { d[k] = v ? py::object(py::int_(*v)) : py::none(); };
        put("bos", i.bos_token_id), put("image", i.image_token_id), put("boi", i.boi_token_id), put("eoi", i.eoi_token_id);
        return d;
      })
      .def("_forward", &Forward)
      .def("_hidden_states", &HiddenStates)
      .def("_generate", &Generate, py::arg("tokens"), py::arg("types"), py::arg("embeds"), py::arg("max_new"),
           py::arg("temperature"), py::arg("top_k"), py::arg("top_p"), py::arg("seed"), py::arg("stop"),
           py::arg("draft_tokens") = -1, py::arg("on_token") = py::none(), py::arg("cancel") = nullptr);
}

}  // namespace tessera::py_bind
