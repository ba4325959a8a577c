// AMX implementation of ops/bf16_amx_attention.h, compiled with the AMX and AVX-512 flags and
// called only where AmxAttentionUsable() holds.
#include "ops/bf16_amx_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/amx_tile_config.h"

namespace tessera::ops {
namespace {

// Scratch layout (AmxAttentionScratchBytes, bytes): A tiles of the weights [2][16 rows][16 words];
// B tiles of V [2 key halves][2 column blocks][16 pair rows][16 words]; the last partial 16-pair
// step's B (q) [16][16] and A (K) [4][16][16] words; the partial 16-key block's rows [16][d] bf16.
constexpr int64_t kWeightsOffset = 0, kVOffset = 2048, kQTailOffset = 6144, kKTailOffset = 7168,
                  kPadOffset = 11264;

// Tile t: rows[t] rows of colsb[t] bytes (64 where not given; 0 rows: unused). Loaded only if the
// core holds another configuration: reading it back and comparing costs a fraction of a load,
// and a full panel's scores and P.V share one, so a tile loop loads it once. (The core's own
// state is read, not a cached flag: other AMX kernels load and release theirs on the same thread.)
void Configure(const int (&rows)[8], const int (&colsb)[8] = {64, 64, 64, 64, 64, 64, 64, 64}) {
  AmxTileConfig cfg, now;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(rows[t]);
    cfg.colsb[t] = static_cast<uint16_t>(rows[t] > 0 ? colsb[t] : 0);
  }
  _tile_storeconfig(&now);
  if (std::memcmp(&now, &cfg, sizeof cfg) != 0) _tile_loadconfig(&cfg);
}

// Lines of a PrefetchRows asked into L2 a few at a time (Issue(k): the next k), so the DRAM
// requests of the rows ahead flow under the tile arithmetic instead of in one burst.
class Lines {
 public:
  explicit Lines(const PrefetchRows* pf) {
    if (pf == nullptr || pf->rows <= 0) return;
    row_ = static_cast<const char*>(pf->first), stride_ = pf->stride, row_bytes_ = pf->row_bytes;
    left_ = pf->rows * ((pf->row_bytes + 63) / 64);
  }
  int64_t PerCall(int64_t calls) const { return (left_ + calls - 1) / calls; }
  void Issue(int64_t k) {
    for (; k > 0 && left_ > 0; --k, --left_) {
      _mm_prefetch(row_ + offset_, _MM_HINT_T1);
      if ((offset_ += 64) >= row_bytes_) offset_ = 0, row_ += stride_;
    }
  }

