// Block-quantized formats: sizes, names, the dispatchers, and the 32-value formats (Q4_0, Q5_0,
// Q8_0, Q4_1, Q5_1). The K-quants are in quant_k.cc. Built with -ffp-contract=off (CMakeLists.txt): llama.cpp's
// reference library rounds every product and sum separately, and so must we to match its bytes.
#include "tessera/quant.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "core/quant_internal.h"
#include "tessera/check.h"
#include "tessera/dtype.h"

namespace tessera {

namespace {

struct QuantInfo {
  QuantType type;
  const char* name;
  int64_t elems;
  int64_t bytes;
};

constexpr QuantInfo kQuantInfo[] = {
    {QuantType::kQ4_0, "q4_0", 32, sizeof(BlockQ4_0)}, {QuantType::kQ5_0, "q5_0", 32, sizeof(BlockQ5_0)},
    {QuantType::kQ8_0, "q8_0", 32, sizeof(BlockQ8_0)}, {QuantType::kQ4_K, "q4_k", 256, sizeof(BlockQ4_K)},
    {QuantType::kQ5_K, "q5_k", 256, sizeof(BlockQ5_K)}, {QuantType::kQ6_K, "q6_k", 256, sizeof(BlockQ6_K)},
    {QuantType::kQ4_1, "q4_1", 32, sizeof(BlockQ4_1)},  {QuantType::kQ5_1, "q5_1", 32, sizeof(BlockQ5_1)},
};

const QuantInfo* Find(QuantType t) {
  for (const QuantInfo& q : kQuantInfo) {
    if (q.type == t) return &q;
  }
  return nullptr;
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Blocks in a row of n values; a caller passing a ragged row or kNone is a bug (loaders validate
// shapes against QuantRowBytes first and return a Status).
int64_t BlockCount(QuantType t, int64_t n) {
  const QuantInfo* q = Find(t);
  TESSERA_CHECK(q != nullptr, "not a block-quantized type");
  TESSERA_CHECK(n >= 0 && n % q->elems == 0, "row length is not a multiple of the block size");
  return n / q->elems;
}

bool NonFiniteHalf(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }

}  // namespace

int64_t QuantBlockElems(QuantType t) {
  const QuantInfo* q = Find(t);
  return q ? q->elems : 0;
}

int64_t QuantBlockBytes(QuantType t) {
  const QuantInfo* q = Find(t);
  return q ? q->bytes : 0;
}

int64_t QuantRowBytes(QuantType t, int64_t n) {
  const QuantInfo* q = Find(t);
  if (q == nullptr || n < 0 || n % q->elems != 0) return -1;
  return n / q->elems * q->bytes;
}

const char* QuantTypeName(QuantType t) {
  const QuantInfo* q = Find(t);
  return q ? q->name : "none";
}

bool ParseQuantType(std::string_view name, QuantType* out) {
  for (const QuantInfo& q : kQuantInfo) {
    const std::string_view want(q.name);
    if (name.size() != want.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) same = Lower(name[i]) == want[i];
    if (same) {
      *out = q.type;
      return true;
    }
  }
  return false;
}

void DequantizeRow(QuantType t, const void* src, float* dst, int64_t n) {
  using namespace quant_detail;
  const int64_t nb = BlockCount(t, n);
  switch (t) {
    case QuantType::kQ4_0: return DequantizeQ4_0(src, dst, nb);
    case QuantType::kQ5_0: return DequantizeQ5_0(src, dst, nb);
    case QuantType::kQ8_0: return DequantizeQ8_0(src, dst, nb);
    case QuantType::kQ4_K: return DequantizeQ4_K(src, dst, nb);
    case QuantType::kQ5_K: return DequantizeQ5_K(src, dst, nb);
    case QuantType::kQ6_K: return DequantizeQ6_K(src, dst, nb);
    case QuantType::kQ4_1: return DequantizeQ4_1(src, dst, nb);
    case QuantType::kQ5_1: return DequantizeQ5_1(src, dst, nb);
    case QuantType::kNone: break;
  }
}

void QuantizeRow(QuantType t, const float* src, void* dst, int64_t n) {
  using namespace quant_detail;
  const int64_t nb = BlockCount(t, n);
  switch (t) {
    case QuantType::kQ4_0: return QuantizeQ4_0(src, dst, nb);
    case QuantType::kQ5_0: return QuantizeQ5_0(src, dst, nb);
    case QuantType::kQ8_0: return QuantizeQ8_0(src, dst, nb);
    case QuantType::kQ4_K: return QuantizeQ4_K(src, dst, nb);
    case QuantType::kQ5_K: return QuantizeQ5_K(src, dst, nb);
    case QuantType::kQ6_K: return QuantizeQ6_K(src, dst, nb);
    case QuantType::kQ4_1: return QuantizeQ4_1(src, dst, nb);
    case QuantType::kQ5_1: return QuantizeQ5_1(src, dst, nb);
    case QuantType::kNone: break;
  }
}

int64_t FirstNonFiniteBlock(QuantType t, const void* src, int64_t n) {
  const int64_t nb = BlockCount(t, n);
  const int64_t stride = QuantBlockBytes(t);
  const auto* base = static_cast<const uint8_t*>(src);
  // Where the f16 scales sit in each block: d first (and dmin or m after it in Q4_K/Q5_K/Q4_1/Q5_1),
  // or d last (Q6_K).
  int64_t offset = 0;
  bool has_dmin = false;
  if (t == QuantType::kQ6_K) offset = offsetof(BlockQ6_K, d);
  if (t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ4_1 || t == QuantType::kQ5_1) has_dmin = true;
  for (int64_t i = 0; i < nb; ++i) {
    uint16_t h[2] = {0, 0};
    std::memcpy(h, base + i * stride + offset, has_dmin ? 4 : 2);
    if (NonFiniteHalf(h[0]) || NonFiniteHalf(h[1])) return i;
  }
  return -1;
}

namespace quant_detail {

void DequantizeQ4_0(const void* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const BlockQ4_0 b = LoadBlock<BlockQ4_0>(x, i);
    const float d = F16ToF32(b.d);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b.qs[j] & 0x0f) - 8;
      const int hi = (b.qs[j] >> 4) - 8;
      y[j] = static_cast<float>(lo) * d;
      y[j + 16] = static_cast<float>(hi) * d;
    }
  }
}

void DequantizeQ5_0(const void* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const BlockQ5_0 b = LoadBlock<BlockQ5_0>(x, i);
    const float d = F16ToF32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int lo = ((b.qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) - 16;
      const int hi = ((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
      y[j] = static_cast<float>(lo) * d;
      y[j + 16] = static_cast<float>(hi) * d;
    }
  }
}

void DequantizeQ8_0(const void* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const BlockQ8_0 b = LoadBlock<BlockQ8_0>(x, i);
    const float d = F16ToF32(b.d);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// Q4_1 / Q5_1: x = d * q + m, the product and the sum each rounded (exact product: an f16 times a
// code below 32). qh null: Q4_1.
namespace {
// A NaN product stays itself, as ggml's build gives it where both terms are NaN (which NaN an
// addition returns is the compiler's choice of operand order; we fix it to ggml's).
float AddMin(float product, float m) { return std::isnan(product) ? product : product + m; }

void DequantizeMin(uint16_t d16, uint16_t m16, const uint8_t* qs, const uint8_t* qh_bytes, float* y) {
  const float d = F16ToF32(d16), m = F16ToF32(m16);
  uint32_t qh = 0;
  if (qh_bytes) std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = AddMin(static_cast<float>(lo) * d, m);
    y[j + 16] = AddMin(static_cast<float>(hi) * d, m);
  }
}
}  // namespace

void DequantizeQ4_1(const void* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const BlockQ4_1 b = LoadBlock<BlockQ4_1>(x, i);
    DequantizeMin(b.d, b.m, b.qs, nullptr, y);
  }
}

void DequantizeQ5_1(const void* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const BlockQ5_1 b = LoadBlock<BlockQ5_1>(x, i);
    DequantizeMin(b.d, b.m, b.qs, b.qh, y);
  }
}

