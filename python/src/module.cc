// The `tessera._tessera` extension module: thin wrappers, argument defaults live in Python.
#include <pybind11/pybind11.h>

#include "bindings.h"

PYBIND11_MODULE(_tessera, m) {
  m.doc() = "Tessera: structured-mask attention for hybrid-attention multimodal decoders";
  tessera::py_bind::BindAttention(m);
  tessera::py_bind::BindModel(m);
  tessera::py_bind::BindImage(m);
  tessera::py_bind::BindTokenizer(m);
  tessera::py_bind::BindGguf(m);
  tessera::py_bind::BindQuant(m);
  tessera::py_bind::BindQuantize(m);
  tessera::py_bind::BindChat(m);
  tessera::py_bind::BindOnnx(m.def_submodule("onnx", "ONNX-operator semantics on Tessera kernels"));
  tessera::py_bind::BindKv(m.def_submodule("kv", "KV cache stores and ONNX TensorScatter"));
}
