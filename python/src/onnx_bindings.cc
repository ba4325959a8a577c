// ONNX-operator adapters (tessera.onnx): numpy arrays in, ONNX-shaped numpy arrays out.
// python/tessera/onnx.py converts dtypes and contiguity, refuses what the adapters lack by name
// and holds the docstrings; these functions map arrays onto TensorRefs, read the attributes from
// a dict, allocate the outputs and release the GIL while running.
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <string>
#include <utility>
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

// The adapters' index arena (positions, valid counts, rotated rows), shared by every call. Calls
// run with the GIL released and hold Runtime().mu, which also guards the shared pool and kernel
// scratch.
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

// A KV cache: float32, or 16-bit words (a uint16 view) holding `type`'s bits.
ElemType CacheTypeOf(const std::string& type) {
  if (type == "float32") return ElemType::kFloat32;
  if (type == "bfloat16") return ElemType::kBFloat16;
  if (type == "float16") return ElemType::kFloat16;
  throw py::value_error("GroupQueryAttention: cache dtype " + type + " is not float32, bfloat16 or float16");
}

std::optional<TensorRef> CacheRefOf(const char* name, const OptArray& a, ElemType type) {
  if (!a) return std::nullopt;
  const bool f32 = type == ElemType::kFloat32;
  if (f32 ? !a->dtype().is(py::dtype::of<float>()) : a->itemsize() != 2)
    throw py::value_error(std::string(name) + " does not hold " + onnx::ElemTypeName(type) + " elements");
  if (!(a->flags() & py::array::c_style)) throw py::value_error(std::string(name) + " must be C-contiguous");
  return TensorRef{a->data(), type, std::vector<int64_t>(a->shape(), a->shape() + a->ndim())};
}

py::array_t<float> Alloc(const std::vector<int64_t>& shape) { return py::array_t<float>(shape); }

MutableTensorRef OutRef(py::array& a, ElemType type = ElemType::kFloat32) {
  return {a.mutable_data(), std::vector<int64_t>(a.shape(), a.shape() + a.ndim()), type};
}

template <typename T>
const T& ValueOrThrow(const StatusOr<T>& s) {
  ThrowIfError(s.status());
  return s.value();
}

template <typename T>
T Attr(const py::dict& attrs, const char* key) {
  return attrs[key].cast<T>();
}

template <typename T>
std::optional<T> OptAttr(const py::dict& attrs, const char* key) {
  if (!attrs.contains(key) || attrs[key].is_none()) return std::nullopt;
  return attrs[key].cast<T>();
}

// Runs `op(ctx)` without the GIL on the shared pool and arenas.
template <typename Op>
void RunLocked(int threads, AttentionKernel kernel, Op op) {
  Status st;
  {
    py::gil_scoped_release release;
    OnnxRuntime& state = OnnxState();
    std::lock_guard<std::mutex> lock(Runtime().mu);
    StatusOr<ThreadPool*> pool = Runtime().TryPool(threads);
    onnx::OpContext ctx{{pool.ok() ? pool.value() : nullptr, &Runtime().scratch}, &state.index_scratch, kernel};
    st = pool.ok() ? op(ctx) : pool.status();
  }
  ThrowIfError(st);
}

onnx::AttentionAttrs AttentionAttrsOf(const py::dict& a) {
  onnx::AttentionAttrs attrs;
  attrs.opset = Attr<int>(a, "opset");
  attrs.is_causal = Attr<int64_t>(a, "is_causal");
  attrs.q_num_heads = OptAttr<int64_t>(a, "q_num_heads");
  attrs.kv_num_heads = OptAttr<int64_t>(a, "kv_num_heads");
  attrs.scale = OptAttr<float>(a, "scale");
  attrs.softcap = Attr<float>(a, "softcap");
  attrs.qk_matmul_output_mode = OptAttr<int64_t>(a, "qk_matmul_output_mode").value_or(0);
  attrs.softmax_precision = OptAttr<int64_t>(a, "softmax_precision");
  attrs.left_window_size = Attr<int64_t>(a, "left_window_size");
  attrs.right_window_size = Attr<int64_t>(a, "right_window_size");
  return attrs;
}

// Returns (Y, present_key, present_value), plus qk_matmul_output when attrs hold a mode.
py::tuple RunAttention(const py::array& q, const py::array& k, const py::array& v, const OptArray& attn_mask,
                       const OptArray& past_key, const OptArray& past_value, const OptArray& nonpad_kv_seqlen,
                       const py::dict& a, const std::string& kernel, int threads) {
  const AttentionKernel kern = KernelFromName(kernel);
  onnx::AttentionInputs in;
  in.q = RefOf("Q", q);
  in.k = RefOf("K", k);
  in.v = RefOf("V", v);
  in.attn_mask = OptRefOf("attn_mask", attn_mask);
  in.past_key = OptRefOf("past_key", past_key);
  in.past_value = OptRefOf("past_value", past_value);
  in.nonpad_kv_seqlen = OptRefOf("nonpad_kv_seqlen", nonpad_kv_seqlen);
  const onnx::AttentionAttrs attrs = AttentionAttrsOf(a);
  const bool want_qk = OptAttr<int64_t>(a, "qk_matmul_output_mode").has_value();
  const onnx::AttentionShapes shapes = ValueOrThrow(onnx::InferAttentionShapes(in, attrs));
  py::array y = Alloc(shapes.y), present_key = Alloc(shapes.present_key),
            present_value = Alloc(shapes.present_value), qk = Alloc(want_qk ? shapes.qk_matmul_output : std::vector<int64_t>{0});
  onnx::AttentionOutputs out;
  out.y = OutRef(y);
  out.present_key = OutRef(present_key);
  out.present_value = OutRef(present_value);
  if (want_qk) out.qk_matmul_output = OutRef(qk);
  RunLocked(threads, kern, [&](onnx::OpContext& ctx) { return onnx::Attention(in, attrs, out, ctx); });
  if (want_qk) return py::make_tuple(y, present_key, present_value, qk);
  return py::make_tuple(y, present_key, present_value);
}

