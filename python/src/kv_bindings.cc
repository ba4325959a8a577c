// KV cache stores (tessera.kv) and ONNX TensorScatter (tessera.onnx.tensor_scatter).
// python/tessera/kv.py and python/tessera/onnx.py convert dtypes, broadcast and hold the
// docstrings; these functions check what the C++ API would otherwise TESSERA_CHECK (abort), map
// arrays onto KvAppend / HeadsView and hold Runtime().mu around every store access, releasing the
// GIL while data is copied or kernels run (the same discipline as attention_bindings.cc: nothing
// holding `mu` ever waits for the GIL, so taking `mu` with the GIL held cannot deadlock).
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "tessera/attention.h"
#include "tessera/dtype.h"
#include "tessera/kv/concat_store.h"
#include "tessera/kv/dense_store.h"
#include "tessera/kv/external_store.h"
#include "tessera/kv/kv_cache.h"
#include "tessera/kv/ring_store.h"
#include "tessera/kv/tensor_scatter.h"

namespace tessera::py_bind {
namespace {

using I64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using OptI32 = std::optional<I32Array>;

std::string ShapeStr(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

DType DTypeOf(const std::string& name) {
  DType dt;
  if (!ParseDType(name, &dt)) throw py::value_error("unknown dtype '" + name + "' (f32, bf16, f16)");
  return dt;
}

// ---------------------------------------------------------------------------------------------
// TensorScatter: present = copy of past_cache, then kv::TensorScatter in place.

py::array RunTensorScatter(const py::array& past, const py::array& update, const std::optional<I64Array>& write_indices,
                           int64_t axis, const std::string& mode) {
  kv::ScatterMode m;
  if (mode == "linear") {
    m = kv::ScatterMode::kLinear;
  } else if (mode == "circular") {
    m = kv::ScatterMode::kCircular;
  } else {
    throw py::value_error("TensorScatter: mode '" + mode + "' is neither 'linear' nor 'circular'");
  }
  if (past.dtype().kind() == 'O' || update.dtype().kind() == 'O')
    throw py::value_error("TensorScatter: object arrays are not supported");
  if (past.itemsize() != update.itemsize())
    throw py::value_error("TensorScatter: past_cache and update element sizes differ (" +
                          std::to_string(past.itemsize()) + " vs " + std::to_string(update.itemsize()) + " bytes)");
  if (!(past.flags() & py::array::c_style) || !(update.flags() & py::array::c_style))
    throw py::value_error("TensorScatter: past_cache and update must be C-contiguous");
  if (write_indices && past.ndim() >= 1 &&
      (write_indices->ndim() != 1 || write_indices->shape(0) != past.shape(0)))
    throw py::value_error("TensorScatter: write_indices must have shape (" + std::to_string(past.shape(0)) +
                          ",) (the batch), got " + ShapeStr(*write_indices));
  const std::vector<int64_t> cs(past.shape(), past.shape() + past.ndim());
  const std::vector<int64_t> us(update.shape(), update.shape() + update.ndim());
  py::array present(past.dtype(), cs);
  const size_t es = static_cast<size_t>(past.itemsize());
  Status st;
  {
    py::gil_scoped_release release;
    if (past.nbytes() > 0) std::memcpy(present.mutable_data(), past.data(), static_cast<size_t>(past.nbytes()));
    st = kv::TensorScatter(present.mutable_data(), cs, update.data(), us,
                           write_indices ? write_indices->data() : nullptr, axis, m, es);
  }
  ThrowIfError(st);
  return present;
}

// ---------------------------------------------------------------------------------------------
// Stores.

struct PyStore {
  std::unique_ptr<kv::KvStore> store;
  kv::KvGeometry g;
  std::string kind;  // dense, ring, external, concat
  py::object keep;   // the caller's buffers of an external store (kept alive)
};

void CheckGeometry(const kv::KvGeometry& g) {
  if (g.batch < 1 || g.kv_heads < 1 || g.head_dim < 1 || g.v_head_dim < 1)
    throw py::value_error("KV store: batch " + std::to_string(g.batch) + ", kv_heads " + std::to_string(g.kv_heads) +
                          ", head_dim " + std::to_string(g.head_dim) + ", v_head_dim " + std::to_string(g.v_head_dim) +
                          " must all be >= 1");
}

kv::KvGeometry Geometry(int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                        const std::string& dtype) {
  kv::KvGeometry g{batch, kv_heads, head_dim, v_head_dim, DTypeOf(dtype)};
  CheckGeometry(g);
  return g;
}

std::unique_ptr<PyStore> MakeDense(int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                                   int64_t capacity, const std::string& dtype) {
  const kv::KvGeometry g = Geometry(batch, kv_heads, head_dim, v_head_dim, dtype);
  if (capacity < 1) throw py::value_error("DenseStore: capacity " + std::to_string(capacity) + " < 1");
  auto s = std::make_unique<PyStore>();
  s->store = std::make_unique<kv::DenseStore>(g, capacity);
  s->g = g;
  s->kind = "dense";
  return s;
}

std::unique_ptr<PyStore> MakeRing(int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                                  int64_t window, int64_t max_chunk, const std::string& dtype) {
  const kv::KvGeometry g = Geometry(batch, kv_heads, head_dim, v_head_dim, dtype);
  if (window < 1 || max_chunk < 1)
    throw py::value_error("RingStore: window " + std::to_string(window) + " and max_chunk " +
                          std::to_string(max_chunk) + " must be >= 1");
  auto s = std::make_unique<PyStore>();
  s->store = std::make_unique<kv::RingStore>(g, window, max_chunk);
  s->g = g;
  s->kind = "ring";
  return s;
}

std::unique_ptr<PyStore> MakeConcat(int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                                    const std::string& dtype) {
  const kv::KvGeometry g = Geometry(batch, kv_heads, head_dim, v_head_dim, dtype);
  auto s = std::make_unique<PyStore>();
  s->store = std::make_unique<kv::ConcatStore>(g);
  s->g = g;
  s->kind = "concat";
  return s;
}

// Caller-owned K/V [B, Hkv, max_seq, D|Dv] (float32 or float16) and nonpad int64 [B], all
// C-contiguous and writable; mutated in place by append/rewind.
std::unique_ptr<PyStore> MakeExternal(py::array k_cache, py::array v_cache, py::array nonpad) {
  DType dt;
  if (k_cache.dtype().is(py::dtype::of<float>())) {
    dt = DType::kF32;
  } else if (k_cache.dtype().is(py::dtype("float16"))) {
    dt = DType::kF16;
  } else {
    throw py::value_error("ExternalStore: k_cache dtype " + std::string(py::str(k_cache.dtype())) +
                          " is not float32 or float16");
  }
  if (!v_cache.dtype().is(k_cache.dtype()))
    throw py::value_error("ExternalStore: v_cache dtype " + std::string(py::str(v_cache.dtype())) +
                          " differs from k_cache dtype " + std::string(py::str(k_cache.dtype())));
  if (!nonpad.dtype().is(py::dtype::of<int64_t>()))
    throw py::value_error("ExternalStore: nonpad_kv_seqlen must be int64, got " + std::string(py::str(nonpad.dtype())));
  for (auto [name, a] : {std::pair<const char*, py::array*>{"k_cache", &k_cache}, {"v_cache", &v_cache},
                         {"nonpad_kv_seqlen", &nonpad}}) {
    if (!(a->flags() & py::array::c_style))
      throw py::value_error(std::string("ExternalStore: ") + name + " must be C-contiguous");
    if (!a->writeable()) throw py::value_error(std::string("ExternalStore: ") + name + " must be writable");
  }
  if (k_cache.ndim() != 4 || v_cache.ndim() != 4)
    throw py::value_error("ExternalStore: k_cache " + ShapeStr(k_cache) + " and v_cache " + ShapeStr(v_cache) +
                          " must be 4-D [B, Hkv, max_seq, D]");
  const int64_t B = k_cache.shape(0), H = k_cache.shape(1), M = k_cache.shape(2);
  if (v_cache.shape(0) != B || v_cache.shape(1) != H || v_cache.shape(2) != M)
    throw py::value_error("ExternalStore: v_cache " + ShapeStr(v_cache) + " does not match k_cache " +
                          ShapeStr(k_cache) + " in [B, Hkv, max_seq]");
  if (nonpad.ndim() != 1 || nonpad.shape(0) != B)
    throw py::value_error("ExternalStore: nonpad_kv_seqlen must have shape (" + std::to_string(B) + ",), got " +
                          ShapeStr(nonpad));
  const kv::KvGeometry g{B, H, k_cache.shape(3), v_cache.shape(3), dt};
  CheckGeometry(g);
  if (M < 1) throw py::value_error("ExternalStore: max_seq must be >= 1");
  auto* np = static_cast<int64_t*>(nonpad.mutable_data());
  for (int64_t b = 0; b < B; ++b)
    if (np[b] < 0 || np[b] > M)
      throw py::value_error("ExternalStore: nonpad_kv_seqlen[" + std::to_string(b) + "] = " + std::to_string(np[b]) +
                            " is outside [0, " + std::to_string(M) + "]");
  auto s = std::make_unique<PyStore>();
  s->store = std::make_unique<kv::ExternalStore>(g, k_cache.mutable_data(), v_cache.mutable_data(), M, np);
  s->g = g;
  s->kind = "external";
  s->keep = py::make_tuple(k_cache, v_cache, nonpad);
  return s;
}

void CheckRow(const PyStore& s, int64_t b) {
  if (b < 0 || b >= s.g.batch)
    throw py::index_error("row " + std::to_string(b) + " is outside [0, " + std::to_string(s.g.batch) + ")");
}

DType ArrayDType(const char* name, const py::array& a) {
  if (a.dtype().is(py::dtype::of<float>())) return DType::kF32;
  if (a.dtype().is(py::dtype("float16"))) return DType::kF16;
  throw py::value_error(std::string(name) + " must be float32 or float16, got " + std::string(py::str(a.dtype())));
}

HeadsView HeadsOf(const char* name, const py::array& a) {
  if (a.ndim() != 4) throw py::value_error(std::string(name) + " must be 4-D [B, Hkv, S_new, D], got " + ShapeStr(a));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + " must be C-contiguous");
  return HeadsView::Dense(a.data(), ArrayDType(name, a), a.shape(0), a.shape(1), a.shape(2), a.shape(3));
}

void CheckSize(const char* name, const py::array& a, int64_t want, const std::string& shape) {
  if (a.size() != want)
    throw py::value_error(std::string(name) + " must have shape " + shape + ", got " + ShapeStr(a));
}

void Append(PyStore& s, const py::array& k, const py::array& v, const I32Array& pos, const OptI32& count,
            const OptI32& block) {
  kv::KvAppend in;
  in.k = HeadsOf("k", k);
  in.v = HeadsOf("v", v);
  const int64_t B = in.k.batch, S = in.k.seq;
  if (B != s.g.batch)
    throw py::value_error("append: k has batch " + std::to_string(B) + ", the store " + std::to_string(s.g.batch));
  const std::string bs = "(" + std::to_string(B) + ", " + std::to_string(S) + ")";
  CheckSize("pos", pos, B * S, bs);
  in.pos = pos.data();
  if (count) {
    CheckSize("count", *count, B, "(" + std::to_string(B) + ",)");
    in.count = count->data();
  }
  if (block) {
    CheckSize("block", *block, B * S, bs);
    in.block = block->data();
  }
  Status st;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(Runtime().mu);
    st = s.store->Append(in);
  }
  ThrowIfError(st);
}

// Copies a view whose K/V are contiguous [B, H, M, D] (every store's are): K/V decoded to float32
// (exact widening) or, keep_bits, their raw 2-byte elements.
void CopyView(const kv::KvView& view, int64_t M, bool keep_bits, py::array& k, py::array& v,
              py::array_t<int32_t>& k_pos, py::array_t<int32_t>& k_block, py::array_t<int32_t>& kv_valid) {
  TESSERA_CHECK(view.k.seq == M && view.k.stride_head == M * view.k.dim && view.k.stride_seq == view.k.dim &&
                    view.v.stride_head == M * view.v.dim && view.v.stride_seq == view.v.dim,
                "KV view is not contiguous");
  const int64_t B = view.k.batch;
  const size_t nk = static_cast<size_t>(k.size()), nv = static_cast<size_t>(v.size());
  if (keep_bits) {
    if (nk) std::memcpy(k.mutable_data(), view.k.data, nk * 2);
    if (nv) std::memcpy(v.mutable_data(), view.v.data, nv * 2);
  } else {
    if (nk) DecodeToF32(view.k.dtype, view.k.data, static_cast<float*>(k.mutable_data()), nk);
    if (nv) DecodeToF32(view.v.dtype, view.v.data, static_cast<float*>(v.mutable_data()), nv);
  }
  if (B * M > 0) {
    std::memcpy(k_pos.mutable_data(), view.k_pos, B * M * sizeof(int32_t));
    std::memcpy(k_block.mutable_data(), view.k_block, B * M * sizeof(int32_t));
  }
  std::memcpy(kv_valid.mutable_data(), view.kv_valid, B * sizeof(int32_t));
}

// Copies a contiguous [B, H, slots, D] view (every store's view is contiguous). The arrays are
// allocated without `mu` held (allocation may run Python code, e.g. a finalizer that takes it);
// a ConcatStore that grew in between is read again.
py::tuple View(const PyStore& s, bool raw) {
  const int64_t B = s.g.batch, H = s.g.kv_heads;
  for (;;) {
    int64_t M;
    {
      std::lock_guard<std::mutex> lock(Runtime().mu);
      M = s.store->capacity();
    }
    const bool keep_bits = raw && s.g.dtype != DType::kF32;
    const py::dtype kv_dtype = !keep_bits ? py::dtype::of<float>()
                               : s.g.dtype == DType::kF16 ? py::dtype("float16") : py::dtype::of<uint16_t>();
    py::array k(kv_dtype, std::vector<int64_t>{B, H, M, s.g.head_dim});
    py::array v(kv_dtype, std::vector<int64_t>{B, H, M, s.g.v_head_dim});
    py::array_t<int32_t> k_pos({B, M}), k_block({B, M}), kv_valid(B);
    {
      std::lock_guard<std::mutex> lock(Runtime().mu);
      if (s.store->capacity() != M) continue;
      CopyView(s.store->View(), M, keep_bits, k, v, k_pos, k_block, kv_valid);
    }
    return py::make_tuple(k, v, k_pos, k_block, kv_valid);
  }
}

// Attention of q over the store's current view, read in place (no copy of K/V).
py::array_t<float> Attend(const PyStore& s, const F32Array& q, const I32Array& q_pos, bool causal, int32_t wl,
                          int32_t wr, const OptI32& q_block, bool blocks_ignore_window, float scale, float softcap,
                          const std::string& kernel, int threads, const std::string& precision) {
  if (q.ndim() != 4) throw py::value_error("attend: q must be 4-D [B, Hq, S_q, D], got " + ShapeStr(q));
  const int64_t B = q.shape(0), Hq = q.shape(1), S_q = q.shape(2), D = q.shape(3);
  if (B != s.g.batch)
    throw py::value_error("attend: q has batch " + std::to_string(B) + ", the store " + std::to_string(s.g.batch));
  const std::string bs = "(" + std::to_string(B) + ", " + std::to_string(S_q) + ")";
  CheckSize("q_pos", q_pos, B * S_q, bs);
  if (q_block) CheckSize("q_block", *q_block, B * S_q, bs);
  const AttentionKernel kern = KernelFromName(kernel);
  py::array_t<float> out({B, Hq, S_q, s.g.v_head_dim});
  AttentionParams p;
  p.q = HeadsView::Dense(q.data(), DType::kF32, B, Hq, S_q, D);
  p.out = OutView::Dense(out.mutable_data(), B, Hq, S_q, s.g.v_head_dim);
  p.mask.q_pos = q_pos.data();
  p.mask.causal = causal;
  p.mask.window_left = wl;
  p.mask.window_right = wr;
  p.mask.blocks_ignore_window = blocks_ignore_window;
  p.scale = scale;
  p.softcap = softcap;
  if (!ParseAttentionPrecision(precision, &p.precision))
    throw py::value_error("attend: unknown precision '" + precision + "' (f32, bf16)");
  Status st;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(Runtime().mu);
    const kv::KvView view = s.store->View();
    p.k = view.k;
    p.v = view.v;
    p.mask.k_pos = view.k_pos;
    p.mask.kv_valid = view.kv_valid;
    if (q_block) {
      p.mask.q_block = q_block->data();
      p.mask.k_block = view.k_block;
    }
    StatusOr<ThreadPool*> pool = Runtime().TryPool(threads);
    AttentionContext ctx{pool.ok() ? pool.value() : nullptr, &Runtime().scratch};
    st = pool.ok() ? Attention(p, ctx, kern) : pool.status();
  }
  ThrowIfError(st);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Memory plan.

using LayerTuple = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t>;  // kind, Hkv, D, Dv, window

py::tuple MemoryPlan(const std::vector<LayerTuple>& layers, int64_t num_shared, int64_t batch, int64_t max_context,
                     int64_t max_chunk, const std::string& dtype) {
  kv::KvCacheConfig c;
  for (const auto& [kind, heads, d, dv, window] : layers) {
    kv::KvLayerSpec s;
    if (kind == "full") {
      s.kind = kv::LayerKind::kFull;
    } else if (kind == "sliding") {
      s.kind = kv::LayerKind::kSliding;
    } else {
      throw py::value_error("kv_memory_plan: layer " + std::to_string(c.layers.size()) + " kind '" + kind +
                            "' is neither 'full' nor 'sliding'");
    }
    s.kv_heads = heads, s.head_dim = d, s.v_head_dim = dv, s.window = window;
    c.layers.push_back(s);
  }
  c.num_kv_shared_layers = num_shared;
  c.batch = batch;
  c.max_context = max_context;
  c.max_chunk = max_chunk;
  c.dtype = DTypeOf(dtype);
  const StatusOr<kv::KvMemoryPlan> plan = kv::KvCache::Plan(c);
  ThrowIfError(plan.status());
  py::list out;
  for (size_t i = 0; i < plan.value().layers.size(); ++i) {
    const kv::KvLayerPlan& l = plan.value().layers[i];
    py::dict d;
    d["layer"] = i;
    d["kind"] = kv::LayerKindName(l.layer_kind);
    d["store"] = kv::StoreKindName(l.store);
    d["owner"] = l.owner;
    d["slots"] = l.slots;
    d["bytes"] = l.bytes;
    out.append(d);
  }
  return py::make_tuple(out, plan.value().total_bytes, plan.value().Format());
}

}  // namespace

