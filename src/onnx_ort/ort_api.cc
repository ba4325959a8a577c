#include "onnx_ort/ort_api.h"

#include <vector>

namespace tessera::ort {
namespace {

const OrtApi* g_api = nullptr;

// Releases an OrtTensorTypeAndShapeInfo at scope exit.
struct TypeInfo {
  OrtTensorTypeAndShapeInfo* p = nullptr;
  ~TypeInfo() {
    if (p) Api().ReleaseTensorTypeAndShapeInfo(p);
  }
};

bool ElemTypeOf(ONNXTensorElementDataType t, onnx::ElemType* out) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: *out = onnx::ElemType::kFloat32; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: *out = onnx::ElemType::kInt32; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: *out = onnx::ElemType::kInt64; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: *out = onnx::ElemType::kBool; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: *out = onnx::ElemType::kFloat16; return true;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: *out = onnx::ElemType::kBFloat16; return true;
    default: return false;
  }
}

}  // namespace

const OrtApi& Api() { return *g_api; }
void SetApi(const OrtApi* api) { g_api = api; }

OrtStatus* Error(OrtErrorCode code, const std::string& msg) { return Api().CreateStatus(code, msg.c_str()); }

OrtStatus* FromStatus(const Status& st) {
  if (st.ok()) return nullptr;
  const OrtErrorCode code = st.code() == StatusCode::kInvalidArgument ? ORT_INVALID_ARGUMENT : ORT_FAIL;
  return Error(code, st.message());
}

#define TESSERA_ORT_RETURN(expr)          \
  do {                                    \
    if (OrtStatus* s_ = (expr)) return s_; \
  } while (0)

OrtStatus* ReadInput(OrtKernelContext* ctx, size_t index, const char* name, std::optional<onnx::TensorRef>* out) {
  out->reset();
  size_t count = 0;
  TESSERA_ORT_RETURN(Api().KernelContext_GetInputCount(ctx, &count));
  if (index >= count) return nullptr;  // a trailing optional input left out
  const OrtValue* v = nullptr;
  TESSERA_ORT_RETURN(Api().KernelContext_GetInput(ctx, index, &v));
  if (v == nullptr) return nullptr;  // an optional input given as ""
  TypeInfo info;
  TESSERA_ORT_RETURN(Api().GetTensorTypeAndShape(v, &info.p));
  ONNXTensorElementDataType et;
  TESSERA_ORT_RETURN(Api().GetTensorElementType(info.p, &et));
  size_t rank = 0;
  TESSERA_ORT_RETURN(Api().GetDimensionsCount(info.p, &rank));
  onnx::TensorRef t;
  if (!ElemTypeOf(et, &t.type))
    return Error(ORT_INVALID_ARGUMENT, std::string("TesseraGroupQueryAttention: input ") + name +
                                           " has an unsupported element type " + std::to_string(et));
  t.shape.resize(rank);
  TESSERA_ORT_RETURN(Api().GetDimensions(info.p, t.shape.data(), rank));
  void* data = nullptr;
  TESSERA_ORT_RETURN(Api().GetTensorMutableData(const_cast<OrtValue*>(v), &data));
  t.data = data;
  *out = std::move(t);
  return nullptr;
}

OrtStatus* AllocateOutput(OrtKernelContext* ctx, size_t index, const char* name, const std::vector<int64_t>& shape,
                          onnx::ElemType type, onnx::MutableTensorRef* out) {
  OrtValue* v = nullptr;
  TESSERA_ORT_RETURN(Api().KernelContext_GetOutput(ctx, index, shape.data(), shape.size(), &v));
  if (v == nullptr)
    return Error(ORT_FAIL, std::string("TesseraGroupQueryAttention: onnxruntime gave no buffer for output ") + name);
  TESSERA_ORT_RETURN(Api().GetTensorMutableData(v, &out->data));
  out->shape = shape;
  out->type = type;
  return nullptr;
}

// onnxruntime keeps no attribute schema for custom ops: an attribute is read as each type in
// turn, so that one set with the wrong type is an error rather than silently the default.
static bool ReadsAsInt(const OrtKernelInfo* info, const char* name, int64_t* out) {
  if (OrtStatus* s = Api().KernelInfoGetAttribute_int64(info, name, out)) {
    Api().ReleaseStatus(s);
    return false;
  }
  return true;
}

static bool ReadsAsFloat(const OrtKernelInfo* info, const char* name, float* out) {
  if (OrtStatus* s = Api().KernelInfoGetAttribute_float(info, name, out)) {
    Api().ReleaseStatus(s);
    return false;
  }
  return true;
}

OrtStatus* IntAttr(const OrtKernelInfo* info, const char* name, int64_t fallback, int64_t* out) {
  if (ReadsAsInt(info, name, out)) return nullptr;
  float f = 0.0f;
  if (ReadsAsFloat(info, name, &f))
    return Error(ORT_INVALID_ARGUMENT, std::string("TesseraGroupQueryAttention: attribute ") + name +
                                           " must be an int, got the float " + onnx::FloatString(f));
  *out = fallback;
  return nullptr;
}

OrtStatus* FloatAttr(const OrtKernelInfo* info, const char* name, float fallback, float* out) {
  if (ReadsAsFloat(info, name, out)) return nullptr;
  int64_t i = 0;
  // An int is a float attribute written without a decimal point (softcap=30): taken as that value.
  *out = ReadsAsInt(info, name, &i) ? static_cast<float>(i) : fallback;
  return nullptr;
}

}  // namespace tessera::ort
