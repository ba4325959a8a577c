// The LDTILECFG operand of Intel AMX (palette 1), shared by the AMX kernels (bf16_amx.cc,
// quant_gemm_amx.cc), each of which fills in its own tile shapes.
#pragma once

#include <cstdint>

namespace tessera::ops {

// Per tile, its rows and bytes per row; 64 bytes, loaded by _tile_loadconfig.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64, "LDTILECFG reads 64 bytes");

}  // namespace tessera::ops
