// Python bindings of the image layer (filled in by its owner).
#include "bindings.h"

namespace tessera::py_bind {
void BindImage(py::module_& m) {}
}  // namespace tessera::py_bind
