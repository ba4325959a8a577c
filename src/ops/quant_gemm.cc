#include "ops/quant_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "ops/quant_act.h"
#include "ops/quant_dot.h"
#include "ops/quant_linear.h"
#include "tessera/check.h"
#include "tessera/dtype.h"

namespace tessera::ops {
namespace {

constexpr int64_t kMr = kQuantTileTokens;  // tokens per micro-tile
constexpr int64_t kNcQ = 64;    // output rows per work item (two panel pairs)
constexpr int64_t kKcQ = 2048;  // values per k block at most: 64 x 2048 code bytes, L2-resident
constexpr int64_t kMaxSub = kKcQ / 16;

std::atomic<bool> amx_enabled{true};

bool CpuHasKernel() {
  const char* want = std::getenv("TESSERA_SIMD");
  if (want && (std::strcmp(want, "generic") == 0 || std::strcmp(want, "avx2") == 0)) return false;
  return QuantDotAvx512() != nullptr;
}

uint16_t Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// Q4_K / Q5_K sub-block j's 6-bit scale and minimum from the 12 packed bytes (see quant_k.cc).
void ScaleMin(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63, *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 32-value formats: w = a * code + b with a = d and b = -offset * d (Q4_0 8, Q5_0 16, Q8_0 128
// for its top-bit-flipped codes) or b = m (Q4_1 / Q5_1), as DequantizeRow computes each value.
void Unpack32(QuantType t, const uint8_t* blk, uint8_t* c, float* a, float* b) {
  const float d = F16ToF32(Half(blk));
  if (t == QuantType::kQ8_0) {
    for (int l = 0; c && l < 32; ++l) c[l] = static_cast<uint8_t>(static_cast<int8_t>(blk[2 + l]) + 128);
    *a = d, *b = -128.0f * d;
    return;
  }
  const bool has_min = t == QuantType::kQ4_1 || t == QuantType::kQ5_1;
  const bool five = t == QuantType::kQ5_0 || t == QuantType::kQ5_1;
  const int head = has_min ? 4 : 2;  // d (and m) before qh / qs
  const uint8_t* qs = blk + head + (five ? 4 : 0);
  uint32_t qh = 0;
  if (five) std::memcpy(&qh, blk + head, 4);
  for (int l = 0; c && l < 16; ++l) {
    c[l] = static_cast<uint8_t>((qs[l] & 15) | (((qh >> l) & 1) << 4));
    c[l + 16] = static_cast<uint8_t>((qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4));
  }
  *a = d;
  *b = has_min ? F16ToF32(Half(blk + 2)) : -(five ? 16.0f : 8.0f) * d;
}

// A Q4_K / Q5_K super-block: 8 sub-blocks of 32 (chunk c: low nibbles then high nibbles of qs[32c..]).
void UnpackK45(QuantType t, const uint8_t* blk, uint8_t* c, float* a, float* b) {
  const float d = F16ToF32(Half(blk)), dmin = F16ToF32(Half(blk + 2));
  const uint8_t* scales = blk + 4;
  const bool five = t == QuantType::kQ5_K;
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (five ? 48 : 16);
  for (int ch = 0; ch < 4; ++ch) {
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * ch + h;
      int sc, m;
      ScaleMin(j, scales, &sc, &m);
      a[j] = d * static_cast<float>(sc), b[j] = -(dmin * static_cast<float>(m));
      for (int l = 0; c && l < 32; ++l) {
        const int lo = h ? qs[32 * ch + l] >> 4 : qs[32 * ch + l] & 15;
        c[32 * j + l] = static_cast<uint8_t>(lo | ((five && ((qh[l] >> j) & 1)) ? 16 : 0));
      }
    }
  }
}

// A Q6_K super-block: 16 sub-blocks of 16, codes 0..63 with offset 32.
void UnpackQ6K(const uint8_t* blk, uint8_t* c, float* a, float* b) {
  const uint8_t* ql = blk;
  const uint8_t* qh = blk + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
  const float d = F16ToF32(Half(blk + 208));
  for (int half = 0; c && half < 2; ++half, ql += 64, qh += 32, c += 128) {
    for (int l = 0; l < 32; ++l) {
      c[l] = static_cast<uint8_t>((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4));
      c[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4));
      c[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      c[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
  for (int g = 0; g < 16; ++g) a[g] = d * static_cast<float>(sc[g]), b[g] = -32.0f * a[g];
}

}  // namespace

void QuantizeResidual(const float* x, const ActBlock32* blocks, int64_t nb, int64_t sub, int8_t* hi, int8_t* lo,
                      float* xd, float* xs, float xs_scale) {
  for (int64_t j = 0; j < nb; ++j, x += 32, hi += 32, lo += 32) {
    const float d = blocks[j].d, dl = d * (1.0f / 256);
    std::memcpy(hi, blocks[j].q, 32);
    for (int64_t l = 0; l < 32; ++l) {
      // Round to nearest even by the 1.5 * 2^23 trick (|v| <= 128.5 here); zero and NaN scales give 0.
      const float v = dl > 0 ? (x[l] - d * static_cast<float>(blocks[j].q[l])) / dl : 0.0f;
      const float r = (v + 12582912.0f) - 12582912.0f;
      lo[l] = static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, r)));
    }
    xd[j] = dl;
    for (int64_t s0 = 0; s0 < 32; s0 += sub) {
      int32_t sum = 0;
      for (int64_t l = s0; l < s0 + sub; ++l) sum += 256 * blocks[j].q[l] + lo[l];
      xs[(32 * j + s0) / sub] = dl * static_cast<float>(sum) * xs_scale;
    }
  }
}

namespace {

// Quantizes token row x into its scratch row (layout in quant_gemm.h): q_hi per 32 values as
// QuantizeActivations (the decode kernels' bytes), then the residual (QuantizeResidual).
void QuantizeRow(const QuantDotKernels& dq, const float* x, int64_t in, int64_t sub, float xs_scale, char* row) {
  constexpr int64_t kChunk = 1024;
  alignas(64) char tmp[kChunk / 32 * sizeof(ActBlock32)];
  int8_t* hi = reinterpret_cast<int8_t*>(row);
  int8_t* lo = hi + in;
  float* xd = reinterpret_cast<float*>(row + 2 * in);
  float* xs = xd + in / 32;
  for (int64_t k0 = 0; k0 < in; k0 += kChunk) {
    const int64_t kc = std::min(kChunk, in - k0);
    dq.quantize_act(QuantType::kQ8_0, x + k0, kc, tmp);
    // QuantizeRow runs only where QuantGemm does: on CPUs with the AVX-512 kernels.
    QuantizeResidualAvx512(x + k0, reinterpret_cast<const ActBlock32*>(tmp), kc / 32, sub, hi + k0, lo + k0,
                           xd + k0 / 32, xs + k0 / sub, xs_scale);
  }
}

// One activation byte: the row quantized exactly as QuantizeActivations(t) quantizes it for the
// decode row-dot (32-value blocks, or 256 for the K-quants), into q_hi, with xd per 32 values =
// the block's d and xs per sub-block = d sum(q) times QuantGemmXsScale(t), from the sums the
// blocks carry (a 32-value block's sum, a 256-value block's per 16). q_lo stays unwritten: the
// one-byte tile skips it.
void QuantizeRowOneByte(const QuantDotKernels& dq, QuantType t, const float* x, int64_t in, int64_t sub, char* row) {
  const float scale = QuantGemmXsScale(t);
  constexpr int64_t kChunk = 1024;  // whole blocks of 32 and of 256
  alignas(64) char tmp[kChunk / 32 * sizeof(ActBlock32)];
  static_assert(kChunk / 256 * sizeof(ActBlock256) <= sizeof(tmp));
  int8_t* hi = reinterpret_cast<int8_t*>(row);
  float* xd = reinterpret_cast<float*>(row + 2 * in);
  float* xs = xd + in / 32;
  const int64_t be = ActBlockElems(t);
  for (int64_t k0 = 0; k0 < in; k0 += kChunk) {
    const int64_t kc = std::min(kChunk, in - k0);
    dq.quantize_act(t, x + k0, kc, tmp);
    for (int64_t j = 0; j < kc / be; ++j) {
      const int64_t i0 = k0 + be * j;
      if (be == 32) {  // the 32-value formats: sub = 32
        const auto& blk = reinterpret_cast<const ActBlock32*>(tmp)[j];
        std::memcpy(hi + i0, blk.q, 32);
        xd[i0 / 32] = blk.d, xs[i0 / 32] = blk.d * static_cast<float>(blk.sum) * scale;
        continue;
      }
      const auto& blk = reinterpret_cast<const ActBlock256*>(tmp)[j];
      std::memcpy(hi + i0, blk.q, 256);
      for (int64_t l = 0; l < 256; l += 32) xd[(i0 + l) / 32] = blk.d;
      for (int64_t s0 = 0; s0 < 256; s0 += sub) {
        int32_t sum = 0;
        for (int64_t g = s0 / 16; g < (s0 + sub) / 16; ++g) sum += blk.bsums[g];
        xs[(i0 + s0) / sub] = blk.d * static_cast<float>(sum) * scale;
      }
    }
  }
}

struct Item {
  int64_t o0, nc, t_begin, t_end;
};

// Packs rows [o0, o0 + nc) of k block [k0, k0 + kc) into panels: codes [P][kc / 4][16][4], a and b
// [P][kc / sub][16], P = nc rounded up to 32, / 16 (rows past nc are zero).
void PackPanels(const WeightView& w, int64_t o0, int64_t nc, int64_t k0, int64_t kc, int64_t sub, uint8_t* codes,
                float* a, float* b) {
  alignas(64) uint8_t rows[16][kKcQ];  // a panel's codes row by row, then transposed into place
  const int64_t panels = (nc + 31) / 32 * 2, groups = kc / sub, row_bytes = QuantRowBytes(w.quant, w.in);
  for (int64_t p = 0; p < panels; ++p) {
    const int live = static_cast<int>(std::clamp<int64_t>(nc - p * 16, 0, 16));
    const char* first = static_cast<const char*>(w.data) + (live ? (o0 + p * 16) * row_bytes : 0);
    float* pa = a + p * groups * 16;
    float* pb = b + p * groups * 16;
    UnpackScalesAvx512(w.quant, first, row_bytes, live, k0, kc, pa, pb);
    for (int r = 0; r < 16; ++r) {
      if (r < live) {
        UnpackCodesAvx512(w.quant, first + r * row_bytes, k0, kc, rows[r]);
      } else {
        std::memset(rows[r], 0, kc);
      }
    }
    TransposeCodesAvx512(rows[0], kKcQ, kc, codes + p * kc * 16);
  }
}

// Token rows t .. t + mr of the scratch at k block k0, as the VNNI micro-tile reads them.
QuantTile TileRows(const char* xq, int64_t stride, int64_t in, int64_t sub, int64_t k0, int64_t t, int mr) {
  QuantTile tile;
  for (int r = 0; r < mr; ++r) {
    const char* row = xq + (t + r) * stride;
    tile.hi[r] = reinterpret_cast<const int8_t*>(row) + k0;
    tile.lo[r] = tile.hi[r] + in;
    tile.xd[r] = reinterpret_cast<const float*>(row + 2 * in) + k0 / 32;
    tile.xs[r] = reinterpret_cast<const float*>(row + 2 * in) + in / 32 + k0 / sub;
  }
  return tile;
}

// Tokens in whole AMX tiles of 16 go to QuantGemmTileAmx, the rest 4 at a time to the VNNI tile:
// the same bits either way, so a token's result does not depend on which tile took it.
void RunItem(const WeightView& w, const char* xq, int64_t stride, int64_t sub, float* y, int64_t y_stride,
             const Item& it, bool amx, QuantActBytes bytes, bool centered) {
  alignas(64) uint8_t codes[kNcQ * kKcQ];
  alignas(64) float a[kNcQ * kMaxSub], b[kNcQ * kMaxSub];
  const int64_t depth = std::min<int64_t>(QuantBlockDepth(w.quant, w.in, kKcQ), kKcQ);
  for (int64_t k0 = 0; k0 < w.in; k0 += depth) {
    const int64_t kc = std::min(depth, w.in - k0), groups = kc / sub;
    PackPanels(w, it.o0, it.nc, k0, kc, sub, codes, a, b);
    int64_t t = it.t_begin;
    for (; amx && it.t_end - t >= kQuantAmxTokens; t += kQuantAmxTokens) {
      const QuantAmxRows rows{xq + t * stride, stride, w.in, k0};
      for (int64_t j = 0; j < it.nc; j += 16)
        QuantGemmTileAmx(rows, codes + j * kc, a + j * groups, b + j * groups, kc, sub, y + t * y_stride + it.o0 + j,
                         y_stride, static_cast<int>(std::min<int64_t>(16, it.nc - j)), k0 > 0, centered);
    }
    for (; t < it.t_end; t += kMr) {
      const int mr = static_cast<int>(std::min(kMr, it.t_end - t));
      const QuantTile tile = TileRows(xq, stride, w.in, sub, k0, t, mr);
      for (int64_t j = 0; j < it.nc; j += 32) {
        const int64_t p = j / 16;
        QuantGemmTileAvx512(tile, mr, codes + p * kc * 16, a + p * groups * 16, b + p * groups * 16, kc, sub,
                            y + t * y_stride + it.o0 + j, y_stride, static_cast<int>(std::min<int64_t>(32, it.nc - j)),
                            k0 > 0, bytes, centered);
      }
    }
  }
  if (amx) QuantAmxRelease();
}

}  // namespace

int64_t QuantGemmSubBlock(QuantType t) { return t == QuantType::kQ6_K ? 16 : 32; }

float QuantGemmXsScale(QuantType t) {
  switch (t) {  // b / a, as the unpackers form b
    case QuantType::kQ4_0: return -8.0f;
    case QuantType::kQ5_0: return -16.0f;
    case QuantType::kQ8_0: return -128.0f;  // its codes' top bit flipped
    case QuantType::kQ6_K: return -32.0f;
    default: return 1.0f;  // a minimum of its own: b stays in the tile
  }
}

int64_t QuantGemmRowBytes(int64_t in) { return (2 * in + 4 * (in / 32) + 4 * (in / 16) + 63) / 64 * 64; }

bool QuantGemmAvailable(QuantType t) {
  static const bool cpu = CpuHasKernel();
  return cpu && t != QuantType::kNone;
}

bool QuantGemmAmxActive() {
  static const bool cpu = CpuHasKernel() && AmxInt8Usable();
  return cpu && amx_enabled.load(std::memory_order_relaxed);
}

void EnableQuantGemmAmx(bool on) { amx_enabled.store(on, std::memory_order_relaxed); }

void UnpackQuantCodes(QuantType t, const void* row, int64_t k0, int64_t kc, uint8_t* codes, float* a, float* b) {
  const int64_t be = QuantBlockElems(t), bb = QuantBlockBytes(t), sub = QuantGemmSubBlock(t);
  TESSERA_CHECK(k0 % be == 0 && kc % be == 0, "UnpackQuantCodes: k range must be whole blocks");
  const uint8_t* blk = static_cast<const uint8_t*>(row) + k0 / be * bb;
  for (int64_t i = 0; i < kc / be; ++i, blk += bb, codes += codes ? be : 0, a += be / sub, b += be / sub) {
    switch (t) {
      case QuantType::kQ4_0:
      case QuantType::kQ5_0:
      case QuantType::kQ8_0:
      case QuantType::kQ4_1:
      case QuantType::kQ5_1: Unpack32(t, blk, codes, a, b); break;
      case QuantType::kQ4_K:
      case QuantType::kQ5_K: UnpackK45(t, blk, codes, a, b); break;
      case QuantType::kQ6_K: UnpackQ6K(blk, codes, a, b); break;
      default: TESSERA_CHECK(false, "UnpackQuantCodes: not a block-quantized type"); break;
    }
  }
}

bool SameQuantizedX(QuantType a, QuantType b, QuantActBytes bytes) {
  // The rows depend on the sub-block and the scale of xs; with one byte also on the activation
  // block the row dots quantize with (32 or 256 values, QuantizeRowOneByte).
  return QuantGemmSubBlock(a) == QuantGemmSubBlock(b) && QuantGemmXsScale(a) == QuantGemmXsScale(b) &&
         (bytes == QuantActBytes::kTwo || ActBlockElems(a) == ActBlockElems(b));
}

void QuantGemm(const WeightView& w, const float* x, int64_t n, int64_t x_stride, float* y, int64_t y_stride,
               ThreadPool* pool, uint32_t* scratch, QuantActBytes bytes, bool x_ready) {
  TESSERA_CHECK(QuantGemmAvailable(w.quant), "QuantGemm: no int8 GEMM kernel for this CPU or type");
  TESSERA_CHECK(w.in % QuantBlockElems(w.quant) == 0, "QuantGemm: quantized weight rows must be whole blocks");
  const int64_t sub = QuantGemmSubBlock(w.quant), stride = QuantGemmRowBytes(w.in);
  char* xq = reinterpret_cast<char*>(scratch);
  const QuantDotKernels& dq = QuantDot();
  const bool one = bytes == QuantActBytes::kOne;
  auto quantize = [&](int64_t t, int) {
    if (one) return QuantizeRowOneByte(dq, w.quant, x + t * x_stride, w.in, sub, xq + t * stride);
    QuantizeRow(dq, x + t * x_stride, w.in, sub, QuantGemmXsScale(w.quant), xq + t * stride);
  };
  const int threads = pool ? pool->num_threads() : 1;
  // Q6_K's 16-value sub-blocks fill a quarter of a tile product's depth and double the f32 steps per
  // value: there the AMX tile measured no faster than the VNNI one (bench/results/quant_prefill.md).
  // The AMX tile takes two activation bytes only; one byte stays on the VNNI tile.
  const bool amx = QuantGemmAmxActive() && sub == 32 && !one;
  const int64_t col_blocks = (w.out + kNcQ - 1) / kNcQ, tiles = (n + kMr - 1) / kMr;
  const int64_t row_blocks = std::min<int64_t>(tiles, std::max<int64_t>(1, (2 * threads + col_blocks - 1) / col_blocks));
  const int64_t tiles_per_block = (tiles + row_blocks - 1) / row_blocks;
  auto run = [&](int64_t item, int) {
    const int64_t cb = item % col_blocks, rb = item / col_blocks;
    const int64_t o0 = cb * kNcQ, t_begin = rb * tiles_per_block * kMr;
    RunItem(w, xq, stride, sub, y, y_stride,
            Item{o0, std::min(kNcQ, w.out - o0), t_begin, std::min(n, t_begin + tiles_per_block * kMr)}, amx, bytes,
            QuantGemmXsScale(w.quant) != 1.0f);
  };
  if (pool) {
    if (!x_ready) pool->ParallelFor(n, quantize);
    pool->ParallelFor(col_blocks * row_blocks, run);
  } else {
    for (int64_t t = 0; !x_ready && t < n; ++t) quantize(t, 0);
    for (int64_t i = 0; i < col_blocks * row_blocks; ++i) run(i, 0);
  }
}

}  // namespace tessera::ops
