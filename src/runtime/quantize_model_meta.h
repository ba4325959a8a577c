// The metadata half of QuantizeCheckpoint (tessera/quantize.h), and quantize-on-load: the keys llama.cpp's converter
// writes for a Gemma 3 / Gemma 4 text model, and the tokenizer vocabulary from the checkpoint.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "model/weight_loader.h"
#include "tessera/thread_pool.h"
#include "tessera/gguf.h"
#include "tessera/quantize.h"

namespace tessera {

// Writes general.*, <arch>.* and tokenizer.ggml.* into `w`. `text_config` is the checkpoint's text
// config object (config.json, or its "text_config"). Sets *n_tokens to the vocabulary's size
// (the rows the converter keeps of the embedding).
Status WriteQuantizeMetadata(const std::string& dir, const model::ModelConfig& cfg, const nlohmann::json& text_config,
                             QuantizeFileType type, io::GgufWriter* w, int64_t* n_tokens);

// Quantize-on-load for the checkpoint directory `dir`: a WeightLoadOptions::rewrite_matrix that
// stores each matrix in the type QuantizeCheckpoint would write it in (same blocks, same bytes),
// its rows spread over `pool` (null: the calling thread), which must outlive the function.
StatusOr<decltype(model::WeightLoadOptions::rewrite_matrix)> QuantizeOnLoad(const std::string& dir,
                                                                            QuantizeFileType type, ThreadPool* pool);

// Quantize-on-load for a speculative drafter (LoadOptions::draft_quantize): every matrix whose rows
// are a whole number of 32-value blocks stored as `type`'s base block (q8_0: Q8_0, q4_0: Q4_0),
// the others as they are. Only q8_0 and q4_0 are taken (an error names the others).
StatusOr<decltype(model::WeightLoadOptions::rewrite_matrix)> QuantizeDrafterOnLoad(QuantizeFileType type,
                                                                                   ThreadPool* pool);

}  // namespace tessera