namespace {

// The first value of largest magnitude, sign kept (ggml's strict "amax < |v|" scan: a later equal
// magnitude, or a -0.0 in a zero block, never replaces it).
float SignedExtreme(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

}  // namespace

// Q4_0: d = (the value of largest magnitude) / -8, so that value maps to q = 0 exactly and the
// rest to round(x / d) + 8 clamped to 15. ggml rounds by truncating x/d + 8.5 through an int8 cast.
void QuantizeQ4_0(const float* x, void* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    BlockQ4_0 b;
    const float d = SignedExtreme(x) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = F32ToF16(d);
    for (int j = 0; j < 16; ++j) {
      const int8_t q0 = static_cast<int8_t>(TruncToInt32(x[j] * id + 8.5f));
      const int8_t q1 = static_cast<int8_t>(TruncToInt32(x[j + 16] * id + 8.5f));
      const uint8_t lo = static_cast<uint8_t>(q0 < 15 ? q0 : 15);
      const uint8_t hi = static_cast<uint8_t>(q1 < 15 ? q1 : 15);
      b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
    StoreBlock(y, i, b);
  }
}

// Q5_0: as Q4_0 with 32 levels (d = max / -16, offset 16); the fifth bits go to qh.
void QuantizeQ5_0(const float* x, void* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    BlockQ5_0 b;
    const float d = SignedExtreme(x) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = F32ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int8_t q0 = static_cast<int8_t>(TruncToInt32(x[j] * id + 16.5f));
      const int8_t q1 = static_cast<int8_t>(TruncToInt32(x[j + 16] * id + 16.5f));
      const uint8_t lo = static_cast<uint8_t>(q0 < 31 ? q0 : 31);
      const uint8_t hi = static_cast<uint8_t>(q1 < 31 ? q1 : 31);
      b.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>((lo & 0x10u) >> 4) << j;
      qh |= static_cast<uint32_t>((hi & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(b.qh, &qh, 4);
    StoreBlock(y, i, b);
  }
}

// Q8_0: symmetric, d = amax / 127, q = round half away from zero (roundf, as ggml).
void QuantizeQ8_0(const float* x, void* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    BlockQ8_0 b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;  // ggml's MAX(amax, a): a NaN a is taken, a NaN amax is dropped
    }
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = F32ToF16(d);
    for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(TruncToInt32(std::round(x[j] * id)));
    StoreBlock(y, i, b);
  }
}

