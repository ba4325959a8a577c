// Python bindings of the vision layer (filled in by its owner).
#include "bindings.h"

namespace tessera::py_bind {
void BindVision(py::module_& m) {}
}  // namespace tessera::py_bind
