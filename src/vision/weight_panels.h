// A tower's f32 matrices repacked for Linear at matmul precision f32.
#pragma once

#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/linear.h"
#include "tessera/precision.h"

namespace tessera::vision {

// At precision f32, an f32 matrix is packed once into the panels Linear's GEMM reads in place
// (ops::WeightView::panels, kept in `owned`): an encode then packs no weight blocks. `mapped`:
// the view points into a mapped checkpoint, whose pages are dropped once packed (the panels
// replace them; Linear reads only the panels from then on). Other dtypes and precision bf16 keep
// the view as it is.
void PackF32PanelsForEncode(ops::MatmulPrecision precision, bool mapped, ops::WeightView* view,
                            std::vector<AlignedBuffer>* owned);

}  // namespace tessera::vision
