// Activations quantized to int8 per block for the quantized Linear's integer dot products (decode):
// each token row is quantized once per call, then every weight row's blocks are dotted against it
// in integers and scaled once per block. Weights of Q4_0 / Q5_0 / Q8_0 / Q4_1 / Q5_1 pair with 32-value blocks,
// the K-quants with 256-value blocks carrying sums of each 16 values (the weight's offsets and
// minimums are then one multiply per sub-block instead of one per value).
#pragma once

#include <cstdint>

#include "tessera/quant.h"

namespace tessera::ops {

// 32 values: x[i] ~ d * q[i]; sum = sum of q (for the weight formats' offset of 8 or 16, or minimum).
struct ActBlock32 {
  float d;
  int32_t sum;
  int8_t q[32];
};
// 256 values: x[i] ~ d * q[i]; bsums[j] = sum of q[16j .. 16j + 16).
struct ActBlock256 {
  float d;
  int16_t bsums[16];
  int8_t q[256];
};
static_assert(sizeof(ActBlock32) == 40 && sizeof(ActBlock256) == 292);

// Values per activation block for weights of type t (32 or 256; 0 for kNone).
int64_t ActBlockElems(QuantType t);
// Bytes of one token row of `in` values quantized for weights of type t.
int64_t ActRowBytes(QuantType t, int64_t in);

// Quantizes x[0, in) (in a multiple of ActBlockElems(t)) into ActRowBytes(t, in) bytes at dst:
// per block d = amax / 127 and q = nearest integer (ties to even) of x / d, so |q| <= 127 (the
// integer kernels' unsigned x signed byte products then never saturate) and |x - d q| <= d / 2.
// The scale stays f32 (ggml rounds the 32-block's to f16; f32 is exact at no cost here). A block
// holding NaN or +-inf gets d = NaN and q = 0, so its outputs are NaN, never a finite guess.
void QuantizeActivations(QuantType t, const float* x, int64_t in, void* dst);

}  // namespace tessera::ops
