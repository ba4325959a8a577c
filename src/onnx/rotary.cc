#include "onnx/rotary.h"

#include "tessera/check.h"

namespace tessera::onnx {

void RotateRows(const RotaryTables& t, const HeadsView& src, const int32_t* pos, float* dst) {
  TESSERA_CHECK(src.dtype == DType::kF32 && 2 * t.half <= src.dim, "RotateRows: f32 rows of at least R dims");
  const int64_t B = src.batch, H = src.heads, S = src.seq, D = src.dim, half = t.half;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float* c = t.cos + pos[b * S + s] * half;
      const float* n = t.sin + pos[b * S + s] * half;
      for (int64_t h = 0; h < H; ++h) {
        const float* x = reinterpret_cast<const float*>(src.At(b, h, s));
        float* y = dst + ((b * S + s) * H + h) * D;
        for (int64_t d = 2 * half; d < D; ++d) y[d] = x[d];
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = t.interleaved ? 2 * i : i, i2 = t.interleaved ? 2 * i + 1 : i + half;
          const float x1 = x[i1], x2 = x[i2];
          y[i1] = x1 * c[i] - x2 * n[i];
          y[i2] = x1 * n[i] + x2 * c[i];
        }
      }
    }
}

}  // namespace tessera::onnx
