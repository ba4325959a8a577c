// Low-level attention entry points. Python (tessera/__init__.py) computes the defaults and
// broadcasting; these functions check lengths and map arrays onto AttentionParams.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "tessera/attention.h"
#include "tessera/dtype.h"

namespace tessera::py_bind {
namespace {

struct MaskArrays {
  I32Array q_pos, k_pos, kv_valid, q_block, k_block;
  py::array bias;  // any strides, float32 or bool, already broadcast to [B, Hq, S_q, S_kv]
};

void CheckLen(const char* name, const py::array& a, int64_t want) {
  if (a.size() != want)
    throw py::value_error(std::string(name) + " has " + std::to_string(a.size()) + " elements, expected " +
                          std::to_string(want));
}

// Fills `m` from the arrays (which must outlive it).
MaskSpec BuildMask(const MaskArrays& a, int64_t B, int64_t S_q, int64_t S_kv, bool causal, int32_t wl, int32_t wr,
                   bool blocks_ignore_window) {
  CheckLen("q_pos", a.q_pos, B * S_q);
  CheckLen("k_pos", a.k_pos, B * S_kv);
  CheckLen("kv_valid", a.kv_valid, B);
  MaskSpec m;
  m.q_pos = a.q_pos.data();
  m.k_pos = a.k_pos.data();
  m.kv_valid = a.kv_valid.data();
  m.causal = causal;
  m.window_left = wl;
  m.window_right = wr;
  if (a.q_block.size() > 0 || a.k_block.size() > 0) {
    CheckLen("q_block", a.q_block, B * S_q);
    CheckLen("k_block", a.k_block, B * S_kv);
    m.q_block = a.q_block.data();
    m.k_block = a.k_block.data();
  }
  m.blocks_ignore_window = blocks_ignore_window;
  if (a.bias.ndim() == 4) {
    const bool is_bool = a.bias.dtype().is(py::dtype::of<bool>());
    const bool is_f32 = a.bias.dtype().is(py::dtype::of<float>());
    if (!is_bool && !is_f32) throw py::value_error("bias must be float32 or bool");
    const int64_t item = is_bool ? 1 : 4;
    m.dense.kind = is_bool ? DenseMask::Kind::kBool : DenseMask::Kind::kAdditive;
    m.dense.data = a.bias.data();
    m.dense.stride_batch = a.bias.strides(0) / item;
    m.dense.stride_head = a.bias.strides(1) / item;
    m.dense.stride_q = a.bias.strides(2) / item;
    m.dense.stride_k = a.bias.strides(3) / item;
  } else if (a.bias.size() > 0) {
    throw py::value_error("bias must be broadcast to 4 dimensions");
  }
  return m;
}

// A K or V operand stored in `dtype`: f32 input converted once (round to nearest even).
struct StoredKv {
  std::vector<uint16_t> half;
  const void* data;
};
StoredKv Store(const F32Array& x, DType dtype) {
  StoredKv s;
  if (dtype == DType::kF32) {
    s.data = x.data();
  } else {
    s.half.resize(x.size());
    EncodeFromF32(dtype, x.data(), s.half.data(), x.size());
    s.data = s.half.data();
  }
  return s;
}

py::array_t<float> AttentionRaw(const F32Array& q, const F32Array& k, const F32Array& v, const MaskArrays& arrays,
                                bool causal, int32_t wl, int32_t wr, bool biw, float scale, float softcap,
                                const std::string& kv_dtype, const std::string& kernel, int threads,
                                const std::string& precision) {
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4)
    throw py::value_error("q, k, v must be 4-D [B, H, S, D]");
  DType dt;
  if (!ParseDType(kv_dtype, &dt)) throw py::value_error("unknown kv_dtype '" + kv_dtype + "' (f32, bf16, f16)");
  const int64_t B = q.shape(0), Hq = q.shape(1), S_q = q.shape(2);
  const int64_t S_kv = k.shape(2), Dv = v.shape(3);
  MaskSpec mask = BuildMask(arrays, B, S_q, S_kv, causal, wl, wr, biw);
  StoredKv ks = Store(k, dt), vs = Store(v, dt);
  py::array_t<float> out({B, Hq, S_q, Dv});
  AttentionParams p;
  p.q = HeadsView::Dense(q.data(), DType::kF32, B, Hq, S_q, q.shape(3));
  p.k = HeadsView::Dense(ks.data, dt, k.shape(0), k.shape(1), S_kv, k.shape(3));
  p.v = HeadsView::Dense(vs.data, dt, v.shape(0), v.shape(1), v.shape(2), Dv);
  p.out = OutView::Dense(out.mutable_data(), B, Hq, S_q, Dv);
  p.mask = mask;
  p.scale = scale;
  p.softcap = softcap;
  if (!ParseAttentionPrecision(precision, &p.precision))
    throw py::value_error("unknown precision '" + precision + "' (f32, bf16)");
  const AttentionKernel kern = KernelFromName(kernel);
  Status st;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(Runtime().mu);
    StatusOr<ThreadPool*> pool = Runtime().TryPool(threads);
    AttentionContext ctx{pool.ok() ? pool.value() : nullptr, &Runtime().scratch};
    st = pool.ok() ? Attention(p, ctx, kern) : pool.status();
  }
  ThrowIfError(st);
  return out;
}

