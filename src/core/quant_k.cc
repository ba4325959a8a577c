// The K-quants (256-value super-blocks): Q4_K, Q5_K, Q6_K. Dequantization and the scale search of
// llama.cpp's reference quantizers without an importance matrix, each product and sum in ggml's
// order (built with -ffp-contract=off) so the bytes match its quantizer's.
#include <cmath>
#include <cstring>

#include "core/quant_internal.h"
#include "tessera/dtype.h"

namespace tessera::quant_detail {

namespace {

constexpr int kQK = 256;
// Below this magnitude a group counts as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Sub-block j's 6-bit scale and min from the 12 packed bytes: j < 4 in the low six bits of bytes
// j and j + 4; j >= 4 split into a low nibble in byte j + 4 and two high bits atop bytes j - 4 / j.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void PackScaleMinK4(int j, uint8_t ls, uint8_t lm, uint8_t* q) {
  if (j < 4) {
    q[j] = ls;
    q[j + 4] = lm;
  } else {
    q[j + 4] = static_cast<uint8_t>((ls & 0xf) | ((lm & 0xf) << 4));
    q[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
    q[j] |= static_cast<uint8_t>((lm >> 4) << 6);
  }
}

inline int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Weighted squared error of levels L under x ~ scale * L + min.
float LevelError(int n, const float* x, const float* w, const uint8_t* L, float scale, float min) {
  float err = 0;
  for (int i = 0; i < n; ++i) {
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = diff * diff;
    err += w[i] * diff;
  }
  return err;
}

// ggml's make_qkx2_quants (squared error): an asymmetric fit x ~ scale * L + min with L in
// [0, nmax] and min <= 0. Starts from the min/max grid, then tries nstep + 1 widened grids, each
// refit by weighted least squares, and keeps the best. Returns scale; *neg_min = -min.
float FitScaleMin(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                  float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
  float best_error = LevelError(n, x, w, L, scale, min);
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float cur_error = LevelError(n, x, w, aux, this_scale, this_min);
    if (cur_error < best_error) {
      std::memcpy(L, aux, static_cast<size_t>(n));
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// sum(w x l) and sum(w l^2) for the symmetric levels round(iscale * x) in [-nmax, nmax - 1], with
// the weight w = x^2 (ggml's make_qx_quants, rmse_type 1). Levels go to L (offset by nmax) if given.
void SymmetricSums(int n, int nmax, const float* x, float iscale, int8_t* L, float* sumlx, float* suml2) {
  float slx = 0, sl2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    if (L != nullptr) L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    slx += w * x[i] * fl;
    sl2 += w * fl * fl;
  }
  *sumlx = slx;
  *suml2 = sl2;
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights: a symmetric scale for levels
// in [-nmax, nmax - 1], the best of 19 grids around -nmax / max by the weighted fit's gain.
float FitSymmetricScale(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float sumlx, suml2;
  SymmetricSums(n, nmax, x, static_cast<float>(-nmax) / max, L, &sumlx, &suml2);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    SymmetricSums(n, nmax, x, iscale, nullptr, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      SymmetricSums(n, nmax, x, iscale, L, &sumlx, &suml2);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// The shared front half of Q4_K and Q5_K: fit each 32-value sub-block (levels into L), quantize
// the eight scales and mins to 6 bits against the block's largest, write d, dmin and the packed
// scales, then requantize every value against its sub-block's final scale and min.
void QuantizeKBlock(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out, uint16_t* dmin_out,
                    uint8_t* packed, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = FitScaleMin(32, nmax, xs, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    PackScaleMinK4(j, ls < 63 ? ls : 63, lm < 63 ? lm : 63, packed);
  }
  *d_out = F32ToF16(max_scale / 63.f);
  *dmin_out = F32ToF16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, packed, &sc, &m);
    const float d = F16ToF32(*d_out) * static_cast<float>(sc);
    if (d == 0) continue;  // keeps the fit's levels, as ggml does
    const float dm = F16ToF32(*dmin_out) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] = static_cast<uint8_t>(Clamp(NearestInt((x[32 * j + ii] + dm) / d), 0, nmax));
    }
  }
}

}  // namespace

void DequantizeQ4_K(const void* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ4_K b = LoadBlock<BlockQ4_K>(x, i);
    const float d = F16ToF32(b.d);
    const float min = F16ToF32(b.dmin);
    const uint8_t* q = b.qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      ScaleMinK4(2 * c, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      ScaleMinK4(2 * c + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xf) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantizeQ5_K(const void* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ5_K b = LoadBlock<BlockQ5_K>(x, i);
    const float d = F16ToF32(b.d);
    const float min = F16ToF32(b.dmin);
    const uint8_t* ql = b.qs;
    const uint8_t* qh = b.qh;
    uint8_t u1 = 1, u2 = 2;
    for (int c = 0; c < 4; ++c, ql += 32) {
      uint8_t sc, m;
      ScaleMinK4(2 * c, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      ScaleMinK4(2 * c + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void DequantizeQ6_K(const void* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ6_K b = LoadBlock<BlockQ6_K>(x, i);
    const float d = F16ToF32(b.d);
    const uint8_t* ql = b.ql;
    const uint8_t* qh = b.qh;
    const int8_t* sc = b.scales;
    // Each 128-value half: value l of quarter k has low nibble in ql (k odd: high nibble) and two
    // high bits at bit 2k of qh[l].
    for (int n = 0; n < kQK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void QuantizeQ4_K(const float* x, void* y, int64_t nb) {
  uint8_t L[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    BlockQ4_K b;
    QuantizeKBlock(x, 15, -1.f, 20, &b.d, &b.dmin, b.scales, L);
    uint8_t* q = b.qs;
    for (int j = 0; j < kQK; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
    StoreBlock(y, i, b);
  }
}

void QuantizeQ5_K(const float* x, void* y, int64_t nb) {
  uint8_t L[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    BlockQ5_K b;
    QuantizeKBlock(x, 31, -0.5f, 15, &b.d, &b.dmin, b.scales, L);
    uint8_t* qh = b.qh;
    uint8_t* ql = b.qs;
    std::memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j], l2 = L[n + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
    StoreBlock(y, i, b);
  }
}

namespace {

// Q6_K's scales: 16 symmetric sub-block fits, then an int8 scale per sub-block against the one of
// largest magnitude (which gets -128 before the clamp to 127), and the levels redone against them.
// False for an all-zero block, which is written as zeros.
bool QuantizeQ6KScales(const float* x, BlockQ6_K* y, int8_t* L) {
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = FitSymmetricScale(16, 32, x + 16 * ib, L + 16 * ib);
    const float abs_scale = std::fabs(scales[ib]);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scales[ib];
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(y, 0, sizeof(BlockQ6_K));
    y->d = F32ToF16(0.f);
    return false;
  }
  const float iscale = -128.f / max_scale;
  y->d = F32ToF16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) {
    const int s = NearestInt(iscale * scales[ib]);
    y->scales[ib] = static_cast<int8_t>(s < 127 ? s : 127);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = F16ToF32(y->d) * static_cast<float>(y->scales[j]);
    if (d == 0) continue;  // keeps the fit's levels, as ggml does
    for (int ii = 0; ii < 16; ++ii) {
      L[16 * j + ii] = static_cast<int8_t>(Clamp(NearestInt(x[16 * j + ii] / d), -32, 31) + 32);
    }
  }
  return true;
}

}  // namespace

void QuantizeQ6_K(const float* x, void* y, int64_t nb) {
  int8_t L[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    BlockQ6_K b;
    if (!QuantizeQ6KScales(x, &b, L)) {
      StoreBlock(y, i, b);
      continue;
    }
    uint8_t* ql = b.ql;
    uint8_t* qh = b.qh;
    for (int j = 0; j < kQK; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int a = L[j + l], b2 = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((a & 0xf) | ((c & 0xf) << 4));
        ql[l + 32] = static_cast<uint8_t>((b2 & 0xf) | ((e & 0xf) << 4));
        qh[l] = static_cast<uint8_t>((a >> 4) | ((b2 >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
      }
    }
    StoreBlock(y, i, b);
  }
}

}  // namespace tessera::quant_detail