namespace {

// Q4_1 / Q5_1 (`levels` 16 or 32): d = (max - min) / (levels - 1), m = min, q = (x - min) / d + 0.5
// truncated through ggml's casts: int8 then at most 15 for Q4_1, uint8 for Q5_1 (whose codes stay
// below 32 for finite input). Codes into c[32].
void QuantizeMin(const float* x, int levels, uint16_t* d16, uint16_t* m16, uint8_t* c) {
  float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / static_cast<float>(levels - 1);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d16 = F32ToF16(d), *m16 = F32ToF16(min);
  for (int j = 0; j < 32; ++j) {
    const int32_t q = TruncToInt32((x[j] - min) * id + 0.5f);
    if (levels == 16) {
      const int8_t q8 = static_cast<int8_t>(q);
      c[j] = static_cast<uint8_t>(q8 < 15 ? q8 : 15);
    } else {
      c[j] = static_cast<uint8_t>(q);
    }
  }
}

}  // namespace

void QuantizeQ4_1(const float* x, void* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    BlockQ4_1 b;
    uint8_t c[32];
    QuantizeMin(x, 16, &b.d, &b.m, c);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(c[j] | (c[j + 16] << 4));
    StoreBlock(y, i, b);
  }
}

void QuantizeQ5_1(const float* x, void* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    BlockQ5_1 b;
    uint8_t c[32];
    QuantizeMin(x, 32, &b.d, &b.m, c);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      b.qs[j] = static_cast<uint8_t>((c[j] & 0x0f) | ((c[j + 16] & 0x0f) << 4));
      qh |= static_cast<uint32_t>((c[j] & 0x10u) >> 4) << j;
      qh |= static_cast<uint32_t>((c[j + 16] & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(b.qh, &qh, 4);
    StoreBlock(y, i, b);
  }
}

}  // namespace quant_detail
}  // namespace tessera