void BindKv(py::module_ m) {
  py::class_<PyStore>(m, "Store", "A KV store (see tessera.kv); built by the make_* functions.")
      .def("append", &Append, py::arg("k"), py::arg("v"), py::arg("pos"), py::arg("count"), py::arg("block"))
      .def(
          "can_rewind",
          [](const PyStore& s, int64_t b, int64_t n) {
            CheckRow(s, b);
            Status st;
            {
              std::lock_guard<std::mutex> lock(Runtime().mu);
              st = s.store->CanRewind(b, n);
            }
            return py::make_tuple(st.ok(), st.message());
          },
          py::arg("b"), py::arg("n"))
      .def(
          "rewind",
          [](PyStore& s, int64_t b, int64_t n) {
            CheckRow(s, b);
            Status st;
            {
              std::lock_guard<std::mutex> lock(Runtime().mu);
              st = s.store->Rewind(b, n);
            }
            ThrowIfError(st);
          },
          py::arg("b"), py::arg("n"))
      .def("view", &View, py::arg("raw"))
      .def("attend", &Attend, py::arg("q"), py::arg("q_pos"), py::arg("causal"), py::arg("window_left"),
           py::arg("window_right"), py::arg("q_block"), py::arg("blocks_ignore_window"), py::arg("scale"),
           py::arg("softcap"), py::arg("kernel"), py::arg("num_threads"), py::arg("precision"))
      .def("write_pos",
           [](const PyStore& s, int64_t b) {
             CheckRow(s, b);
             std::lock_guard<std::mutex> lock(Runtime().mu);
             return s.store->write_pos(b);
           })
      .def("valid_len",
           [](const PyStore& s, int64_t b) {
             CheckRow(s, b);
             std::lock_guard<std::mutex> lock(Runtime().mu);
             return s.store->valid_len(b);
           })
      .def_property_readonly("capacity",
                             [](const PyStore& s) {
                               std::lock_guard<std::mutex> lock(Runtime().mu);
                               return s.store->capacity();
                             })
      .def_property_readonly("bytes",
                             [](const PyStore& s) {
                               std::lock_guard<std::mutex> lock(Runtime().mu);
                               return s.store->bytes();
                             })
      .def_property_readonly("kind", [](const PyStore& s) { return s.kind; })
      .def_property_readonly("batch", [](const PyStore& s) { return s.g.batch; })
      .def_property_readonly("kv_heads", [](const PyStore& s) { return s.g.kv_heads; })
      .def_property_readonly("head_dim", [](const PyStore& s) { return s.g.head_dim; })
      .def_property_readonly("v_head_dim", [](const PyStore& s) { return s.g.v_head_dim; })
      .def_property_readonly("dtype", [](const PyStore& s) { return std::string(DTypeName(s.g.dtype)); });
  m.def("make_dense", &MakeDense, py::arg("batch"), py::arg("kv_heads"), py::arg("head_dim"), py::arg("v_head_dim"),
        py::arg("capacity"), py::arg("dtype"));
  m.def("make_ring", &MakeRing, py::arg("batch"), py::arg("kv_heads"), py::arg("head_dim"), py::arg("v_head_dim"),
        py::arg("window"), py::arg("max_chunk"), py::arg("dtype"));
  m.def("make_concat", &MakeConcat, py::arg("batch"), py::arg("kv_heads"), py::arg("head_dim"), py::arg("v_head_dim"),
        py::arg("dtype"));
  m.def("make_external", &MakeExternal, py::arg("k_cache"), py::arg("v_cache"), py::arg("nonpad_kv_seqlen"));
  m.def("memory_plan", &MemoryPlan, py::arg("layers"), py::arg("num_kv_shared_layers"), py::arg("batch"),
        py::arg("max_context"), py::arg("max_chunk"), py::arg("dtype"));

  // tensor_scatter belongs to the onnx submodule (bound before this one): module.cc builds both
  // with def_submodule, which registers "<package>._tessera.onnx" in sys.modules.
  std::string name = py::str(m.attr("__name__"));
  const std::string suffix = ".kv";
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw std::runtime_error("BindKv: unexpected module name " + name);
  const std::string onnx_name = name.substr(0, name.size() - suffix.size()) + ".onnx";
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains(onnx_name)) throw std::runtime_error("BindKv: " + onnx_name + " must be bound first");
  py::module_ onnx_module = modules[onnx_name.c_str()].cast<py::module_>();
  onnx_module.def("tensor_scatter", &RunTensorScatter, py::arg("past_cache"), py::arg("update"),
                  py::arg("write_indices"), py::arg("axis"), py::arg("mode"));
}

}  // namespace tessera::py_bind
