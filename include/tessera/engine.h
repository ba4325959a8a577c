// The engine's public API: load a checkpoint, open a session over one pre-allocated KV cache,
// prefill, decode and generate with a streaming callback. Serving many requests over one cache,
// each in its own rows (slots), is tessera/requests.h. The CLI, the Python module and the
// benchmarks use only the headers in include/tessera/ (docs/architecture.md, "The public API").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/attention.h"
#include "tessera/dtype.h"
#include "tessera/image.h"
#include "tessera/precision.h"
#include "tessera/quantize.h"
#include "tessera/sampling.h"
#include "tessera/status.h"
#include "tessera/tokenizer_vocab.h"
#include "tessera/thread_pool.h"

namespace tessera {

namespace model {
class Drafter;
class LoadedModel;
}
namespace runtime {
class Session;
class RequestRunner;
}

// How a session evaluates the mask and keeps its KV (docs/runtime.md "Modes"). All modes produce
// the same tokens; they differ in cost.
enum class Mode {
  kUnified,  // structured masks, one in-place cache for prefill and decode (the engine's way)
  kBias,     // the exporter fallback: dense float bias + "past + new -> present" cache, every step
  kSplit,    // prefill as kBias, hand the KV over to the in-place cache once, decode as kUnified
};
const char* ModeName(Mode m);
bool ParseMode(const std::string& name, Mode* out);

struct SessionOptions {
  int64_t max_batch = 1;
  int64_t max_context = 4096;  // tokens per row (prompt + generated)
  int64_t max_chunk = 256;     // prefill chunk; also sizes the sliding-window rings
  DType kv_dtype = DType::kF32;
  // bf16: attention rounds q and the softmax weights to bf16 (AttentionPrecision; needs kv_dtype
  // bf16): twice the arithmetic rate on CPUs with AVX-512-BF16, a bf16 model's rounding.
  AttentionPrecision attention_precision = AttentionPrecision::kF32;
  // bf16: every Linear rounds its input to bf16 (needs bf16 weights, as real Gemma checkpoints
  // store them): prefill's GEMM at twice the FMA rate on AVX-512-BF16. int8: block-quantized
  // weights take one int8 per input value in prefill too, as decode does (tessera/precision.h).
  ops::MatmulPrecision matmul_precision = ops::MatmulPrecision::kF32;
  Mode mode = Mode::kUnified;  // kBias / kSplit need prompts of equal length (one concat length)
  bool all_logits = false;     // Prefill may return logits for every prompt token (sizes a
                               // [max_batch * max_chunk, vocab] buffer; off for generation)
  // Speculative decoding (docs/speculative.md): a verification step of row 0 returns logits for
  // up to this many tokens (draft tokens + 1; sizes a [verify_tokens, vocab] buffer). 0: none.
  int64_t verify_tokens = 0;
};

// One row's prompt. Token types (HF token_type_ids / mm_token_type_ids) mark image tokens; each
// maximal run of block-forming types is one image block. Tokens whose id is one of the model's
// image placeholder ids take the next row of image_embeds instead of their embedding.
struct Prompt {
  std::vector<int32_t> tokens;
  std::vector<int32_t> token_types;     // empty, or one per token
  const float* image_embeds = nullptr;  // [image_rows, hidden] f32, owned by the caller
  int64_t image_rows = 0;
};

struct LoadOptions {
  std::optional<DType> convert_to;  // convert the weight matrices on load; empty: keep as stored
  // Repack every Linear matrix once at load into the panels the GEMM reads at this precision
  // (faster prefill, slower load); empty: read the weights as stored (mapped).
  std::optional<ops::MatmulPrecision> repack_for = ops::MatmulPrecision::kF32;
  // Threads for loading and, by default, for every session of the model. 0: one per core.
  int64_t threads = 0;
  // A pool to use instead of starting one (not owned; must outlive the model).
  ThreadPool* pool = nullptr;
  // Quantize a checkpoint directory's matrices at load, as `tessera quantize` would store them
  // (docs/quantizing.md); empty: as stored. Not for a GGUF, whose types are the file's.
  std::optional<QuantizeFileType> quantize;
  // A Gemma 4 assistant checkpoint directory (model_type gemma4_assistant) to load beside the
  // model as its drafter for speculative decoding (GenerateOptions::draft_tokens,
  // docs/speculative.md); empty: none.
  std::string draft;
  // The drafter's matrices quantized at load, q8_0 or q4_0 (its layers, head, projections; a
  // matrix whose rows are not whole 32-value blocks stays as stored); empty: as stored. This
  // changes what it proposes, never the output, which verification decides.
  std::optional<QuantizeFileType> draft_quantize;
};

// What a caller needs to know of a model without its internals.
struct LayerInfo {
  std::string kind;       // "full" or "sliding"
  int64_t kv_heads = 0, head_dim = 0, window = 0;
  bool has_v_proj = true;  // false: V is the raw k_proj output (attention_k_eq_v)
  bool shared_kv = false;  // reads an earlier layer's K/V
  int64_t rotary_pairs = 0;
  std::string mask;        // the layer's mask rule, e.g. "window & (causal | image)"
};

struct ModelInfo {
  std::string model_type;
  int64_t vocab = 0, hidden = 0, q_heads = 0, ple_dim = 0;
  std::vector<LayerInfo> layers;
  std::vector<int32_t> eos_token_ids;    // the config's end-of-sequence ids (default stop tokens)
  std::vector<int32_t> image_token_ids;  // placeholder ids that take image_embeds rows
  // Special ids from the config, where it has them.
  std::optional<int32_t> bos_token_id, pad_token_id, image_token_id, boi_token_id, eoi_token_id, video_token_id,
      audio_token_id, boa_token_id, eoa_token_id;
  bool repacked = false;  // the Linear weights were repacked at load (LoadOptions::repack_for)
  bool draft = false;     // a drafter was loaded beside the model (LoadOptions::draft)
  float attention_scale = 1.0f;   // scores scale (Gemma 3: query_pre_attn_scalar^-1/2; Gemma 4: 1)
  float final_softcap = 0.0f;     // final logit soft cap (0: none)
  bool gguf = false;              // loaded from a GGUF file
  // GGUF only: each value the file does not hold and how it was inferred (docs/gguf-models.md).
  std::vector<std::string> inferred;
};

// Why a row stopped generating.
enum class FinishReason {
  kStop,       // produced a stop token (kept as the row's last token)
  kLength,     // reached max_new_tokens
  kContext,    // reached the session's max_context
  kCancelled,  // the callback returned false, or the cancel flag was set
};
const char* FinishReasonName(FinishReason r);

// Called as each token is chosen, before the next step runs: (row, token). Returning false stops
// that row (FinishReason::kCancelled); the other rows go on.
using TokenCallback = std::function<bool(int64_t row, int32_t token)>;

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // generation of a row ends after one of these
  TokenCallback on_token;            // optional streaming
  // Optional; set from any thread to stop every row at the next step (or prefill chunk) boundary.
  const std::atomic<bool>* cancel = nullptr;
  // Speculative decoding (docs/speculative.md): the model's drafter proposes this many tokens per
  // step and the model verifies them in one step; greedy: the tokens of plain decoding; sampling:
  // distributed as plain sampling's. Needs a drafter (LoadOptions::draft), one prompt and a session with
  // verify_tokens >= draft_tokens + 1. 0: plain decoding.
  int64_t draft_tokens = 0;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;     // summed over rows
  int64_t generated_tokens = 0;  // summed over rows
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;      // forward passes after the prefill
  // Speculative decoding only: tokens the drafter proposed, and how many the model accepted;
  // draft_seconds: the part of decode_seconds spent in the drafter's steps.
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  double draft_seconds = 0;
};

