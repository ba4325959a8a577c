#include "vision/weight_panels.h"

#include "io/mapped_file.h"
#include "tessera/dtype.h"
#include "tessera/gemm.h"

namespace tessera::vision {

void PackF32PanelsForEncode(ops::MatmulPrecision precision, bool mapped, ops::WeightView* view,
                            std::vector<AlignedBuffer>* owned) {
  if (precision != ops::MatmulPrecision::kF32 || view->dtype != DType::kF32) return;
  owned->emplace_back(static_cast<size_t>(ops::F32PanelFloats(view->out, view->in)) * sizeof(float));
  float* panels = static_cast<float*>(owned->back().data());
  ops::PackF32Panels(*view, panels);
  if (mapped) io::MappedFile::Release(view->data, static_cast<size_t>(view->out * view->in) * sizeof(float));
  view->panels = panels;
}

}  // namespace tessera::vision
