// The library's one exported symbol: onnxruntime calls it from
// SessionOptions.register_custom_ops_library (Python) / RegisterCustomOpsLibrary (C).
#include <onnxruntime_c_api.h>

#include <mutex>

#include "onnx_ort/gqa_op.h"
#include "onnx_ort/ort_api.h"

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // The headers' API version; any onnxruntime at least this new serves it.
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == nullptr) return nullptr;  // too old a runtime: nothing to report the error with
  tessera::ort::SetApi(api);
  // The domain must outlive every session using it; the library stays loaded as long, so it is
  // created once and never released.
  static OrtCustomOpDomain* domain = nullptr;
  static std::once_flag once;
  OrtStatus* status = nullptr;
  std::call_once(once, [&] {
    if ((status = api->CreateCustomOpDomain(tessera::ort::kDomain, &domain)) != nullptr) return;
    status = api->CustomOpDomain_Add(domain, tessera::ort::GqaCustomOp());
  });
  if (status != nullptr) return status;
  if (domain == nullptr) return api->CreateStatus(ORT_FAIL, "com.tessera: the op domain could not be created");
  return api->AddCustomOpDomain(options, domain);
}
