// A tower's matrices repacked once into the panels Linear's GEMM reads in place.
#pragma once

#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/linear.h"
#include "tessera/precision.h"

namespace tessera::vision {

// Where a matrix view's data lives, which decides whether packing may drop it.
enum class WeightSource {
  kMapped,     // the mapped checkpoint: its pages are dropped once packed (Linear then reads only
               // the panels; the pages fault back in from the file if anything else reads them)
  kOwned,      // a copy the tower keeps (a transposed projection): kept as it is
  kConverted,  // a bf16 copy of a matrix stored in another dtype: not packed (see below)
};

// Packs a matrix once for Linear so that an encode packs no weight blocks:
// - precision f32, f32 data: f32 panels (ops::WeightView::panels);
// - precision bf16, bf16 data, CPUs with the bf16 dot product: bf16 pair panels
//   (ops::WeightView::pairs), which the GEMM reads on AMX tiles or the dot product. A matrix
//   converted to bf16 at load keeps the per-call packing instead: packing it would hold a second
//   bf16 copy beside the conversion, which Linear's row-dot still reads.
// Other cases keep the view as it is. The panels are kept in `owned`; the results are the same
// bits either way (tests/linear_amx_test.cc, tests/linear_panels_test.cc).
void PackPanelsForEncode(ops::MatmulPrecision precision, WeightSource source, ops::WeightView* view,
                         std::vector<AlignedBuffer>* owned);

}  // namespace tessera::vision
