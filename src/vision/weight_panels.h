// A tower's matrices repacked once into the panels Linear's GEMM reads in place.
#pragma once

#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/linear.h"
#include "tessera/precision.h"

namespace tessera::vision {

// Packs a matrix once for Linear so that an encode packs no weight blocks, keeping the panels in
// `owned`: at precision f32 an f32 matrix into f32 panels (ops::WeightView::panels); at precision
// bf16 a bf16 one into pair panels (ops::WeightView::pairs, the AMX tiles' and the dot product's
// operand) where the CPU has the bf16 dot product. The view's data stays as it was (Linear's
// row-dot reads it without the x pairs scratch). Returns whether it packed; the results are the
// same bits either way (tests/linear_amx_test.cc, tests/linear_panels_test.cc).
bool PackPanelsForEncode(ops::MatmulPrecision precision, ops::WeightView* view, std::vector<AlignedBuffer>* owned);

}  // namespace tessera::vision
