// The precision a Linear's products are taken at: the one choice of the matmul layer that callers
// above the kernels (sessions, the CLI, Python) make.
#pragma once

#include <string_view>

namespace tessera::ops {

// kBf16: each x element is rounded to bf16 (nearest, ties to even) before its products, as a bf16
// model's matmul inputs are; the weights must be bf16. Products are then exact in f32 and sums run
// in f32. On CPUs with AVX-512-BF16 the prefill GEMM runs on its dot product (twice the FMA rate);
// elsewhere the same rounded values go through the f32 kernels.
enum class MatmulPrecision { kF32, kBf16 };
// "f32"/"float32" or "bf16"/"bfloat16"; false for anything else.
bool ParseMatmulPrecision(std::string_view name, MatmulPrecision* out);

}  // namespace tessera::ops
