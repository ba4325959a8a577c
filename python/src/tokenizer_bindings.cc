// tessera._Tokenizer: a checkpoint's tokenizer.model for Model.generate(prompt=...).
#include <pybind11/stl.h>

#include "bindings.h"
#include "tessera/tokenizer.h"

namespace tessera::py_bind {

void BindTokenizer(py::module_& m) {
  using Tok = tokenizer::SentencePieceTokenizer;
  py::class_<Tok>(m, "_Tokenizer")
      .def(py::init([](const std::string& path) {
        StatusOr<std::unique_ptr<Tok>> t = Tok::Load(path);
        ThrowIfError(t.status());
        return std::move(t.value());
      }))
      .def("encode", [](const Tok& t, const std::string& text, bool add_bos) {
        StatusOr<std::vector<int32_t>> ids = t.Encode(text, add_bos);
        ThrowIfError(ids.status());
        return ids.value();
      })
      .def("decode", [](const Tok& t, const std::vector<int32_t>& ids) {
        StatusOr<std::string> s = t.Decode(ids);
        ThrowIfError(s.status());
        return s.value();
      });
}

}  // namespace tessera::py_bind
