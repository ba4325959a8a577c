// Intel AMX for attention at precision bf16: the 16-row panel's scores and P.V of the dot-product
// path (attention/tile_kernel.cc), on TDPBF16PS tiles instead of vdpbf16ps.
// Scores: 16 K rows read in place are an A tile (32 bf16 of each row per step) and the q panel's
// pair rows ([pairs][16] words) are already a B tile, so C is the key-major [16 keys][16 rows]
// block the key-major softmax reads. P.V: the softmax's key-major weight pairs, transposed into
// rows, are A; V's rows interleaved in pairs, 16 columns at a time, are B; C is the output rows,
// loaded and stored in place. The tile does 16 times the multiply-adds of a vdpbf16ps per
// instruction, so the panel's arithmetic stops being the limit of a 16-head group's decode.
// Results differ from the dot-product kernels' only in f32 rounding: the instruction keeps one
// f32 chain per element along the whole head dim (docs/attention.md, "AMX tiles").
#pragma once

#include <cstdint>

#include "ops/prefetch_rows.h"

namespace tessera::ops {

// Whether the AMX panels run: Bf16Amx() is on (AMX-BF16, the tile permission, TESSERA_AMX and
// EnableBf16Amx).
bool AmxAttentionUsable();

// Scratch bytes AmxScores16 and AmxPv16 take (64-byte aligned) for head dim d: the weights as two
// A tiles, V's pairs as four B tiles, the zero-padded copies of partial blocks (the last pairs of
// q and K, a last block of fewer than 16 keys).
inline int64_t AmxAttentionScratchBytes(int64_t d) { return 11264 + 16 * d * 2; }

// Bf16DotKernels::score_rows16 for K rows at a fixed stride (elements), n <= 64 keys:
//   out[t * 16 + r] = sum_{p < pairs} dot2(qp[p * 16 + r], word p of row k + t * k_stride)
// Rows past n and pairs past `pairs` are never read (partial 16-key blocks and 16-pair steps are
// copied, zero-padded, into the scratch). ahead: lines to prefetch meanwhile, or null.
void AmxScores16(const uint32_t* qp, int64_t pairs, const uint16_t* k, int64_t k_stride, int n, float* out,
                 const PrefetchRows* ahead, void* scratch);

// Bf16DotKernels::pv_rows16 for V rows at a fixed stride (elements): for r < mr <= 16, j < cols,
//   c[r * cs + j] = alpha[r] c[r * cs + j] + sum_{t < n, bit t of keys} w(t, r) v[t * v_stride + j]
// with w the softmax's key-major weight pairs (alpha null: 1), n <= 64. A key outside `keys` is
// never read, nor is c past mr rows and cols columns (a last partial 16-column block runs on tiles
// narrowed to its columns).
// packed_v: AmxPackV's copy of the same rows, keys and columns (null: V is packed here, a chunk
// at a time), for panels that share a tile.
void AmxPv16(const uint32_t* w, const uint32_t* packed_v, const uint16_t* v, int64_t v_stride, int n, uint64_t keys,
             float* c, int64_t cs, int mr, const float* alpha, int64_t cols, const PrefetchRows* ahead,
             void* scratch);

// Returns the tile state to its initial one (the kernels above leave their configuration loaded
// for the next call); call once a thread is done with them.
void AmxRelease();

// V's B tiles for AmxPv16, every 32-column chunk of rows [0, n) packed once for all the panels of
// a tile: AmxPackVWords(cols) words.
void AmxPackV(const uint16_t* v, int64_t v_stride, int n, uint64_t keys, int64_t cols, uint32_t* packed);
inline int64_t AmxPackVWords(int64_t cols) { return (cols + 31) / 32 * 1024; }

}  // namespace tessera::ops