py::array_t<float> AttentionBiasRaw(int64_t B, int64_t S_q, int64_t S_kv, const MaskArrays& arrays, bool causal,
                                    int32_t wl, int32_t wr, bool biw, float masked_value) {
  if (arrays.bias.ndim() == 4 && arrays.bias.shape(1) != 1)
    throw py::value_error("attention_bias: bias must broadcast with a head dimension of 1");
  MaskSpec mask = BuildMask(arrays, B, S_q, S_kv, causal, wl, wr, biw);
  py::array_t<float> out({B, int64_t{1}, S_q, S_kv});
  ThrowIfError(AttentionBias(mask, B, S_q, S_kv, masked_value, out.mutable_data()));
  return out;
}

}  // namespace

PyRuntime& Runtime() {
  static PyRuntime* runtime = new PyRuntime();  // lives for the interpreter; never destroyed
  return *runtime;
}

void BindAttention(py::module_& m) {
  m.def(
      "_attention",
      [](const F32Array& q, const F32Array& k, const F32Array& v, const I32Array& q_pos, const I32Array& k_pos,
         const I32Array& kv_valid, bool causal, int32_t wl, int32_t wr, bool biw, const I32Array& q_block,
         const I32Array& k_block, const py::array& bias, float scale, float softcap, const std::string& kv_dtype,
         const std::string& kernel, int threads, const std::string& precision) {
        MaskArrays a{q_pos, k_pos, kv_valid, q_block, k_block, bias};
        return AttentionRaw(q, k, v, a, causal, wl, wr, biw, scale, softcap, kv_dtype, kernel, threads, precision);
      });
  m.def("_attention_bias", [](int64_t B, int64_t S_q, int64_t S_kv, const I32Array& q_pos, const I32Array& k_pos,
                              const I32Array& kv_valid, bool causal, int32_t wl, int32_t wr, bool biw,
                              const I32Array& q_block, const I32Array& k_block, const py::array& bias,
                              float masked_value) {
    MaskArrays a{q_pos, k_pos, kv_valid, q_block, k_block, bias};
    return AttentionBiasRaw(B, S_q, S_kv, a, causal, wl, wr, biw, masked_value);
  });
  m.def("_f32_to_bf16_bits", [](const F32Array& x) {
    py::array_t<uint16_t> out(x.size());
    EncodeFromF32(DType::kBF16, x.data(), out.mutable_data(), x.size());
    return out;
  });
  m.def("_f32_to_f16_bits", [](const F32Array& x) {
    py::array_t<uint16_t> out(x.size());
    EncodeFromF32(DType::kF16, x.data(), out.mutable_data(), x.size());
    return out;
  });
  m.attr("MAX_HEAD_DIM") = kMaxHeadDim;
}

}  // namespace tessera::py_bind
