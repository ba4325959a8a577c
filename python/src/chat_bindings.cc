// tessera._tessera._ChatTemplate: the chat-template renderer (include/tessera/chat_template.h)
// for Python; messages and extra variables cross as JSON text (python/tessera/chat.py).
#include <pybind11/stl.h>

#include "bindings.h"
#include "tessera/chat_template.h"

namespace tessera::py_bind {
namespace {

using chat::ChatTemplate;

// NotFound (a model without a template) is a LookupError, so callers can tell it from a broken one.
ChatTemplate Take(StatusOr<ChatTemplate> t) {
  if (!t.ok() && t.status().code() == StatusCode::kNotFound) {
    PyErr_SetString(PyExc_LookupError, t.status().message().c_str());
    throw py::error_already_set();
  }
  ThrowIfError(t.status());
  return std::move(t).value();
}

}  // namespace

void BindChat(py::module_& m) {
  py::class_<ChatTemplate>(m, "_ChatTemplate")
      .def_static("from_source",
                  [](const std::string& source, const std::string& name) { return Take(ChatTemplate::FromSource(source, name)); })
      .def_static("from_model_path", [](const std::string& path) { return Take(ChatTemplate::FromModelPath(path)); })
      .def_static("builtin", [](const std::string& model_type) { return Take(ChatTemplate::Builtin(model_type)); })
      .def("render",
           [](const ChatTemplate& t, const std::string& messages_json, bool add_generation_prompt,
              const std::string& bos_token, const std::string& eos_token, const std::string& extra_json) {
             chat::RenderOptions o;
             o.add_generation_prompt = add_generation_prompt;
             o.bos_token = bos_token;
             o.eos_token = eos_token;
             o.extra_context_json = extra_json;
             StatusOr<std::string> out = [&] {
               py::gil_scoped_release release;
               return t.Render(messages_json, o);
             }();
             ThrowIfError(out.status());
             return py::bytes(out.value());
           })
      .def_property_readonly("name", &ChatTemplate::name)
      .def_property_readonly("source", &ChatTemplate::source);
}

}  // namespace tessera::py_bind