struct RowOutput {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kLength;
};

struct GenerateOutput {
  std::vector<RowOutput> rows;
  GenerateStats stats;
};

// Memory a session holds, by purpose (bytes).
struct SessionMemory {
  size_t kv_cache = 0, activations = 0, planned_total = 0;
};

class Session;

// Images to soft tokens (docs/images.md). The encoder runs at this matmul precision (kBf16 needs
// bf16 vision weights, as real checkpoints store them).
struct EncodeOptions {
  // Soft tokens per image for the Gemma 4 families (70, 140, 280, 560 or 1120); 0: the
  // checkpoint's processor config. Gemma 3 has one fixed count.
  int64_t image_tokens = 0;
  ops::MatmulPrecision matmul_precision = ops::MatmulPrecision::kF32;
};

struct ImageFeatures {
  std::vector<float> rows;  // [sum of tokens_per_image, hidden] f32: the prompt's image rows in order
  int64_t hidden = 0;
  std::vector<int64_t> tokens_per_image;
};

// KV cache memory of the reference Gemma-12B shapes (`tessera kv-memory`), at bf16, batch 1.
enum class ReferenceShape { kGemma4_12B, kGemma3_12B };
struct KvMemoryReport {
  size_t bytes = 0;
  std::string per_layer;  // a table: layer, kind, store, owner, slots, MiB
};
StatusOr<KvMemoryReport> ReferenceKvMemory(ReferenceShape shape, int64_t context, int64_t max_chunk);

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& dir, const LoadOptions& options = {});

  const ModelInfo& info() const { return info_; }
  // The vocabulary a GGUF carries (tokenizer.ggml.*), for tokenizer::Tokenizer::FromVocab; an
  // error for a checkpoint directory (its tokenizer is tokenizer.model) or a GGUF without one.
  StatusOr<tokenizer::TokenizerVocab> TokenizerVocab() const;
  // The pool sessions use by default (the one given in LoadOptions, or the model's own).
  ThreadPool& pool() const { return *pool_; }

  // Checks that a session of `options` is valid for this model and fits the memory the process
  // can use, without allocating it (so a loader can refuse impossible options early).
  Status CheckSession(const SessionOptions& options) const;
  StatusOr<std::unique_ptr<Session>> NewSession(const SessionOptions& options, ThreadPool* pool = nullptr) const;
  // Bytes the KV cache of a session with `options` allocates (planned, not allocated).
  StatusOr<size_t> KvCacheBytes(const SessionOptions& options) const;
  // The tiles (empty/full/partial) each layer's prefill attention sees for one prompt prefilled
  // in one chunk: the mask structure, computed from positions and blocks without any data.
  StatusOr<std::vector<TileCensus>> PrefillTiles(const Prompt& prompt) const;

  // Images to soft tokens: the checkpoint's processor, then its vision encoder. Thread-safe.
  StatusOr<ImageFeatures> EncodeImages(const std::vector<image::Image>& images, const EncodeOptions& options = {}) const;
  // The encoder alone, on processed pixels (image::ImageProcessor's output, or transformers').
  StatusOr<ImageFeatures> EncodePixels(const std::vector<image::PixelInput>& inputs,
                                       const EncodeOptions& options = {}) const;
  // The processor of the checkpoint (processor_config.json / preprocessor_config.json).
  StatusOr<const image::ImageProcessor*> ImageProcessor() const;
  // A prompt with images: every image marker in `tokens` (Gemma 3: the begin-of-image id; Gemma 4:
  // the image id) becomes begin-of-image, one image id per soft token, end-of-image (Gemma 3 also
  // puts `double_newline_id`, when given, on both sides, as its processor does). Without markers
  // the images go after a leading BOS. Tokens that already hold every soft token are kept as they
  // are. The prompt points into `features`, which must outlive it.
  StatusOr<Prompt> LayoutImagePrompt(const std::vector<int32_t>& tokens, const ImageFeatures& features,
                                     std::optional<int32_t> double_newline_id = std::nullopt) const;

  ~Model();

 private:
  friend class RequestBatch;  // tessera/requests.h: builds its session over the same model
  Model() = default;
  struct Vision;  // the processor and the encoders, made on first use (runtime/engine_vision.cc)
  std::unique_ptr<model::LoadedModel> loaded_;
  std::unique_ptr<model::Drafter> drafter_;  // LoadOptions::draft; null: none
  std::unique_ptr<Vision> vision_;
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  ModelInfo info_;
};

