#include "vision/weight_panels.h"

#include "io/mapped_file.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"

namespace tessera::vision {

void PackPanelsForEncode(ops::MatmulPrecision precision, WeightSource source, ops::WeightView* view,
                         std::vector<AlignedBuffer>* owned) {
  const size_t bytes = static_cast<size_t>(view->out * view->in) * DTypeSize(view->dtype);
  if (precision == ops::MatmulPrecision::kF32 && view->dtype == DType::kF32) {
    owned->emplace_back(static_cast<size_t>(ops::F32PanelFloats(view->out, view->in)) * sizeof(float));
    ops::PackF32Panels(*view, owned->back().as<float>());
    view->panels = owned->back().as<float>();
  } else if (precision == ops::MatmulPrecision::kBf16 && view->dtype == DType::kBF16 &&
             source != WeightSource::kConverted) {
    owned->emplace_back(static_cast<size_t>(ops::PairPanelWords(view->out, view->in)) * sizeof(uint32_t));
    if (!ops::PackPairPanels(*view, owned->back().as<uint32_t>())) {  // no bf16 dot product: no pair panels
      owned->pop_back();
      return;
    }
    view->pairs = owned->back().as<uint32_t>();
  } else {
    return;
  }
  if (source == WeightSource::kMapped) io::MappedFile::Release(view->data, bytes);
}

}  // namespace tessera::vision
