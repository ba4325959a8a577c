// Binds a GemmaArch to a checkpoint's tensors: checks every name, shape and dtype, keeps
// matrices as views into the (memory-mapped) checkpoint or converts them on request, and copies
// the small vectors (norm weights, layer scalars) to f32. One binder serves every container
// (safetensors directory, GGUF file) through WeightSource, so the checks exist once.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessera/thread_pool.h"

#include "io/safetensors_checkpoint.h"
#include "model/gemma_arch.h"
#include "model/gemma_weights.h"
#include "tessera/linear.h"

namespace tessera::model {

struct StoredTensor;

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
  // Quantize-on-load (runtime/quantize_model.cc): each matrix as stored, by its Hugging Face name,
  // is replaced by what this returns; storage it allocates goes into `keep` (the weights' own).
  std::function<StatusOr<StoredTensor>(const std::string& name, const StoredTensor& stored,
                                       std::vector<AlignedBuffer>* keep)>
      rewrite_matrix;
};

// One stored tensor as the binder sees it: block-quantized (quant != kNone) or of `dtype`.
struct StoredTensor {
  std::string name;  // as the container spells it (for messages)
  const void* data = nullptr;
  DType dtype = DType::kF32;
  QuantType quant = QuantType::kNone;
  std::vector<int64_t> shape;  // row-major, [out, in] for a matrix
  uint64_t nbytes = 0;
};

// Where the binder finds tensors. Names asked for are the Hugging Face text decoder's, relative to
// the language model ("embed_tokens.weight", "layers.3.self_attn.q_proj.weight", and
// "lm_head.weight" for an untied head); a source translates them to its own.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const std::string& path() const = 0;
  // An absent tensor is an error naming it in the container's spelling.
  virtual StatusOr<StoredTensor> Get(const std::string& name) const = 0;
  virtual bool HasLmHead() const = 0;  // false: the LM head is tied to the embedding
};

// The source must outlive the returned weights unless every matrix was converted. Block-quantized
// matrices are kept as stored (WeightView::quant): convert_to and pack_panels_for leave them alone.
StatusOr<GemmaWeights> BindGemmaWeights(const WeightSource& source, const GemmaArch& arch,
                                        const WeightLoadOptions& options = {});

// The checkpoint must outlive the returned weights unless every matrix was converted.
StatusOr<GemmaWeights> LoadGemmaWeights(const io::SafetensorsCheckpoint& ckpt, const GemmaArch& arch,
                                        const WeightLoadOptions& options = {});

}  // namespace tessera::model
