// The K-quants (256-value super-blocks): Q4_K, Q5_K, Q6_K. Dequantization and the scale search of
// llama.cpp's reference quantizers without an importance matrix, each product and sum in ggml's
// order (built with -ffp-contract=off) so the bytes match its quantizer's.
#include <algorithm>
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

inline int Clamp(int v, int lo, int hi) { return std::min(std::max(v, lo), hi); }

// ggml's make_qkx2_quants (squared error) for the eight 32-value sub-blocks j of a K-quant block
// (values x[32j..], weights w[32j..]) at once: an asymmetric fit x ~ scale * L + min with L in
// [0, nmax] and min <= 0. Starts from the min/max grid, then tries nstep + 1 widened grids, each
// refit by weighted least squares, and keeps the best; a grid taken moves the offset the later
// grids use. Every sum and error is a serial chain over 32 values, so the sub-blocks go side by
// side (i outer, j inner), each lane doing ggml's operations in ggml's order: the same bits as one
// sub-block at a time, without waiting on each addition. scales[j] = scale, neg_mins[j] = -min.
struct ScaleMinFit {
  static constexpr int kSub = 8, kN = 32;
  int nmax;
  float x[kN][kSub] = {}, w[kN][kSub] = {};  // value i of sub-block j at [i][j]: the lanes' loops run over j
  float min[kSub] = {}, max[kSub] = {}, sum_w[kSub] = {}, sum_x[kSub] = {}, scale[kSub] = {}, best[kSub] = {};
  bool live[kSub] = {};  // max > min (else the levels are 0 and the scale 0)

  int Level(int j, int i, float iscale) const { return Clamp(NearestInt(iscale * (x[i][j] - min[j])), 0, nmax); }

  void Start(uint8_t* L) {
    for (int j = 0; j < kSub; ++j) min[j] = max[j] = x[0][j], sum_w[j] = w[0][j], sum_x[j] = sum_w[j] * x[0][j];
    for (int i = 1; i < kN; ++i) {
      for (int j = 0; j < kSub; ++j) {
        const float xi = x[i][j], wi = w[i][j];
        if (xi < min[j]) min[j] = xi;
        if (xi > max[j]) max[j] = xi;
        sum_w[j] += wi;
        sum_x[j] += wi * xi;
      }
    }
    float iscale[kSub];
    for (int j = 0; j < kSub; ++j) {
      if (min[j] > 0) min[j] = 0;
      live[j] = max[j] != min[j];
      iscale[j] = live[j] ? static_cast<float>(nmax) / (max[j] - min[j]) : 0.f;
      scale[j] = live[j] ? 1 / iscale[j] : 0.f;
    }
    for (int i = 0; i < kN; ++i) {
      for (int j = 0; j < kSub; ++j) {
        const int l = live[j] ? Level(j, i, iscale[j]) : 0;
        L[kN * j + i] = static_cast<uint8_t>(l);
        float diff = scale[j] * static_cast<float>(l) + min[j] - x[i][j];
        diff = diff * diff;
        best[j] += w[i][j] * diff;
      }
    }
  }

  // Widened grid `is`: each live sub-block takes it where its refit exists and errs less.
  void Grid(int is, float rmin, float rdelta, uint8_t* L) {
    float iscale[kSub], sum_l[kSub] = {}, sum_l2[kSub] = {}, sum_xl[kSub] = {}, err[kSub] = {};
    float this_scale[kSub], this_min[kSub];
    float aux[kN][kSub];  // the levels, exact as floats
    const float top = rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax);
    for (int j = 0; j < kSub; ++j) iscale[j] = live[j] ? top / (max[j] - min[j]) : 0.f;
    for (int i = 0; i < kN; ++i) {
      for (int j = 0; j < kSub; ++j) {
        const float fl = static_cast<float>(Level(j, i, iscale[j])), wi = w[i][j];
        aux[i][j] = fl;
        sum_l[j] += wi * fl;
        sum_l2[j] += wi * fl * fl;
        sum_xl[j] += wi * fl * x[i][j];
      }
    }
    bool fits[kSub];
    for (int j = 0; j < kSub; ++j) {
      const float D = sum_w[j] * sum_l2[j] - sum_l[j] * sum_l[j];
      fits[j] = live[j] && D > 0;
      this_scale[j] = this_min[j] = 0;
      if (!fits[j]) continue;
      this_scale[j] = (sum_w[j] * sum_xl[j] - sum_x[j] * sum_l[j]) / D;
      this_min[j] = (sum_l2[j] * sum_x[j] - sum_l[j] * sum_xl[j]) / D;
      if (this_min[j] > 0) this_min[j] = 0, this_scale[j] = sum_xl[j] / sum_l2[j];
    }
    for (int i = 0; i < kN; ++i) {
      for (int j = 0; j < kSub; ++j) {
        float diff = this_scale[j] * aux[i][j] + this_min[j] - x[i][j];
        diff = diff * diff;
        err[j] += w[i][j] * diff;
      }
    }
    for (int j = 0; j < kSub; ++j) {
      if (!fits[j] || !(err[j] < best[j])) continue;
      for (int i = 0; i < kN; ++i) L[kN * j + i] = static_cast<uint8_t>(aux[i][j]);
      best[j] = err[j], scale[j] = this_scale[j], min[j] = this_min[j];
    }
  }
};

