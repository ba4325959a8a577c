// Binds a GemmaArch to a checkpoint's tensors: checks every name, shape and dtype, keeps
// matrices as views into the (memory-mapped) checkpoint or converts them on request, and copies
// the small vectors (norm weights, layer scalars) to f32.
#pragma once

#include <optional>

#include "tessera/thread_pool.h"

#include "io/safetensors_checkpoint.h"
#include "model/gemma_arch.h"
#include "model/gemma_weights.h"
#include "tessera/linear.h"

namespace tessera::model {

struct WeightLoadOptions {
  std::optional<DType> convert_to;  // keep the stored dtype when empty
  // Also pack every Linear matrix, once, into the panels Linear reads at this matmul precision:
  // kBf16: bf16 matrices as pair panels (ops::WeightView::pairs), where the CPU has the bf16 dot
  // product; kF32: f32 matrices stored as f32 as f32 panels (ops::WeightView::panels). Any other
  // matrix is left as stored, or as converted. No per-call packing in the GEMM, and decode streams
  // the panels. A mapped matrix's pages are released after packing (read back from the file only by
  // other paths, e.g. the other precision), so resident memory stays about one copy; a matrix
  // converted to bf16 (convert_to) keeps both copies.
  std::optional<ops::MatmulPrecision> pack_panels_for;
  // Threads to pack on (null: the calling thread). Packing writes fresh memory, whose first touch
  // dominates loading (bench/results/kernel_choices.md, "Panels on huge pages").
  ThreadPool* pool = nullptr;
};

// The checkpoint must outlive the returned weights unless every matrix was converted.
StatusOr<GemmaWeights> LoadGemmaWeights(const io::SafetensorsCheckpoint& ckpt, const GemmaArch& arch,
                                        const WeightLoadOptions& options = {});

}  // namespace tessera::model
