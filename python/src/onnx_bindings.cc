// ONNX-operator adapters (tessera.onnx). Filled in by the ONNX adapter work.
#include "bindings.h"

namespace tessera::py_bind {

void BindOnnx(py::module_ m) {}

}  // namespace tessera::py_bind
