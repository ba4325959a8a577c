// tessera.quantize: a Hugging Face Gemma checkpoint to a GGUF (tessera/quantize.h).
#include <pybind11/stl.h>

#include "bindings.h"
#include "tessera/quantize.h"
#include "tessera/thread_pool.h"

namespace tessera::py_bind {

void BindQuantize(py::module_& m) {
  m.def(
      "quantize_checkpoint",
      [](const std::string& model_dir, const std::string& type, const std::string& out) {
        QuantizeFileType t;
        if (!ParseQuantizeFileType(type, &t))
          throw py::value_error("unknown quantization type '" + type + "' (q8_0, q4_0, q4_k_m, q5_k_m)");
        StatusOr<QuantizeReport> r = [&] {
          py::gil_scoped_release release;
          StatusOr<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(DefaultThreadCount());
          if (!pool.ok()) return StatusOr<QuantizeReport>(pool.status());
          return QuantizeCheckpoint(model_dir, t, out, pool.value().get());
        }();
        ThrowIfError(r.status());
        std::vector<std::pair<std::string, std::string>> types;
        for (size_t i = 0; i < r.value().tensors.size(); ++i)
          types.emplace_back(r.value().tensors[i].name, r.value().types[i].Name());
        return types;
      },
      py::arg("model_dir"), py::arg("type"), py::arg("out"));
}

}  // namespace tessera::py_bind
