// The onnxruntime C API as this library sees it: the OrtApi table handed over at registration
// and the helpers that turn onnxruntime values into Tessera's tensor views and errors into
// OrtStatus (never exceptions across the C boundary).
#pragma once

#include <onnxruntime_c_api.h>

#include <cstdint>
#include <optional>
#include <string>

#include "tessera/onnx/tensor_ref.h"
#include "tessera/status.h"

namespace tessera::ort {

// Set once by RegisterCustomOps before any kernel exists.
const OrtApi& Api();
void SetApi(const OrtApi* api);

// An onnxruntime error carrying `msg` (onnxruntime raises it from InferenceSession.run / creation).
OrtStatus* Error(OrtErrorCode code, const std::string& msg);
OrtStatus* FromStatus(const Status& st);

// Input `index` as a view, or nullopt when an optional input is absent. Errors name the input.
OrtStatus* ReadInput(OrtKernelContext* ctx, size_t index, const char* name, std::optional<onnx::TensorRef>* out);

// Output `index` allocated by onnxruntime with `shape` (or the buffer bound to it, with IO binding).
OrtStatus* AllocateOutput(OrtKernelContext* ctx, size_t index, const char* name, const std::vector<int64_t>& shape,
                          onnx::ElemType type, onnx::MutableTensorRef* out);

// Integer / float attribute, or `fallback` when the node does not set it. An int attribute set
// as a float is an error; a float attribute set as an int is taken as that value.
OrtStatus* IntAttr(const OrtKernelInfo* info, const char* name, int64_t fallback, int64_t* out);
OrtStatus* FloatAttr(const OrtKernelInfo* info, const char* name, float fallback, float* out);

}  // namespace tessera::ort
