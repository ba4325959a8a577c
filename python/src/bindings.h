// Shared helpers for the pybind11 bindings.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "core/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/status.h"
#include "tessera/thread_pool.h"

namespace tessera::py_bind {

namespace py = pybind11;

void BindAttention(py::module_& m);
void BindOnnx(py::module_ m);
void BindKv(py::module_ m);
void BindModel(py::module_& m);

// Raises ValueError with the Status message.
inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw py::value_error(s.message());
}

// Execution resources of the Python front end: one pool per thread count, one scratch arena.
// The C++ API takes these explicitly; Python callers get them implicitly.
// Calls that use `scratch` hold `mu` (the GIL is released while kernels run).
struct PyRuntime {
  std::map<int, std::unique_ptr<ThreadPool>> pools;
  Arena scratch;
  std::mutex mu;
  ThreadPool* Pool(int threads) {
    if (threads <= 0) threads = DefaultThreadCount();
    auto& slot = pools[threads];
    if (!slot) slot = std::make_unique<ThreadPool>(threads);
    return slot.get();
  }
};
PyRuntime& Runtime();

// The kernel named by a Python `kernel=` argument; ValueError for an unknown name.
inline AttentionKernel KernelFromName(const std::string& name) {
  AttentionKernel k;
  if (!ParseAttentionKernel(name, &k))
    throw py::value_error("unknown kernel '" + name + "' (auto, reference, prefill, decode)");
  return k;
}

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

}  // namespace tessera::py_bind
