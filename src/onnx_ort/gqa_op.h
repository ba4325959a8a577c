// com.tessera.TesseraGroupQueryAttention (docs/onnxruntime.md): onnxruntime's GroupQueryAttention
// contract plus the structured image mask as data (block_ids), run by Tessera's GQA adapter and
// attention kernels inside an onnxruntime session.
#pragma once

#include <onnxruntime_c_api.h>

namespace tessera::ort {

inline constexpr char kDomain[] = "com.tessera";
inline constexpr char kOpName[] = "TesseraGroupQueryAttention";

// The operator's schema and kernel factory, filled in for onnxruntime's C API. One static
// instance serves every session of the process.
OrtCustomOp* GqaCustomOp();

}  // namespace tessera::ort
