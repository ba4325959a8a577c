// Binds a GemmaArch to a GGUF file's tensors (llama.cpp's names, e.g. blk.3.attn_q.weight) through
// the shared binder (weight_loader.h): matrices stay in the mapping in their stored type (f32,
// f16, bf16, or block-quantized as WeightView::quant), vectors are copied to f32.
#pragma once

#include <string>

#include "model/gemma_arch.h"
#include "model/gemma_weights.h"
#include "model/weight_loader.h"
#include "tessera/gguf.h"

namespace tessera::model {

// The llama.cpp tensor name of a Hugging Face text-decoder name ("layers.3.self_attn.q_proj.weight"
// -> "blk.3.attn_q.weight"); empty for a name with no GGUF counterpart. The MoE block's names
// ("layers.3.experts.down_proj" -> "blk.3.ffn_down_exps.weight") only with `experts`: the loader
// reads them, `tessera quantize` does not write them yet.
std::string GgufTensorName(const std::string& hf_name, bool experts = false);

// Fails on tensors the architecture does not use where they would change the model: layers beyond
// block_count, or per-layer tensors of a kind the binder does not read (e.g. experts without
// expert_count, or separate ffn_gate_exps / ffn_up_exps).
Status CheckGgufTensors(const io::GgufFile& file, const GemmaArch& arch);

// The file must outlive the returned weights unless every matrix was converted.
StatusOr<GemmaWeights> LoadGgufWeights(const io::GgufFile& file, const GemmaArch& arch,
                                       const WeightLoadOptions& options = {});

}  // namespace tessera::model
