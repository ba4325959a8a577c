// tessera.Model: load a Hugging Face Gemma checkpoint directory and run it. Prompts arrive as
// per-row token lists (python/tessera/model.py strips padding and splits image embeddings).
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "model/loaded_model.h"
#include "runtime/session.h"
#include "runtime/session_plan.h"

namespace tessera::py_bind {
namespace {

struct PyModel {
  std::unique_ptr<model::LoadedModel> loaded;  // immutable once loaded: shared by every call
  runtime::SessionOptions options;
  int threads = 0;
  ThreadPool* pool = nullptr;  // Runtime()'s pool of `threads`
};

std::vector<runtime::Prompt> Prompts(const std::vector<std::vector<int32_t>>& tokens,
                                     const std::vector<std::vector<int32_t>>& types,
                                     const std::vector<F32Array>& embeds) {
  if (!types.empty() && types.size() != tokens.size())
    throw py::value_error("token types must be given for every row or none");
  if (!embeds.empty() && embeds.size() != tokens.size())
    throw py::value_error("image embeddings must be given for every row or none");
  std::vector<runtime::Prompt> prompts(tokens.size());
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

StatusOr<std::unique_ptr<runtime::Session>> NewSession(const PyModel& m, runtime::SessionOptions o) {
  return runtime::Session::Create(m.loaded->model(), o, m.pool);
}

// Starts (or reuses) the pool, loads the checkpoint and checks at load time that a session of the
// model's options can exist (valid, and fits the memory the process can use). GIL released.
Status LoadInto(PyModel& pm, const std::string& path, model::WeightLoadOptions wo) {
  StatusOr<ThreadPool*> pool = Runtime().TryPool(pm.threads);
  if (!pool.ok()) return pool.status();
  pm.pool = pool.value();
  wo.pool = pm.pool;
  StatusOr<std::unique_ptr<model::LoadedModel>> loaded = model::LoadedModel::Load(path, wo);
  if (!loaded.ok()) return loaded.status();
  pm.loaded = std::move(loaded.value());
  StatusOr<runtime::SessionMemoryPlan> plan =
      runtime::PlanSession(pm.loaded->model(), pm.options, pm.pool->num_threads());
  if (!plan.ok()) return plan.status();
  return runtime::CheckSessionFits(plan.value(), pm.options);
}

void CheckHidden(const PyModel& m, const std::vector<F32Array>& embeds) {
  for (const F32Array& e : embeds)
    if (e.size() > 0 && e.shape(1) != m.loaded->model().arch().hidden)
      throw py::value_error("image embeddings have width " + std::to_string(e.shape(1)) + ", the model's hidden size is " +
                            std::to_string(m.loaded->model().arch().hidden));
}

// tessera.Model's constructor: options parsed by name, the checkpoint loaded with the GIL released.
std::unique_ptr<PyModel> MakeModel(const std::string& path, const std::string& dtype, int64_t max_batch,
                                   int64_t max_context, int64_t max_chunk, const std::string& kv_dtype, int threads,
                                   const std::string& mode, const std::string& attention_precision,
                                   const std::string& matmul_precision, bool repack) {
  auto pm = std::make_unique<PyModel>();
  model::WeightLoadOptions wo;
  if (dtype != "auto") {
    DType d;
    if (!ParseDType(dtype, &d)) throw py::value_error("unknown dtype '" + dtype + "'");
    wo.convert_to = d;
  }
  runtime::SessionOptions& o = pm->options;
  o.max_batch = max_batch;
  o.max_context = max_context;
  o.max_chunk = max_chunk;
  if (!ParseDType(kv_dtype, &o.kv_dtype)) throw py::value_error("unknown kv_dtype '" + kv_dtype + "'");
  if (!ParseAttentionPrecision(attention_precision, &o.attention_precision))
    throw py::value_error("unknown attention_precision '" + attention_precision + "' (f32, bf16)");
  if (!ops::ParseMatmulPrecision(matmul_precision, &o.matmul_precision))
    throw py::value_error("unknown matmul_precision '" + matmul_precision + "' (f32, bf16)");
  if (!runtime::ParseMode(mode, &o.mode))
    throw py::value_error("unknown mode '" + mode + "' (unified, bias, split)");
  if (repack) wo.pack_panels_for = o.matmul_precision;
  pm->threads = threads;
  Status st;
  {
    // Loading reads files and repacks on the shared pool: other Python threads go on.
    py::gil_scoped_release release;
    st = LoadInto(*pm, path, wo);
  }
  ThrowIfError(st);
  return pm;
}

}  // namespace

void BindModel(py::module_& m) {
  py::class_<PyModel>(m, "_Model")
      .def(py::init(&MakeModel))
      .def_property_readonly("vocab_size", [](const PyModel& m) { return m.loaded->model().arch().vocab; })
      .def_property_readonly("hidden_size", [](const PyModel& m) { return m.loaded->model().arch().hidden; })
      .def_property_readonly("repacked", [](const PyModel& m) { return m.loaded->model().weights().repacked(); })
      .def_property_readonly("model_type", [](const PyModel& m) { return m.loaded->model().arch().model_type; })
      .def_property_readonly("num_layers", [](const PyModel& m) { return m.loaded->model().arch().num_layers(); })
      .def_property_readonly("eos_token_ids", [](const PyModel& m) { return m.loaded->config().eos_token_ids; })
      .def_property_readonly("_soft_token_ids", [](const PyModel& m) { return m.loaded->model().arch().image_token_ids; })
      .def("_forward",
           [](const PyModel& m, const std::vector<std::vector<int32_t>>& tokens,
              const std::vector<std::vector<int32_t>>& types, const std::vector<F32Array>& embeds) {
             CheckHidden(m, embeds);
             const std::vector<runtime::Prompt> prompts = Prompts(tokens, types, embeds);
             runtime::SessionOptions o = m.options;
             o.all_logits = true;
             o.max_batch = std::max<int64_t>(o.max_batch, static_cast<int64_t>(prompts.size()));
             size_t s_max = 0;
             for (const auto& t : tokens) s_max = std::max(s_max, t.size());
             const int64_t V = m.loaded->model().arch().vocab;
             py::array_t<float> logits({static_cast<int64_t>(prompts.size()), static_cast<int64_t>(s_max), V});
             std::fill(logits.mutable_data(), logits.mutable_data() + logits.size(), 0.0f);
             Status st;
             {
               py::gil_scoped_release release;
               std::lock_guard<std::mutex> lock(Runtime().mu);
               auto s = NewSession(m, o);
               st = s.ok() ? s.value()->Prefill(prompts, nullptr, logits.mutable_data()) : s.status();
             }
             ThrowIfError(st);
             return logits;
           })
      .def("_hidden_states",
           [](const PyModel& m, const std::vector<int32_t>& tokens, const std::vector<int32_t>& types,
              const F32Array& embeds) {
             // Residual stream after every layer for one prompt: [layers, S, hidden].
             std::vector<F32Array> e;
             if (embeds.size() > 0) e.push_back(embeds);
             CheckHidden(m, e);
             std::vector<std::vector<int32_t>> ty;
             if (!types.empty()) ty.push_back(types);
             const std::vector<runtime::Prompt> prompts = Prompts({tokens}, ty, e);
             const model::GemmaArch& a = m.loaded->model().arch();
             const int64_t S = static_cast<int64_t>(tokens.size());
             py::array_t<float> hidden({a.num_layers(), S, a.hidden});
             runtime::SessionOptions o = m.options;
             o.max_batch = 1;
             o.max_chunk = std::max<int64_t>(o.max_chunk, S);
             o.max_context = std::max(o.max_context, o.max_chunk);
             model::ActivationTap tap{hidden.mutable_data()};
             Status st;
             {
               py::gil_scoped_release release;
               std::lock_guard<std::mutex> lock(Runtime().mu);
               auto s = NewSession(m, o);
               std::vector<float> last(a.vocab);
               st = s.ok() ? s.value()->Prefill(prompts, last.data(), nullptr, &tap) : s.status();
             }
             ThrowIfError(st);
             return hidden;
           })
      .def("_generate", [](const PyModel& m, const std::vector<std::vector<int32_t>>& tokens,
                           const std::vector<std::vector<int32_t>>& types, const std::vector<F32Array>& embeds,
                           int64_t max_new, float temperature, int64_t top_k, float top_p, uint64_t seed,
                           const std::vector<int32_t>& stop) {
        CheckHidden(m, embeds);
        const std::vector<runtime::Prompt> prompts = Prompts(tokens, types, embeds);
        runtime::SessionOptions o = m.options;
        o.max_batch = std::max<int64_t>(o.max_batch, static_cast<int64_t>(prompts.size()));
        std::vector<std::vector<int32_t>> out;
        Status st;
        {
          py::gil_scoped_release release;
          std::lock_guard<std::mutex> lock(Runtime().mu);
          auto s = NewSession(m, o);
          st = s.ok() ? s.value()->Generate(prompts, max_new, {temperature, top_k, top_p, seed}, stop, &out)
                      : s.status();
        }
        ThrowIfError(st);
        return out;
      });
}

}  // namespace tessera::py_bind
