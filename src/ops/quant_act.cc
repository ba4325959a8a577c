#include "ops/quant_act.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace tessera::ops {
namespace {

// One block: its scale and values; false (d = NaN, q = 0) where a value is not finite.
template <int N>
float QuantizeBlock(const float* x, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < N; ++i) {
    amax = std::fmax(amax, std::fabs(x[i]));
    finite &= std::isfinite(x[i]);
  }
  if (!finite) {
    std::memset(q, 0, N);
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < N; ++i) {
    // Adding 1.5 * 2^23 rounds to an integer, ties to even, as nearbyint does (|v| <= 127 here),
    // and vectorizes where the libm call would not. x * id <= 127 (1 + 2^-23); the clamp is for
    // that last ulp only.
    const float v = (x[i] * id + 12582912.0f) - 12582912.0f;
    q[i] = static_cast<int8_t>(std::fmax(-127.0f, std::fmin(127.0f, v)));
  }
  return d;
}

}  // namespace

int64_t ActBlockElems(QuantType t) {
  switch (t) {
    case QuantType::kQ4_0:
    case QuantType::kQ5_0:
    case QuantType::kQ8_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_1: return 32;
    case QuantType::kQ4_K:
    case QuantType::kQ5_K:
    case QuantType::kQ6_K: return 256;
    default: return 0;
  }
}

int64_t ActRowBytes(QuantType t, int64_t in) {
  const int64_t e = ActBlockElems(t);
  if (e == 0) return 0;
  return in / e * (e == 32 ? int64_t(sizeof(ActBlock32)) : int64_t(sizeof(ActBlock256)));
}

void QuantizeActivations(QuantType t, const float* x, int64_t in, void* dst) {
  if (ActBlockElems(t) == 32) {
    auto* b = static_cast<ActBlock32*>(dst);
    for (int64_t i = 0; i < in / 32; ++i, x += 32) {
      b[i].d = QuantizeBlock<32>(x, b[i].q);
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += b[i].q[j];
      b[i].sum = s;
    }
    return;
  }
  auto* b = static_cast<ActBlock256*>(dst);
  for (int64_t i = 0; i < in / 256; ++i, x += 256) {
    b[i].d = QuantizeBlock<256>(x, b[i].q);
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int k = 0; k < 16; ++k) s += b[i].q[16 * j + k];
      b[i].bsums[j] = static_cast<int16_t>(s);
    }
  }
}

}  // namespace tessera::ops
