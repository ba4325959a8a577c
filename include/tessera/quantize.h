// Quantizing a Hugging Face Gemma 3 / Gemma 4 checkpoint into a GGUF that Tessera and llama.cpp
// both run: the metadata, tensor names and transformations of llama.cpp's converter, the
// tokenizer from the checkpoint, and the per-tensor type choice of llama.cpp's quantizer, so that
// the file's tensors equal those of `convert_hf_to_gguf.py --outtype f32` then `llama-quantize`.
// Streamed: one tensor row at a time is decoded, transformed and quantized into the output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/quant.h"
#include "tessera/status.h"

namespace tessera {

class ThreadPool;

// The file types `tessera quantize --type` offers (llama.cpp's ftype numbers in general.file_type).
enum class QuantizeFileType { kQ8_0, kQ4_0, kQ4_K_M, kQ5_K_M };
// "q8_0", "q4_0", "q4_k_m", "q5_k_m" (case-insensitive); false for anything else.
bool ParseQuantizeFileType(std::string_view name, QuantizeFileType* out);
const char* QuantizeFileTypeName(QuantizeFileType t);
uint32_t LlamaFtype(QuantizeFileType t);  // 7, 2, 15, 17

// The element type of one stored tensor: block-quantized (quant != kNone) or plain dtype.
struct GgufElementType {
  QuantType quant = QuantType::kNone;
  DType dtype = DType::kF32;
  std::string Name() const;  // "q4_0", "f32", ...
  bool operator==(const GgufElementType& o) const {
    return quant == o.quant && (quant != QuantType::kNone || dtype == o.dtype);
  }
};

// One output tensor, in llama.cpp's names and GGUF's row-major shape ([out, in] for a matrix).
struct TensorPlan {
  std::string name;
  std::vector<int64_t> shape;
};

// The types llama.cpp's quantizer gives `tensors` for `type` (same order): 1-D tensors, norms and
// per_layer_model_proj stay f32; the output / tied embedding get Q6_K (Q8_0 when their rows are not
// whole blocks); Q4_K_M and Q5_K_M raise attn_v and ffn_down of the "more bits" layers to Q6_K; a row that is
// not whole blocks falls back (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16). `n_layers`: block_count.
// With experts (`n_experts` > 1) the "more bits" layer of an ffn_down is the one in its name, so a
// layer's dense ffn_down and its ffn_down_exps get the same type; the router stays f32. With exactly
// 8 experts attn_k / attn_v are Q8_0 and, at Q4_K_M, attn_output Q5_K (Q5_1 where its rows are not
// whole blocks).
std::vector<GgufElementType> ChooseTensorTypes(QuantizeFileType type, const std::vector<TensorPlan>& tensors,
                                               int64_t n_layers, int64_t n_experts = 0);

// llama.cpp's tensor order (its loader's): global tensors by name, then block by block, by name.
bool LlamaTensorOrderLess(const std::string& a, const std::string& b);

struct QuantizeReport {
  std::vector<TensorPlan> tensors;     // as written, in file order
  std::vector<GgufElementType> types;  // the type of each
};

// Reads the checkpoint directory `hf_dir` (config.json, model.safetensors[.index.json],
// tokenizer.model or tokenizer.json) and writes `out_path`. Errors name the directory or file and
// the field, tensor or value at fault (an unmappable tensor, a missing tokenizer, an unwritable path).
// `pool` (null: the calling thread only) quantizes each tensor's rows in parallel; the bytes do not
// depend on it.
StatusOr<QuantizeReport> QuantizeCheckpoint(const std::string& hf_dir, QuantizeFileType type,
                                            const std::string& out_path, ThreadPool* pool = nullptr);

}  // namespace tessera
