// Shared helpers for the pybind11 bindings.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"
#include "tessera/status.h"
#include "tessera/thread_pool.h"

namespace tessera::py_bind {

namespace py = pybind11;

void BindAttention(py::module_& m);
void BindOnnx(py::module_ m);
void BindKv(py::module_ m);
void BindModel(py::module_& m);
void BindImage(py::module_& m);
void BindTokenizer(py::module_& m);
void BindGguf(py::module_& m);
void BindQuant(py::module_& m);
void BindQuantize(py::module_& m);
void BindChat(py::module_& m);

// Raises the Python exception for a Status: MemoryError when memory or threads ran out (or a plan
// would not fit), ValueError otherwise. Call with the GIL held.
inline void ThrowIfError(const Status& s) {
  if (s.ok()) return;
  if (s.code() == StatusCode::kResourceExhausted) {
    PyErr_SetString(PyExc_MemoryError, s.message().c_str());
    throw py::error_already_set();
  }
  throw py::value_error(s.message());
}

// Execution resources of the Python front end: one pool per thread count, one scratch arena.
// The C++ API takes these explicitly; Python callers get them implicitly. Any Python thread may
// call in at any time: pools serialize their jobs themselves (tessera/thread_pool.h), `pools_mu`
// guards the map, and calls that use `scratch` hold `mu` (the GIL is released while kernels run;
// nothing holding `mu` or `pools_mu` ever waits for the GIL).
struct PyRuntime {
  std::map<int, std::unique_ptr<ThreadPool>> pools;
  std::mutex pools_mu;
  Arena scratch;
  std::mutex mu;
  // The shared pool of `threads` threads (<= 0: the hardware's), or the error of starting it.
  StatusOr<ThreadPool*> TryPool(int threads) {
    if (threads <= 0) threads = DefaultThreadCount();
    std::lock_guard<std::mutex> lock(pools_mu);
    auto& slot = pools[threads];
    if (!slot) {
      StatusOr<std::unique_ptr<ThreadPool>> p = ThreadPool::Create(threads);
      if (!p.ok()) {
        pools.erase(threads);
        return p.status();
      }
      slot = std::move(p.value());
    }
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
