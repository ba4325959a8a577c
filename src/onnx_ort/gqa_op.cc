#include "onnx_ort/gqa_op.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "onnx_ort/ort_api.h"
#include "tessera/aligned_buffer.h"
#include "tessera/onnx/group_query_attention.h"
#include "tessera/onnx/op_context.h"
#include "tessera/thread_pool.h"

namespace tessera::ort {
namespace {

// Inputs in schema order (docs/onnxruntime.md).
enum Input : size_t { kQuery, kKey, kValue, kPastKey, kPastValue, kSeqlensK, kTotalLength, kCos, kSin, kBlockIds, kInputs };
constexpr const char* kInputNames[kInputs] = {"query",     "key",       "value",    "past_key",  "past_value",
                                              "seqlens_k", "total_sequence_length", "cos_cache", "sin_cache",
                                              "block_ids"};
enum Output : size_t { kOutput, kPresentKey, kPresentValue, kOutputs };

#define TESSERA_ORT_RETURN(expr)           \
  do {                                     \
    if (OrtStatus* s_ = (expr)) return s_; \
  } while (0)

// One node of a session: its attributes, a thread pool and the scratch arenas. onnxruntime may
// run a session from several threads at once, so Compute holds `mu` while it uses the arenas.
class GqaKernel {
 public:
  explicit GqaKernel(const onnx::GroupQueryAttentionAttrs& attrs, std::unique_ptr<ThreadPool> pool)
      : attrs_(attrs), pool_(std::move(pool)) {}

  OrtStatus* Compute(OrtKernelContext* ctx) {
    onnx::GroupQueryAttentionInputs in;
    std::optional<onnx::TensorRef> t[kInputs];
    for (size_t i = 0; i < kInputs; ++i) TESSERA_ORT_RETURN(ReadInput(ctx, i, kInputNames[i], &t[i]));
    for (size_t i : {kQuery, kSeqlensK, kTotalLength})
      if (!t[i]) return Error(ORT_INVALID_ARGUMENT, std::string(kOpName) + ": input " + kInputNames[i] + " is required");
    in.query = *t[kQuery];
    in.key = t[kKey];
    in.value = t[kValue];
    in.past_key = t[kPastKey];
    in.past_value = t[kPastValue];
    in.seqlens_k = *t[kSeqlensK];
    in.total_sequence_length = *t[kTotalLength];
    in.cos_cache = t[kCos];
    in.sin_cache = t[kSin];
    in.block_ids = t[kBlockIds];

    // Present is [B, Hkv, max(total, C), D]: past's shape whenever it can hold the step, so with
    // IO binding of past's OrtValue to present (onnxruntime-genai's past_present_share_buffer)
    // onnxruntime hands over the past buffer itself, and the adapter then writes in place.
    StatusOr<onnx::GroupQueryAttentionShapes> shapes = onnx::InferGroupQueryAttentionShapes(in, attrs_, false);
    if (!shapes.ok()) return FromStatus(shapes.status());
    const onnx::GroupQueryAttentionShapes& s = shapes.value();
    onnx::GroupQueryAttentionOutputs out;
    TESSERA_ORT_RETURN(AllocateOutput(ctx, kOutput, "output", s.output, onnx::ElemType::kFloat32, &out.output));
    TESSERA_ORT_RETURN(AllocateOutput(ctx, kPresentKey, "present_key", s.present_key, onnx::ElemType::kFloat32,
                                      &out.present_key));
    TESSERA_ORT_RETURN(AllocateOutput(ctx, kPresentValue, "present_value", s.present_value,
                                      onnx::ElemType::kFloat32, &out.present_value));
    std::lock_guard<std::mutex> lock(mu_);
    onnx::OpContext op{{pool_.get(), &scratch_}, &index_scratch_, AttentionKernel::kAuto};
    return FromStatus(onnx::GroupQueryAttention(in, attrs_, out, op));
  }

