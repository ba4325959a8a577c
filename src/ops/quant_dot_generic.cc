// The portable kernels: per block, the exact integer sums of ops/quant_dot.h in plain loops, then
// one f32 scale per block (two for the K-quants' scales and minimums).
#include <cstring>
#include <type_traits>

#include "ops/quant_act.h"
#include "ops/quant_dot.h"
#include "tessera/dtype.h"

namespace tessera::ops {
namespace {

// The 6-bit scale and minimum of sub-block j (< 8) of a Q4_K / Q5_K block's packed scales.
void ScaleMin(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63, *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

float DotQ4_0(const BlockQ4_0* w, const ActBlock32* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += (w[b].qs[j] & 15) * x[b].q[j] + (w[b].qs[j] >> 4) * x[b].q[j + 16];
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(s - 8 * x[b].sum);
  }
  return acc;
}

float DotQ5_0(const BlockQ5_0* w, const ActBlock32* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = (w[b].qs[j] & 15) | ((qh >> j) & 1) << 4, hi = (w[b].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
      s += lo * x[b].q[j] + hi * x[b].q[j + 16];
    }
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(s - 16 * x[b].sum);
  }
  return acc;
}

// Q4_1 / Q5_1 (qh null for Q4_1): x = d q + m, so a block is d dx (codes . q) + m (dx sum q).
template <typename B>
float DotMin(const B* w, const ActBlock32* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t qh = 0;
    if constexpr (std::is_same_v<B, BlockQ5_1>) std::memcpy(&qh, w[b].qh, 4);
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = (w[b].qs[j] & 15) | ((qh >> j) & 1) << 4, hi = (w[b].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
      s += lo * x[b].q[j] + hi * x[b].q[j + 16];
    }
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(s) + F16ToF32(w[b].m) * (x[b].d * static_cast<float>(x[b].sum));
  }
  return acc;
}

float DotQ8_0(const BlockQ8_0* w, const ActBlock32* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += w[b].qs[j] * x[b].q[j];
    acc += F16ToF32(w[b].d) * x[b].d * static_cast<float>(s);
  }
  return acc;
}

// Q4_K and Q5_K: sub-block j's value l is nibble (j & 1) of qs[32 (j / 2) + l], plus 16 times bit j
// of qh[l] for Q5_K (qh null for Q4_K). The block's term is dx (d I1 - dmin I2) with
// I1 = sum_j sc_j (codes . x of sub-block j) and I2 = sum_j m_j (sum of x in sub-block j).
float BlockK45(uint16_t d, uint16_t dmin, const uint8_t* scales, const uint8_t* qs, const uint8_t* qh,
               const ActBlock256& x) {
  int32_t i1 = 0, i2 = 0;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ScaleMin(scales, j, &sc, &m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j & 1);
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 15) | (qh ? ((qh[l] >> j) & 1) << 4 : 0);
      s += v * x.q[32 * j + l];
    }
    i1 += sc * s, i2 += m * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
  }
  return x.d * F16ToF32(d) * static_cast<float>(i1) - x.d * F16ToF32(dmin) * static_cast<float>(i2);
}

// Q6_K: value 128 h + 32 k + l (k < 4, l < 32) is the nibble (k / 2) of ql[64 h + 32 (k & 1) + l] plus
// 16 times bits 2k, 2k+1 of qh[32 h + l]; sub-block s (16 values) has scale sc[s], offset 32.
float BlockQ6K(const BlockQ6_K& w, const ActBlock256& x) {
  int32_t sums[16] = {};
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k) {
      const uint8_t* ql = w.ql + 64 * h + 32 * (k & 1);
      const uint8_t* qh = w.qh + 32 * h;
      const int8_t* xq = x.q + 128 * h + 32 * k;
      const int lo_shift = 4 * (k / 2), hi_shift = 2 * k;
      for (int half = 0; half < 2; ++half) {  // two 16-value sub-blocks
        int32_t s = 0;
        for (int l = 16 * half; l < 16 * half + 16; ++l)
          s += (((ql[l] >> lo_shift) & 15) | ((qh[l] >> hi_shift) & 3) << 4) * xq[l];
        sums[8 * h + 2 * k + half] = s;
      }
    }
  int32_t total = 0;
  for (int s = 0; s < 16; ++s) total += w.scales[s] * (sums[s] - 32 * x.bsums[s]);
  return x.d * F16ToF32(w.d) * static_cast<float>(total);
}

float DotRow(QuantType t, const void* w, const void* xq, int64_t nb) {
  switch (t) {
    case QuantType::kQ4_0: return DotQ4_0(static_cast<const BlockQ4_0*>(w), static_cast<const ActBlock32*>(xq), nb);
    case QuantType::kQ5_0: return DotQ5_0(static_cast<const BlockQ5_0*>(w), static_cast<const ActBlock32*>(xq), nb);
    case QuantType::kQ8_0: return DotQ8_0(static_cast<const BlockQ8_0*>(w), static_cast<const ActBlock32*>(xq), nb);
    case QuantType::kQ4_1: return DotMin(static_cast<const BlockQ4_1*>(w), static_cast<const ActBlock32*>(xq), nb);
    case QuantType::kQ5_1: return DotMin(static_cast<const BlockQ5_1*>(w), static_cast<const ActBlock32*>(xq), nb);
    default: break;
  }
  const auto* x = static_cast<const ActBlock256*>(xq);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    if (t == QuantType::kQ4_K) {
      const auto& k = static_cast<const BlockQ4_K*>(w)[b];
      acc += BlockK45(k.d, k.dmin, k.scales, k.qs, nullptr, x[b]);
    } else if (t == QuantType::kQ5_K) {
      const auto& k = static_cast<const BlockQ5_K*>(w)[b];
      acc += BlockK45(k.d, k.dmin, k.scales, k.qs, k.qh, x[b]);
    } else {
      acc += BlockQ6K(static_cast<const BlockQ6_K*>(w)[b], x[b]);
    }
  }
  return acc;
}

void DotRows(QuantType t, const void* w, int64_t w_stride, int64_t rows, const void* xq, int64_t nb, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = DotRow(t, static_cast<const char*>(w) + r * w_stride, xq, nb);
}

}  // namespace

const QuantDotKernels& QuantDotGeneric() {
  static const QuantDotKernels k{"generic", 1, DotRows, nullptr, QuantizeActivations, DequantizeRow, nullptr};
  return k;
}

}  // namespace tessera::ops
