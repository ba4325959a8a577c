#include "onnx/heads_layout.h"

#include <algorithm>
#include <cstring>

#include "tessera/check.h"

namespace tessera::onnx {

void CopyHeadRows(const HeadsView& src, int64_t src_s0, const OutView& dst, int64_t dst_s0, int64_t b, int64_t h,
                  int64_t n) {
  TESSERA_CHECK(src.dtype == DType::kF32 && src.dim == dst.dim, "CopyHeadRows: f32 rows of equal width");
  const size_t row_bytes = static_cast<size_t>(dst.dim) * sizeof(float);
  for (int64_t s = 0; s < n; ++s) std::memcpy(dst.At(b, h, dst_s0 + s), src.At(b, h, src_s0 + s), row_bytes);
}

void ZeroHeadRows(const OutView& dst, int64_t s0, int64_t b, int64_t h, int64_t n) {
  for (int64_t s = 0; s < n; ++s) std::fill_n(dst.At(b, h, s0 + s), dst.dim, 0.0f);
}

void CopyRowsToCache(const HeadsView& src, int64_t src_s0, const CacheView& dst, int64_t dst_s0, int64_t b, int64_t h,
                     int64_t n) {
  TESSERA_CHECK(src.dim == dst.dim, "CopyRowsToCache: rows of equal width");
  const size_t row_bytes = static_cast<size_t>(dst.dim) * DTypeSize(dst.dtype);
  for (int64_t s = 0; s < n; ++s) {
    if (src.dtype == dst.dtype) {
      std::memcpy(dst.At(b, h, dst_s0 + s), src.At(b, h, src_s0 + s), row_bytes);
    } else {
      ConvertDType(src.dtype, src.At(b, h, src_s0 + s), dst.dtype, dst.At(b, h, dst_s0 + s),
                   static_cast<size_t>(dst.dim));
    }
  }
}

void ZeroCacheRows(const CacheView& dst, int64_t s0, int64_t b, int64_t h, int64_t n) {
  if (n > 0) std::memset(dst.At(b, h, s0), 0, static_cast<size_t>(n * dst.dim) * DTypeSize(dst.dtype));
}

}  // namespace tessera::onnx