 private:
  onnx::GroupQueryAttentionAttrs attrs_;
  std::unique_ptr<ThreadPool> pool_;
  std::mutex mu_;
  Arena scratch_, index_scratch_;
};

OrtStatus* ReadAttrs(const OrtKernelInfo* info, onnx::GroupQueryAttentionAttrs* a, int64_t* threads) {
  TESSERA_ORT_RETURN(IntAttr(info, "num_heads", 0, &a->num_heads));
  TESSERA_ORT_RETURN(IntAttr(info, "kv_num_heads", 0, &a->kv_num_heads));
  TESSERA_ORT_RETURN(IntAttr(info, "local_window_size", -1, &a->local_window_size));
  TESSERA_ORT_RETURN(FloatAttr(info, "scale", 0.0f, &a->scale));
  TESSERA_ORT_RETURN(FloatAttr(info, "softcap", 0.0f, &a->softcap));
  TESSERA_ORT_RETURN(IntAttr(info, "do_rotary", 0, &a->do_rotary));
  TESSERA_ORT_RETURN(IntAttr(info, "rotary_interleaved", 0, &a->rotary_interleaved));
  TESSERA_ORT_RETURN(IntAttr(info, "blocks_ignore_window", 0, &a->blocks_ignore_window));
  TESSERA_ORT_RETURN(IntAttr(info, "sliding_window_cache", 0, &a->sliding_window_cache));
  TESSERA_ORT_RETURN(IntAttr(info, "num_threads", 0, threads));
  // The adapter checks the values; checking here too makes a bad node fail at session creation.
  if (a->num_heads <= 0 || a->kv_num_heads <= 0 || a->num_heads % a->kv_num_heads != 0)
    return Error(ORT_INVALID_ARGUMENT, std::string(kOpName) + ": num_heads " + std::to_string(a->num_heads) +
                                           " and kv_num_heads " + std::to_string(a->kv_num_heads) +
                                           " must be > 0, num_heads a multiple of kv_num_heads");
  if (*threads < 0 || *threads > ThreadPool::kMaxThreads)
    return Error(ORT_INVALID_ARGUMENT, std::string(kOpName) + ": num_threads must be in [0, " +
                                           std::to_string(ThreadPool::kMaxThreads) + "], got " + std::to_string(*threads));
  return nullptr;
}

struct GqaOp : OrtCustomOp {
  GqaOp() {
    version = ORT_API_VERSION;
    GetName = [](const OrtCustomOp*) { return kOpName; };
    GetExecutionProviderType = [](const OrtCustomOp*) -> const char* { return nullptr; };  // CPU
    GetInputTypeCount = [](const OrtCustomOp*) -> size_t { return kInputs; };
    GetInputType = [](const OrtCustomOp*, size_t i) {
      return i == kSeqlensK || i == kTotalLength || i == kBlockIds ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32
                                                                   : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    };
    GetOutputTypeCount = [](const OrtCustomOp*) -> size_t { return kOutputs; };
    GetOutputType = [](const OrtCustomOp*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; };
    GetInputCharacteristic = [](const OrtCustomOp*, size_t i) {
      return i == kQuery || i == kSeqlensK || i == kTotalLength ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
    };
    GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
    GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
    GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
    GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
    CreateKernel = nullptr;
    KernelCompute = nullptr;
    CreateKernelV2 = [](const OrtCustomOp*, const OrtApi*, const OrtKernelInfo* info, void** kernel) -> OrtStatusPtr {
      onnx::GroupQueryAttentionAttrs attrs;
      int64_t threads = 0;
      TESSERA_ORT_RETURN(ReadAttrs(info, &attrs, &threads));
      if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
      StatusOr<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(threads);
      if (!pool.ok()) return FromStatus(pool.status());
      *kernel = new GqaKernel(attrs, std::move(pool.value()));
      return nullptr;
    };
    KernelComputeV2 = [](void* kernel, OrtKernelContext* ctx) -> OrtStatusPtr {
      return static_cast<GqaKernel*>(kernel)->Compute(ctx);
    };
    KernelDestroy = [](void* kernel) { delete static_cast<GqaKernel*>(kernel); };
    InferOutputShapeFn = nullptr;
    GetStartVersion = [](const OrtCustomOp*) { return 1; };
    GetEndVersion = [](const OrtCustomOp*) { return (1 << 30); };
    GetMayInplace = nullptr;
    ReleaseMayInplace = nullptr;
    GetAliasMap = nullptr;
    ReleaseAliasMap = nullptr;
  }
};

}  // namespace

OrtCustomOp* GqaCustomOp() {
  static GqaOp op;
  return &op;
}

}  // namespace tessera::ort
