#include "vision/weight_panels.h"

#include "io/mapped_file.h"
#include "ops/bf16_dot.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"

namespace tessera::vision {

void PackPanelsForEncode(ops::MatmulPrecision precision, ops::WeightView* view, std::vector<AlignedBuffer>* owned,
                         const void* mapped, size_t mapped_bytes) {
  const bool f32 = precision == ops::MatmulPrecision::kF32 && view->dtype == DType::kF32;
  // (Pair panels need the bf16 dot product's packer.)
  const bool pairs = precision == ops::MatmulPrecision::kBf16 && view->dtype == DType::kBF16 && ops::Bf16Dot();
  if (f32) {
    owned->emplace_back(static_cast<size_t>(ops::F32PanelFloats(view->out, view->in)) * sizeof(float));
    ops::PackF32Panels(*view, owned->back().as<float>());
    view->panels = owned->back().as<float>();
  } else if (pairs) {
    owned->emplace_back(static_cast<size_t>(ops::PairPanelWords(view->out, view->in)) * sizeof(uint32_t));
    ops::PackPairPanels(*view, owned->back().as<uint32_t>());  // (cannot fail: bf16, the dot product present)
    view->pairs = owned->back().as<uint32_t>();
  }
  if (mapped && (f32 || pairs || view->data != mapped)) io::MappedFile::Release(mapped, mapped_bytes);
}

}  // namespace tessera::vision
