// The precision a Linear's products are taken at: the one choice of the matmul layer that callers
// above the kernels (sessions, the CLI, Python) make.
#pragma once

#include <string_view>

namespace tessera::ops {

// kBf16: each x element is rounded to bf16 (nearest, ties to even) before its products, as a bf16
// model's matmul inputs are; the weights must be bf16. Products are then exact in f32 and sums run
// in f32. On CPUs with AVX-512-BF16 the prefill GEMM runs on its dot product (twice the FMA rate);
// elsewhere the same rounded values go through the f32 kernels.
// kInt8: block-quantized weights (GGUF types) multiply x quantized to one int8 per value, per block
// of 32 values (256 for the K-quants), in prefill as in decode (llama.cpp's numerics, its scales
// kept in f32): half the integer products of kF32's prefill, which keeps two bytes per value. Only
// where the int8 GEMM runs (AVX-512 VNNI); elsewhere prefill keeps x exact on dequantized panels.
// Weights that are not block-quantized are multiplied as at kF32 (docs/quantization.md).
enum class MatmulPrecision { kF32, kBf16, kInt8 };
// "f32"/"float32", "bf16"/"bfloat16" or "int8"; false for anything else.
bool ParseMatmulPrecision(std::string_view name, MatmulPrecision* out);

// The precision a matrix that is not block-quantized takes under `p` (kInt8 means kF32 there).
constexpr MatmulPrecision ForFloatWeights(MatmulPrecision p) {
  return p == MatmulPrecision::kInt8 ? MatmulPrecision::kF32 : p;
}

}  // namespace tessera::ops
