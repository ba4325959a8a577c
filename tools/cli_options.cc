// Engine options several commands share (tessera run, tessera serve): the session's shape and
// precisions, and how the weights load.
#include <algorithm>

#include "cli.h"

namespace tessera::cli {

Status ParseEngineOptions(const Args& a, SessionOptions* opt, LoadOptions* load) {
  StatusOr<int64_t> ctx = a.Int("max-context", 4096), chunk = a.Int("max-chunk", 256),
                    threads = a.Int("threads", DefaultThreadCount());
  for (const Status& s : {ctx.status(), chunk.status(), threads.status()}) TESSERA_RETURN_IF_ERROR(s);
  opt->max_context = ctx.value();
  opt->max_chunk = std::min(chunk.value(), ctx.value());
  if (!ParseMode(a.Get("mode", "unified"), &opt->mode))
    return InvalidArgument("--mode must be unified, bias or split, got '" + a.Get("mode") + "'");
  if (!ParseDType(a.Get("kv-dtype", "f32"), &opt->kv_dtype)) return InvalidArgument("--kv-dtype must be f32, bf16 or f16");
  if (!ParseAttentionPrecision(a.Get("attention-precision", "f32"), &opt->attention_precision))
    return InvalidArgument("--attention-precision must be f32 or bf16, got '" + a.Get("attention-precision") + "'");
  if (!ops::ParseMatmulPrecision(a.Get("matmul-precision", "f32"), &opt->matmul_precision))
    return InvalidArgument("--matmul-precision must be f32, bf16 or int8, got '" + a.Get("matmul-precision") + "'");
  // Linear matrices repacked at load into the GEMM's panels, unless --no-repack: they are then read
  // in place (mapped), which loads faster and prefills slower (bench/BENCHMARKS.md "Repacking at load").
  load->repack_for = a.Has("no-repack") ? std::nullopt : std::optional(opt->matmul_precision);
  load->threads = threads.value();
  if (a.Has("dtype")) {
    DType d;
    if (!ParseDType(a.Get("dtype"), &d))
      return InvalidArgument("--dtype must be f32, bf16 or f16, got '" + a.Get("dtype") + "'");
    load->convert_to = d;
  }
  if (a.Has("quantize")) {
    QuantizeFileType q;
    if (!ParseQuantizeFileType(a.Get("quantize"), &q))
      return InvalidArgument("--quantize must be q8_0, q4_0, q4_k_m or q5_k_m, got '" + a.Get("quantize") + "'");
    load->quantize = q;
  }
  return Status::Ok();
}

}  // namespace tessera::cli
