// Rotary position embedding as com.microsoft.GroupQueryAttention applies it (do_rotary = 1) with
// its cos_cache / sin_cache inputs [max_position, R / 2], R <= head size: the first R dims of each
// head rotate by the angle of the token's position, the rest pass through.
//   interleaved: pairs (x[2i], x[2i + 1]); otherwise (x[i], x[i + R/2]), i < R/2; each pair becomes
//   (x1 cos - x2 sin, x1 sin + x2 cos) with cos = cos_cache[pos][i], sin = sin_cache[pos][i], in f32.
#pragma once

#include <cstdint>

#include "tessera/tensor_view.h"

namespace tessera::onnx {

struct RotaryTables {
  const float* cos = nullptr;  // [rows, half]
  const float* sin = nullptr;  // [rows, half]
  int64_t rows = 0, half = 0;  // half = R / 2
  bool interleaved = false;
};

// dst = src rotated: src is an f32 [B, heads, S, D] view, dst its contiguous [B, S, heads, D] copy;
// token (b, s) sits at pos[b * S + s], which must be in [0, rows).
void RotateRows(const RotaryTables& t, const HeadsView& src, const int32_t* pos, float* dst);

}  // namespace tessera::onnx
