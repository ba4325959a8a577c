// ONNX-operator adapters (tessera.onnx): numpy arrays in, ONNX-shaped numpy arrays out.
// python/tessera/onnx.py converts dtypes and contiguity and holds the docstrings; these
// functions map arrays onto TensorRefs, allocate the outputs and release the GIL while running.
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "tessera/onnx/attention.h"
#include "tessera/onnx/group_query_attention.h"

namespace tessera::py_bind {
namespace {

using onnx::ElemType;
using onnx::MutableTensorRef;
using onnx::TensorRef;
using OptArray = std::optional<py::array>;

// The adapters' index arena (positions, valid counts), shared by every call. Calls run with the
// GIL released and hold Runtime().mu, which also guards the shared pool and kernel scratch.
struct OnnxRuntime {
  Arena index_scratch;
};
OnnxRuntime& OnnxState() {
  static OnnxRuntime* state = new OnnxRuntime();  // lives for the interpreter; never destroyed
  return *state;
}

TensorRef RefOf(const char* name, const py::array& a) {
  TensorRef t;
  if (a.dtype().is(py::dtype::of<float>())) {
    t.type = ElemType::kFloat32;
  } else if (a.dtype().is(py::dtype::of<bool>())) {
    t.type = ElemType::kBool;
  } else if (a.dtype().is(py::dtype::of<int32_t>())) {
    t.type = ElemType::kInt32;
  } else if (a.dtype().is(py::dtype::of<int64_t>())) {
    t.type = ElemType::kInt64;
  } else {
    throw py::value_error(std::string(name) + " has unsupported dtype " + std::string(py::str(a.dtype())));
  }
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + " must be C-contiguous");
  t.data = a.data();
  t.shape.assign(a.shape(), a.shape() + a.ndim());
  return t;
}

std::optional<TensorRef> OptRefOf(const char* name, const OptArray& a) {
  if (!a) return std::nullopt;
  return RefOf(name, *a);
}

py::array_t<float> Alloc(const std::vector<int64_t>& shape) { return py::array_t<float>(shape); }

MutableTensorRef OutRef(py::array_t<float>& a) {
  return {a.mutable_data(), std::vector<int64_t>(a.shape(), a.shape() + a.ndim())};
}

template <typename T>
const T& ValueOrThrow(const StatusOr<T>& s) {
  ThrowIfError(s.status());
  return s.value();
}

py::tuple RunAttention(const py::array& q, const py::array& k, const py::array& v, const OptArray& attn_mask,
                       const OptArray& past_key, const OptArray& past_value, const OptArray& nonpad_kv_seqlen,
                       int64_t is_causal, std::optional<int64_t> q_num_heads, std::optional<int64_t> kv_num_heads,
                       std::optional<float> scale, float softcap, int opset, const std::string& kernel,
                       int threads) {
  const AttentionKernel kern = KernelFromName(kernel);
  onnx::AttentionInputs in;
  in.q = RefOf("Q", q);
  in.k = RefOf("K", k);
  in.v = RefOf("V", v);
  in.attn_mask = OptRefOf("attn_mask", attn_mask);
  in.past_key = OptRefOf("past_key", past_key);
  in.past_value = OptRefOf("past_value", past_value);
  in.nonpad_kv_seqlen = OptRefOf("nonpad_kv_seqlen", nonpad_kv_seqlen);
  onnx::AttentionAttrs attrs;
  attrs.opset = opset;
  attrs.is_causal = is_causal;
  attrs.q_num_heads = q_num_heads;
  attrs.kv_num_heads = kv_num_heads;
  attrs.scale = scale;
  attrs.softcap = softcap;
  const onnx::AttentionShapes shapes = ValueOrThrow(onnx::InferAttentionShapes(in, attrs));
  py::array_t<float> y = Alloc(shapes.y), present_key = Alloc(shapes.present_key),
                     present_value = Alloc(shapes.present_value);
  onnx::AttentionOutputs out;
  out.y = OutRef(y);
  out.present_key = OutRef(present_key);
  out.present_value = OutRef(present_value);
  Status st;
  {
    py::gil_scoped_release release;
    OnnxRuntime& state = OnnxState();
    std::lock_guard<std::mutex> lock(Runtime().mu);
    StatusOr<ThreadPool*> pool = Runtime().TryPool(threads);
    onnx::OpContext ctx{{pool.ok() ? pool.value() : nullptr, &Runtime().scratch}, &state.index_scratch, kern};
    st = pool.ok() ? onnx::Attention(in, attrs, out, ctx) : pool.status();
  }
  ThrowIfError(st);
  return py::make_tuple(y, present_key, present_value);
}

py::tuple RunGroupQueryAttention(const py::array& query, const OptArray& key, const OptArray& value,
                                 const OptArray& past_key, const OptArray& past_value, const py::array& seqlens_k,
                                 const py::array& total_sequence_length, const OptArray& attention_bias,
                                 int64_t num_heads, int64_t kv_num_heads, int64_t local_window_size, float softcap,
                                 float scale, bool in_place, const std::string& kernel, int threads) {
  const AttentionKernel kern = KernelFromName(kernel);
  onnx::GroupQueryAttentionInputs in;
  in.query = RefOf("query", query);
  in.key = OptRefOf("key", key);
  in.value = OptRefOf("value", value);
  in.past_key = OptRefOf("past_key", past_key);
  in.past_value = OptRefOf("past_value", past_value);
  in.seqlens_k = RefOf("seqlens_k", seqlens_k);
  in.total_sequence_length = RefOf("total_sequence_length", total_sequence_length);
  in.attention_bias = OptRefOf("attention_bias", attention_bias);
  onnx::GroupQueryAttentionAttrs attrs;
  attrs.num_heads = num_heads;
  attrs.kv_num_heads = kv_num_heads;
  attrs.local_window_size = local_window_size;
  attrs.softcap = softcap;
  attrs.scale = scale;
  if (in_place && !past_key) throw py::value_error("GroupQueryAttention: inplace=True needs past_key and past_value");
  const onnx::GroupQueryAttentionShapes shapes =
      ValueOrThrow(onnx::InferGroupQueryAttentionShapes(in, attrs, in_place));
  py::array_t<float> output = Alloc(shapes.output);
  py::array present_key, present_value;
  onnx::GroupQueryAttentionOutputs out;
  out.output = OutRef(output);
  if (in_place) {
    for (const py::array* a : {&*past_key, &*past_value})
      if (!a->writeable())
        throw py::value_error("GroupQueryAttention: inplace=True needs writable past_key and past_value");
    present_key = *past_key;
    present_value = *past_value;
    out.present_key = {static_cast<float*>(present_key.mutable_data()), shapes.present_key};
    out.present_value = {static_cast<float*>(present_value.mutable_data()), shapes.present_value};
  } else {
    py::array_t<float> pk = Alloc(shapes.present_key), pv = Alloc(shapes.present_value);
    out.present_key = OutRef(pk);
    out.present_value = OutRef(pv);
    present_key = pk;
    present_value = pv;
  }
  Status st;
  {
    py::gil_scoped_release release;
    OnnxRuntime& state = OnnxState();
    std::lock_guard<std::mutex> lock(Runtime().mu);
    StatusOr<ThreadPool*> pool = Runtime().TryPool(threads);
    onnx::OpContext ctx{{pool.ok() ? pool.value() : nullptr, &Runtime().scratch}, &state.index_scratch, kern};
    st = pool.ok() ? onnx::GroupQueryAttention(in, attrs, out, ctx) : pool.status();
  }
  ThrowIfError(st);
  return py::make_tuple(output, present_key, present_value);
}

}  // namespace

void BindOnnx(py::module_ m) {
  m.def("attention", &RunAttention, py::arg("Q"), py::arg("K"), py::arg("V"), py::arg("attn_mask"),
        py::arg("past_key"), py::arg("past_value"), py::arg("nonpad_kv_seqlen"), py::arg("is_causal"),
        py::arg("q_num_heads"), py::arg("kv_num_heads"), py::arg("scale"), py::arg("softcap"), py::arg("opset"),
        py::arg("kernel"), py::arg("num_threads"));
  m.def("group_query_attention", &RunGroupQueryAttention, py::arg("query"), py::arg("key"), py::arg("value"),
        py::arg("past_key"), py::arg("past_value"), py::arg("seqlens_k"), py::arg("total_sequence_length"),
        py::arg("attention_bias"), py::arg("num_heads"), py::arg("kv_num_heads"), py::arg("local_window_size"),
        py::arg("softcap"), py::arg("scale"), py::arg("inplace"), py::arg("kernel"), py::arg("num_threads"));
}

}  // namespace tessera::py_bind