 private:
  const char* row_ = nullptr;
  int64_t stride_ = 0, row_bytes_ = 0, offset_ = 0, left_ = 0;
};

// Where each 16-key block's A rows come from: in place, or the padded copy (row stride in bytes);
// and the sources of the last partial 16-pair step (null: none), zero-padded copies.
struct KeyBlocks {
  const char* a[4];
  int64_t stride[4];
  const uint32_t *q_tail = nullptr, *k_tail = nullptr;
};

// Tiles 0-3: C of key blocks 0-3; 4 and 6: A (K rows), alternating so a load need not wait for the
// product reading the other; 5: B (the q panel's 16 pairs of a step).
template <int kBlocks>
inline void ScoreStep(const uint32_t* q, const char* const (&a)[4], const int64_t (&stride)[4]) {
  _tile_loadd(5, q, 64);
  _tile_loadd(4, a[0], stride[0]);
  _tile_dpbf16ps(0, 4, 5);
  if constexpr (kBlocks > 1) {
    _tile_loadd(6, a[1], stride[1]);
    _tile_dpbf16ps(1, 6, 5);
  }
  if constexpr (kBlocks > 2) {
    _tile_loadd(4, a[2], stride[2]);
    _tile_dpbf16ps(2, 4, 5);
  }
  if constexpr (kBlocks > 3) {
    _tile_loadd(6, a[3], stride[3]);
    _tile_dpbf16ps(3, 6, 5);
  }
}

template <int kBlocks>
void ScoreTiles(const uint32_t* qp, int64_t steps, const KeyBlocks& kb, float* out, Lines& feed) {
  _tile_zero(0);
  if constexpr (kBlocks > 1) _tile_zero(1);
  if constexpr (kBlocks > 2) _tile_zero(2);
  if constexpr (kBlocks > 3) _tile_zero(3);
  const int64_t per_step = feed.PerCall(std::max<int64_t>(1, steps));
  for (int64_t s = 0; s < steps; ++s) {
    const char* a[4];
    for (int b = 0; b < 4; ++b) a[b] = kb.a[b] + s * 64;
    ScoreStep<kBlocks>(qp + s * 256, a, kb.stride);
    feed.Issue(per_step);
  }
  if (kb.q_tail) {
    const char* a[4];
    for (int b = 0; b < 4; ++b) a[b] = reinterpret_cast<const char*>(kb.k_tail + b * 256);
    ScoreStep<kBlocks>(kb.q_tail, a, {64, 64, 64, 64});
  }
  feed.Issue(per_step);
  _tile_stored(0, out, 64);
  if constexpr (kBlocks > 1) _tile_stored(1, out + 256, 64);
  if constexpr (kBlocks > 2) _tile_stored(2, out + 512, 64);
  if constexpr (kBlocks > 3) _tile_stored(3, out + 768, 64);
}

// Transposes 16 x 16 32-bit words: out[r] word p = in[p] word r. Words within 128-bit lanes
// first (32-bit, then 64-bit interleaves), then the lanes across vectors.
void Transpose16(__m512i (&x)[16]) {
  __m512i a[16];
  for (int i = 0; i < 16; i += 2) {
    a[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
    a[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // b[i + k], lane L: column 4L + k, rows i..i+3
    x[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]);
    x[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
    x[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]);
    x[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512i c0 = _mm512_shuffle_i32x4(x[k], x[4 + k], 0x44), c1 = _mm512_shuffle_i32x4(x[k], x[4 + k], 0xee);
    const __m512i c2 = _mm512_shuffle_i32x4(x[8 + k], x[12 + k], 0x44);
    const __m512i c3 = _mm512_shuffle_i32x4(x[8 + k], x[12 + k], 0xee);
    a[k] = _mm512_shuffle_i32x4(c0, c2, 0x88), a[4 + k] = _mm512_shuffle_i32x4(c0, c2, 0xdd);
    a[8 + k] = _mm512_shuffle_i32x4(c1, c3, 0x88), a[12 + k] = _mm512_shuffle_i32x4(c1, c3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) x[i] = a[i];
}

// The weights as A rows: a[h][r][j] = w[(16h + j) * 16 + r] (key pair 16h + j of row r), zero
// for pairs past `pairs`; rows r < mr.
void WeightRows(const uint32_t* w, int pairs, int halves, int mr, uint32_t* a) {
  for (int h = 0; h < halves; ++h) {
    __m512i x[16];
    for (int p = 0; p < 16; ++p)
      x[p] = 16 * h + p < pairs ? _mm512_load_si512(w + (16 * h + p) * 16) : _mm512_setzero_si512();
    Transpose16(x);
    for (int r = 0; r < mr; ++r) _mm512_store_si512(a + (h * 16 + r) * 16, x[r]);
  }
}

// V's rows [0, 32 * halves) at columns [c0, c0 + ncols), ncols <= 32, as B tiles: pair row p of
// half h, block b holds (v[2p'][c], v[2p' + 1][c]) for p' = 16h + p and the block's 16 columns c,
// zero past ncols. A key past n or outside `keys` is a zero row, never read.
void PackV(const uint16_t* v, int64_t v_stride, int n, uint64_t keys, int64_t c0, int ncols, int halves,
           uint32_t* vb) {
  alignas(64) static constexpr uint16_t kLo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                   8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                   24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo_idx = _mm512_load_si512(kLo), hi_idx = _mm512_load_si512(kHi);
  const __mmask32 cols = ncols >= 32 ? ~__mmask32{0} : (__mmask32{1} << ncols) - 1;
  auto row = [&](int t) {
    const bool live = t < n && (keys >> t & 1u);
    return live ? _mm512_maskz_loadu_epi16(cols, v + t * v_stride + c0) : _mm512_setzero_si512();
  };
  for (int p = 0; p < 16 * halves; ++p) {
    const __m512i a = row(2 * p), b = row(2 * p + 1);
    uint32_t* dst = vb + (p / 16) * 512 + (p % 16) * 16;
    _mm512_store_si512(dst, _mm512_permutex2var_epi16(a, lo_idx, b));
    if (ncols > 16) _mm512_store_si512(dst + 256, _mm512_permutex2var_epi16(a, hi_idx, b));
  }
}

// One chunk of 16 * kBlocks output columns: C (tiles 0, 1) from c and back, plus the weights
// (A tiles 2, 3: key halves) times V's pairs (B tiles 4, 5 for half 0; 6, 7 for half 1).
template <int kBlocks, int kHalves>
void PvChunk(float* c, int64_t cs_bytes, const uint32_t* vb) {
  _tile_loadd(0, c, cs_bytes);
  if constexpr (kBlocks > 1) _tile_loadd(1, c + 16, cs_bytes);
  _tile_loadd(4, vb, 64);
  _tile_dpbf16ps(0, 2, 4);
  if constexpr (kBlocks > 1) {
    _tile_loadd(5, vb + 256, 64);
    _tile_dpbf16ps(1, 2, 5);
  }
  if constexpr (kHalves > 1) {
    _tile_loadd(6, vb + 512, 64);
    _tile_dpbf16ps(0, 3, 6);
    if constexpr (kBlocks > 1) {
      _tile_loadd(7, vb + 768, 64);
      _tile_dpbf16ps(1, 3, 7);
    }
  }
  _tile_stored(0, c, cs_bytes);
  if constexpr (kBlocks > 1) _tile_stored(1, c + 16, cs_bytes);
}

void RunPvChunk(int blocks, int halves, float* c, int64_t cs_bytes, const uint32_t* vb) {
  if (blocks == 2) return halves == 2 ? PvChunk<2, 2>(c, cs_bytes, vb) : PvChunk<2, 1>(c, cs_bytes, vb);
  return halves == 2 ? PvChunk<1, 2>(c, cs_bytes, vb) : PvChunk<1, 1>(c, cs_bytes, vb);
}

}  // namespace

void AmxScores16(const uint32_t* qp, int64_t pairs, const uint16_t* k, int64_t k_stride, int n, float* out,
                 const PrefetchRows* ahead, void* scratch) {
  char* base = static_cast<char*>(scratch);
  const int64_t steps = pairs / 16, rem = pairs % 16, whole = steps * 32;  // whole: elements of full steps
  const int blocks = (n + 15) / 16, tail = n % 16;
  KeyBlocks kb;
  for (int b = 0; b < 4; ++b) {  // (blocks past n: never loaded)
    kb.a[b] = reinterpret_cast<const char*>(k + 16 * std::min(b, blocks - 1) * k_stride);
    kb.stride[b] = k_stride * 2;
  }
  if (tail && steps) {  // the full steps of the last block's rows, zeros past n
    uint16_t* pad = reinterpret_cast<uint16_t*>(base + kPadOffset);
    for (int r = 0; r < 16; ++r) {
      if (r < tail)
        std::memcpy(pad + r * whole, k + (16 * (blocks - 1) + r) * k_stride, whole * 2);
      else
        std::memset(pad + r * whole, 0, whole * 2);
    }
    kb.a[blocks - 1] = reinterpret_cast<const char*>(pad), kb.stride[blocks - 1] = whole * 2;
  }
  if (rem) {  // the last rem pairs of q and of every key row, zero-padded to a step
    uint32_t* q_tail = reinterpret_cast<uint32_t*>(base + kQTailOffset);
    uint32_t* k_tail = reinterpret_cast<uint32_t*>(base + kKTailOffset);
    std::memset(q_tail, 0, 1024);
    std::memcpy(q_tail, qp + steps * 256, rem * 64);
    const __mmask16 words = static_cast<__mmask16>((1u << rem) - 1u);
    for (int t = 0; t < 16 * blocks; ++t) {
      const __m512i x = t < n ? _mm512_maskz_loadu_epi32(words, k + t * k_stride + whole) : _mm512_setzero_si512();
      _mm512_store_si512(k_tail + t * 16, x);
    }
    kb.q_tail = q_tail, kb.k_tail = k_tail;
  }
  Configure({16, 16, 16, 16, 16, 16, 16, 16});  // (tile 7 unused: the configuration P.V of 16 rows takes)
  Lines feed(ahead);
  switch (blocks) {
    case 1: ScoreTiles<1>(qp, steps, kb, out, feed); break;
    case 2: ScoreTiles<2>(qp, steps, kb, out, feed); break;
    case 3: ScoreTiles<3>(qp, steps, kb, out, feed); break;
    default: ScoreTiles<4>(qp, steps, kb, out, feed); break;
  }
}

void AmxPackV(const uint16_t* v, int64_t v_stride, int n, uint64_t keys, int64_t cols, uint32_t* packed) {
  for (int64_t c0 = 0; c0 < cols; c0 += 32)
    PackV(v, v_stride, n, keys, c0, static_cast<int>(std::min<int64_t>(32, cols - c0)), n > 32 ? 2 : 1,
          packed + c0 / 32 * 1024);
}

void AmxPv16(const uint32_t* w, const uint32_t* packed_v, const uint16_t* v, int64_t v_stride, int n, uint64_t keys,
             float* c, int64_t cs, int mr, const float* alpha, int64_t cols, const PrefetchRows* ahead,
             void* scratch) {
  if (alpha)  // the online softmax's rescale, before this tile's products are added
    for (int r = 0; r < mr; ++r) {
      if (alpha[r] == 1.0f) continue;
      const __m512 a = _mm512_set1_ps(alpha[r]);
      float* row = c + r * cs;
      int64_t j = 0;
      for (; j + 16 <= cols; j += 16) _mm512_storeu_ps(row + j, _mm512_mul_ps(a, _mm512_loadu_ps(row + j)));
      for (; j < cols; ++j) row[j] *= alpha[r];
    }
  char* base = static_cast<char*>(scratch);
  uint32_t* a = reinterpret_cast<uint32_t*>(base + kWeightsOffset);
  uint32_t* vb = reinterpret_cast<uint32_t*>(base + kVOffset);
  const int halves = n > 32 ? 2 : 1;
  WeightRows(w, (n + 1) / 2, halves, mr, a);
  auto load_weights = [&] {
    _tile_loadd(2, a, 64);
    if (halves == 2) _tile_loadd(3, a + 256, 64);
  };
  Configure({mr, mr, mr, mr, 16, 16, 16, 16});
  load_weights();
  Lines feed(ahead);
  const int64_t per_chunk = feed.PerCall((cols + 31) / 32), whole = cols / 16 * 16;
  for (int64_t c0 = 0; c0 < cols; c0 += 32) {
    const int ncols = static_cast<int>(std::min<int64_t>(32, cols - c0));
    const int blocks = static_cast<int>((std::min<int64_t>(c0 + 32, whole) - c0) / 16);  // whole 16-column blocks
    const uint32_t* b = vb;
    if (packed_v)
      b = packed_v + c0 / 32 * 1024;
    else
      PackV(v, v_stride, n, keys, c0, ncols, halves, vb);
    if (blocks > 0) RunPvChunk(blocks, halves, c + c0, cs * 4, b);
    if (ncols % 16) {  // the last, partial block: C and B tiles narrowed to its columns (and A reloaded)
      const int bytes = 4 * (ncols % 16);
      Configure({mr, 0, mr, mr, 16, 0, 16, 0}, {bytes, 0, 64, 64, bytes, 0, bytes, 0});
      load_weights();
      RunPvChunk(1, halves, c + c0 + 16 * blocks, cs * 4, b + 256 * blocks);
    }
    feed.Issue(per_chunk);
  }
}

void AmxRelease() { _tile_release(); }

}  // namespace tessera::ops
