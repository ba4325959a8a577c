// A tower's matrices repacked once into the panels Linear's GEMM reads in place.
#pragma once

#include <cstddef>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/linear.h"
#include "tessera/precision.h"

namespace tessera::vision {

// Packs a matrix once for Linear so that an encode packs no weight blocks, keeping the panels in
// `owned`: at precision f32 an f32 matrix into f32 panels (ops::WeightView::panels); at precision
// bf16 a bf16 one into pair panels (ops::WeightView::pairs, the AMX tiles' and the dot product's
// operand) where the CPU has the bf16 dot product. The view's data stays as it was (Linear's
// row-dot reads it without the x pairs scratch). `mapped` / `mapped_bytes`: the range of the
// mapped checkpoint the matrix came from (null for a copy made from it), whose pages are dropped
// once Linear no longer reads them: after packing, or when the view is already a converted copy
// (they are read back from the file if anything touches them again). The results are the same
// bits packed or not (tests/linear_amx_test.cc, tests/linear_panels_test.cc).
void PackPanelsForEncode(ops::MatmulPrecision precision, ops::WeightView* view, std::vector<AlignedBuffer>* owned,
                         const void* mapped = nullptr, size_t mapped_bytes = 0);

}  // namespace tessera::vision
