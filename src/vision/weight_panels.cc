#include "vision/weight_panels.h"

#include "ops/bf16_dot.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"

namespace tessera::vision {

bool PackPanelsForEncode(ops::MatmulPrecision precision, ops::WeightView* view, std::vector<AlignedBuffer>* owned) {
  if (precision == ops::MatmulPrecision::kF32 && view->dtype == DType::kF32) {
    owned->emplace_back(static_cast<size_t>(ops::F32PanelFloats(view->out, view->in)) * sizeof(float));
    ops::PackF32Panels(*view, owned->back().as<float>());
    view->panels = owned->back().as<float>();
    return true;
  }
  // (Pair panels need the bf16 dot product's packer: without it, none.)
  if (precision != ops::MatmulPrecision::kBf16 || view->dtype != DType::kBF16 || ops::Bf16Dot() == nullptr)
    return false;
  owned->emplace_back(static_cast<size_t>(ops::PairPanelWords(view->out, view->in)) * sizeof(uint32_t));
  if (!ops::PackPairPanels(*view, owned->back().as<uint32_t>())) {  // (cannot fail after the check above)
    owned->pop_back();
    return false;
  }
  view->pairs = owned->back().as<uint32_t>();
  return true;
}

}  // namespace tessera::vision
