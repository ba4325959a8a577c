// tessera._Tokenizer: a checkpoint's tokenizer.model for Model.generate(prompt=...), a checkpoint
// directory's tokenizer (from_checkpoint_dir: tokenizer.model, else tokenizer.json), or a
// vocabulary given as data (a GGUF's tokenizer metadata) through from_vocab.
#include <pybind11/stl.h>

#include "bindings.h"
#include "tessera/tokenizer.h"

namespace tessera::py_bind {
namespace {

using tokenizer::Tokenizer;
using tokenizer::TokenizerVocab;

std::unique_ptr<Tokenizer> FromVocab(const std::string& model, std::vector<std::string> tokens,
                                     std::vector<float> scores, std::vector<int32_t> token_types,
                                     std::vector<std::string> merges, int32_t bos_id, int32_t eos_id,
                                     int32_t unk_id, int32_t pad_id, bool add_bos, bool add_eos,
                                     bool add_space_prefix, const std::string& name) {
  TokenizerVocab v;
  v.model = model;
  v.tokens = std::move(tokens);
  v.scores = std::move(scores);
  v.token_types = std::move(token_types);
  v.merges = std::move(merges);
  v.bos_id = bos_id, v.eos_id = eos_id, v.unk_id = unk_id, v.pad_id = pad_id;
  v.add_bos = add_bos, v.add_eos = add_eos, v.add_space_prefix = add_space_prefix;
  StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromVocab(v, name);
  ThrowIfError(t.status());
  return std::move(t.value());
}

}  // namespace

void BindTokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "_Tokenizer")
      .def(py::init([](const std::string& path) -> std::unique_ptr<Tokenizer> {
        StatusOr<std::unique_ptr<tokenizer::SentencePieceTokenizer>> t = tokenizer::SentencePieceTokenizer::Load(path);
        ThrowIfError(t.status());
        return std::move(t.value());
      }))
      .def_static("from_vocab", &FromVocab, py::arg("model"), py::arg("tokens"), py::arg("scores") = std::vector<float>{},
                  py::arg("token_types") = std::vector<int32_t>{}, py::arg("merges") = std::vector<std::string>{},
                  py::arg("bos_id") = -1, py::arg("eos_id") = -1, py::arg("unk_id") = -1, py::arg("pad_id") = -1,
                  py::arg("add_bos") = true, py::arg("add_eos") = false, py::arg("add_space_prefix") = false,
                  py::arg("name") = "vocab")
      .def_static("from_checkpoint_dir", [](const std::string& dir) {
        StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::FromCheckpointDir(dir);
        ThrowIfError(t.status());
        return std::move(t.value());
      })
      .def("encode", [](const Tokenizer& t, const std::string& text, bool add_bos) {
        StatusOr<std::vector<int32_t>> ids = t.Encode(text, add_bos);
        ThrowIfError(ids.status());
        return ids.value();
      })
      // Control and added tokens written in the text become their ids (rendered chat templates).
      .def("encode_with_special_tokens", [](const Tokenizer& t, const std::string& text) {
        StatusOr<std::vector<int32_t>> ids = t.EncodeWithSpecialTokens(text);
        ThrowIfError(ids.status());
        return ids.value();
      })
      .def("decode", [](const Tokenizer& t, const std::vector<int32_t>& ids) {
        StatusOr<std::string> s = t.Decode(ids);
        ThrowIfError(s.status());
        // Ids may end inside a UTF-8 sequence: replaced, as transformers' decode does.
        PyObject* str = PyUnicode_DecodeUTF8(s.value().data(), static_cast<Py_ssize_t>(s.value().size()), "replace");
        if (str == nullptr) throw py::error_already_set();
        return py::reinterpret_steal<py::str>(str);
      })
      .def("piece", [](const Tokenizer& t, int32_t id) { return py::bytes(t.Piece(id)); })  // may be one byte
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_id", &Tokenizer::eos_id);
}

}  // namespace tessera::py_bind