onnx::GroupQueryAttentionAttrs GqaAttrsOf(const py::dict& a) {
  using A = onnx::GroupQueryAttentionAttrs;
  A attrs;
  const std::pair<const char*, int64_t A::*> ints[] = {
      {"num_heads", &A::num_heads}, {"kv_num_heads", &A::kv_num_heads},
      {"local_window_size", &A::local_window_size}, {"causal", &A::causal}, {"do_rotary", &A::do_rotary},
      {"rotary_interleaved", &A::rotary_interleaved}, {"smooth_softmax", &A::smooth_softmax},
      {"qk_output", &A::qk_output}};
  for (const auto& [key, field] : ints) attrs.*field = Attr<int64_t>(a, key);
  attrs.softcap = Attr<float>(a, "softcap");
  attrs.scale = Attr<float>(a, "scale");
  return attrs;
}

// Separate present buffers: float32, or uint16 words for 16-bit caches (Python views them back).
py::array AllocCache(const std::vector<int64_t>& shape, ElemType type) {
  if (type == ElemType::kFloat32) return Alloc(shape);
  return py::array_t<uint16_t>(shape);
}

// inputs: query, key, value, past_key, past_value, seqlens_k, total_sequence_length, cos_cache,
// sin_cache, position_ids, attention_bias, head_sink (None where absent). Returns (output,
// present_key, present_value), plus output_qk when qk_output is 1 or 2.
py::tuple RunGroupQueryAttention(const std::vector<OptArray>& t, const std::string& cache_type, const py::dict& a,
                                 bool in_place, const std::string& kernel, int threads) {
  const AttentionKernel kern = KernelFromName(kernel);
  if (t.size() != 12) throw py::value_error("GroupQueryAttention: 12 inputs expected");
  const ElemType ct = CacheTypeOf(cache_type);
  onnx::GroupQueryAttentionInputs in;
  in.query = RefOf("query", *t[0]);
  in.key = OptRefOf("key", t[1]);
  in.value = OptRefOf("value", t[2]);
  in.past_key = CacheRefOf("past_key", t[3], ct);
  in.past_value = CacheRefOf("past_value", t[4], ct);
  in.seqlens_k = RefOf("seqlens_k", *t[5]);
  in.total_sequence_length = RefOf("total_sequence_length", *t[6]);
  in.cos_cache = OptRefOf("cos_cache", t[7]);
  in.sin_cache = OptRefOf("sin_cache", t[8]);
  in.position_ids = OptRefOf("position_ids", t[9]);
  in.attention_bias = OptRefOf("attention_bias", t[10]);
  in.head_sink = OptRefOf("head_sink", t[11]);
  const onnx::GroupQueryAttentionAttrs attrs = GqaAttrsOf(a);
  if (in_place && !in.past_key) throw py::value_error("GroupQueryAttention: inplace=True needs past_key and past_value");
  const onnx::GroupQueryAttentionShapes shapes =
      ValueOrThrow(onnx::InferGroupQueryAttentionShapes(in, attrs, in_place));
  py::array output = Alloc(shapes.output), qk = Alloc(attrs.qk_output ? shapes.output_qk : std::vector<int64_t>{0});
  py::array present_key, present_value;
  onnx::GroupQueryAttentionOutputs out;
  out.output = OutRef(output);
  if (attrs.qk_output) out.output_qk = OutRef(qk);
  if (in_place) {
    for (const OptArray* c : {&t[3], &t[4]})
      if (!(*c)->writeable())
        throw py::value_error("GroupQueryAttention: inplace=True needs writable past_key and past_value");
    present_key = *t[3];
    present_value = *t[4];
  } else {
    present_key = AllocCache(shapes.present_key, ct);
    present_value = AllocCache(shapes.present_value, ct);
  }
  out.present_key = OutRef(present_key, ct);
  out.present_value = OutRef(present_value, ct);
  RunLocked(threads, kern, [&](onnx::OpContext& ctx) { return onnx::GroupQueryAttention(in, attrs, out, ctx); });
  if (attrs.qk_output) return py::make_tuple(output, present_key, present_value, qk);
  return py::make_tuple(output, present_key, present_value);
}

}  // namespace

void BindOnnx(py::module_ m) {
  m.def("attention", &RunAttention, py::arg("Q"), py::arg("K"), py::arg("V"), py::arg("attn_mask"),
        py::arg("past_key"), py::arg("past_value"), py::arg("nonpad_kv_seqlen"), py::arg("attrs"), py::arg("kernel"),
        py::arg("num_threads"));
  m.def("group_query_attention", &RunGroupQueryAttention, py::arg("inputs"), py::arg("cache_type"), py::arg("attrs"),
        py::arg("inplace"), py::arg("kernel"), py::arg("num_threads"));
}

}  // namespace tessera::py_bind