// One model, one KV cache and one set of activations, all allocated when the session is made.
// Prefill (chunked, image blocks never split) and decode run the same forward pass on the same
// in-place cache. Not thread-safe: one caller at a time per session (sessions are independent).
class Session {
 public:
  ~Session();

  // Prefills every row (row count <= max_batch) from an empty cache. last_logits: [B, vocab] of
  // each row's last prompt token. all_logits (optional): [B, S_max, vocab] for every prompt
  // token (needs SessionOptions::all_logits). hidden_after_layer (optional): [layers, S, hidden],
  // row 0's residual stream after each layer (needs every prompt to fit one chunk).
  Status Prefill(const std::vector<Prompt>& prompts, float* last_logits, float* all_logits = nullptr,
                 float* hidden_after_layer = nullptr);
  // One token per row (rows with active[b] == 0 append nothing; null: all rows); logits [B, vocab].
  Status Decode(const int32_t* tokens, const uint8_t* active, float* logits);
  // Speculative verification (docs/speculative.md): appends n tokens to row 0 of a one-row session
  // in one step (n <= SessionOptions::verify_tokens); logits [n, vocab] at each of them.
  Status Verify(const int32_t* tokens, int64_t n, float* logits);
  // Drops the last n tokens of row b (refused, changing nothing, where a sliding layer's ring no
  // longer holds what the shorter row needs).
  Status Rewind(int64_t b, int64_t n);
  // Prefill, then sample up to max_new_tokens per row until a stop token, streaming through
  // options.on_token. The one generation loop of the engine (runtime/generator.h).
  Status Generate(const std::vector<Prompt>& prompts, const GenerateOptions& options, GenerateOutput* out);

  // Called after each prefill chunk with (tokens done, tokens total) summed over rows.
  void set_progress(std::function<void(int64_t, int64_t)> fn);

  int64_t batch() const;           // rows of the last prefill
  int64_t position(int64_t b) const;  // tokens row b holds
  SessionMemory memory() const;
  const SessionOptions& options() const;

 private:
  friend class Model;
  Session(std::unique_ptr<runtime::Session> impl, const model::Drafter* drafter);
  std::unique_ptr<runtime::Session> impl_;
  const model::Drafter* drafter_ = nullptr;  // the model's, for GenerateOptions::draft_tokens
};

}  // namespace tessera