void FitScaleMins(const float* x, const float* w, int nmax, float rmin, float rdelta, int nstep, uint8_t* L,
                  float* scales, float* neg_mins) {
  constexpr int kSub = ScaleMinFit::kSub, kN = ScaleMinFit::kN;
  ScaleMinFit fit{nmax};
  for (int j = 0; j < kSub; ++j)
    for (int i = 0; i < kN; ++i) fit.x[i][j] = x[kN * j + i], fit.w[i][j] = w[kN * j + i];
  fit.Start(L);
  for (int is = 0; is <= nstep; ++is) fit.Grid(is, rmin, rdelta, L);
  for (int j = 0; j < kSub; ++j) scales[j] = fit.scale[j], neg_mins[j] = -fit.min[j];
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights: a symmetric scale for levels
// in [-nmax, nmax - 1], the best of 19 grids around -nmax / max by the weighted fit's gain (weight
// w = x^2). Each grid's sums sum(w x l) and sum(w l^2) are serial chains, so the grids run side by
// side, each summed in ggml's order (the same bits as one at a time); the choice then goes through
// them in ggml's order.
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
  constexpr int kGrids = 19;  // -nmax / max, then -(nmax + 0.1 is) / max for is = -9..9 but 0
  float iscale[kGrids], sumlx[kGrids] = {}, suml2[kGrids] = {};
  iscale[0] = static_cast<float>(-nmax) / max;
  for (int g = 1, is = -9; is <= 9; ++is)
    if (is != 0) iscale[g++] = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
  for (int i = 0; i < n; ++i) {
    const float w = x[i] * x[i], wx = w * x[i];
    for (int g = 0; g < kGrids; ++g) {
      const float fl = static_cast<float>(Clamp(NearestInt(iscale[g] * x[i]), -nmax, nmax - 1));
      sumlx[g] += wx * fl;
      suml2[g] += w * fl * fl;
    }
  }
  float scale = suml2[0] != 0 ? sumlx[0] / suml2[0] : 0.0f;
  float best = scale * sumlx[0];
  int chosen = 0;
  for (int g = 1; g < kGrids; ++g) {
    if (suml2[g] > 0 && sumlx[g] * sumlx[g] > best * suml2[g]) {
      scale = sumlx[g] / suml2[g];
      best = scale * sumlx[g];
      chosen = g;
    }
  }
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<int8_t>(Clamp(NearestInt(iscale[chosen] * x[i]), -nmax, nmax - 1) + nmax);
  return scale;
}

// The shared front half of Q4_K and Q5_K: fit each 32-value sub-block (levels into L), quantize
// the eight scales and mins to 6 bits against the block's largest, write d, dmin and the packed
// scales, then requantize every value against its sub-block's final scale and min.
void QuantizeKBlock(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out, uint16_t* dmin_out,
                    uint8_t* packed, uint8_t* L) {
  float scales[8], mins[8], weights[256];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[32 * j + l] = av_x + std::fabs(xs[l]);
  }
  FitScaleMins(x, weights, nmax, rmin, 0.1f, nstep, L, scales, mins);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
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
