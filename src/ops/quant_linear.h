// Linear on block-quantized weights (WeightView::quant): the decode row-dot driver on int8
// activations (ops/quant_act.h, ops/quant_dot.h), the GEMM's weight packing that dequantizes
// blocks into its f32 panels, and the reference with the row-dot path's numerics.
#pragma once

#include <cstdint>

#include "ops/bf16_dot.h"
#include "tessera/linear.h"
#include "tessera/thread_pool.h"

namespace tessera::ops {

// LinearRowDot for quantized weights (any precision: the activations are quantized to int8
// either way, finer than bf16 rounding would make them). Each token's x is quantized once per
// call on the calling thread's stack, so in <= kMaxQuantRowDotIn (checked); each token's result
// does not depend on n or its position. scratch (optional, GemmScratchWords(n, w.in) words, Linear's
// x_pairs): where the kernel unpacks blocks once for several tokens, more tokens than the stack
// holds are quantized into it all at once, and the weights then stream once per block of tokens.
void QuantRowDot(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
                 ThreadPool* pool, uint32_t* scratch = nullptr);

// QuantRowDot for each job (count <= kMaxLinearJobs, every weight block-quantized) as one parallel
// loop over all the jobs' rows: each job's y the bits its own QuantRowDot gives (LinearBatch). A job
// of more tokens than QuantRowDot's stack holds runs as QuantRowDot(..., pool, scratch) of its own.
void QuantRowDotBatch(const LinearJob* jobs, int64_t count, ThreadPool* pool, uint32_t* scratch = nullptr);

// Depth of the GEMM's f32 k blocks for a quantized weight: as the f32 GEMM's (the fewest equal
// blocks of at most `most`), in whole quant blocks so each k block dequantizes whole blocks.
int64_t QuantBlockDepth(QuantType t, int64_t in, int64_t most);

// Dequantizes W[o0 .. o0 + nc, k0 .. k0 + kc) (k0, kc whole quant blocks, nc <= 64) into the GEMM's
// panels bp[p][k][16] (columns past nc zero), as PackBlock in gemm.cc does for stored dtypes.
void PackQuantBlock(const WeightView& w, int64_t o0, int64_t nc, int64_t k0, int64_t kc, float* bp);

// Dequantizes W[o0 .. o0 + nc, k0 .. k0 + kc) (whole quant blocks, kc <= 512, nc <= 128), rounds it
// to bf16 (F32ToBf16) and packs it as the bf16 dot product's pair panels bp[p][kc / 2][16]: the GEMM
// at precision bf16 on CPUs with the dot product, where both operands are bf16.
void PackQuantPairs(const Bf16DotKernels& dot, const WeightView& w, int64_t o0, int64_t nc, int64_t k0, int64_t kc,
                    uint32_t* bp);

// The row-dot path's numerics in plain loops: each token's x quantized per block as the kernels
// quantize it (QuantizeActivations), the weights dequantized by the reference DequantizeRow, the
// products summed per block in double and scaled by the activation block's scale in double. It
// differs from the exact integer block sums then scales only by DequantizeRow's f32 rounding of
// each K-quant weight (a relative 2^-24 at most; Q4_0 / Q5_0 / Q8_0 / Q6_K values are exact).
void LinearReferenceInt8(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y,
                         int64_t y_stride);

}  // namespace tessera::ops
