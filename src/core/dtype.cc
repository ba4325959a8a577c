#include "tessera/dtype.h"

#include <algorithm>
#include <cmath>

namespace tessera {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

bool ParseDType(std::string_view name, DType* out) {
  if (name == "f32" || name == "float32") { *out = DType::kF32; return true; }
  if (name == "bf16" || name == "bfloat16") { *out = DType::kBF16; return true; }
  if (name == "f16" || name == "float16") { *out = DType::kF16; return true; }
  return false;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24, exactly representable in f32
      float v = std::ldexp(static_cast<float>(man), -24);
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in f16: value / 2^-24, rounded to nearest even.
    // For |f| < 2^-14 the scaled value < 1024 fits and rint() gives ties-to-even.
    float scaled = std::ldexp(std::fabs(f), 24);
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);  // m == 1024 correctly becomes the smallest normal
  }
  // Normal: rebias exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t rebased = abs - (112u << 23);
  uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebased + rounding) >> 13));
}

void DecodeToF32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
  }
}

void EncodeFromF32(DType t, const float* src, void* dst, size_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
  }
}

void ConvertDType(DType from, const void* src, DType to, void* dst, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * DTypeSize(from));
    return;
  }
  constexpr size_t kChunk = 256;  // stack staging: no allocation
  float staging[kChunk];
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t m = std::min(kChunk, n - i);
    DecodeToF32(from, s + i * DTypeSize(from), staging, m);
    EncodeFromF32(to, staging, d + i * DTypeSize(to), m);
  }
}

namespace {

// Whether any of x[0, n) has all exponent bits set (NaN or +-inf): an OR over the block, which
// the compiler vectorizes; the exact index is searched only in a block that has one.
template <typename T, T kExponent>
bool AnyNonFinite(const T* x, int64_t n) {
  T bad = 0;  // (as wide as an element: no widening in the vector loop)
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<T>((x[i] & kExponent) == kExponent);
  return bad != 0;
}

template <typename T, T kExponent>
int64_t FirstNonFiniteT(const void* data, int64_t n) {
  constexpr int64_t kBlock = 4096;
  const T* x = static_cast<const T*>(data);
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t len = std::min(kBlock, n - i0);
    if (!AnyNonFinite<T, kExponent>(x + i0, len)) continue;
    for (int64_t i = i0; i < i0 + len; ++i)
      if ((x[i] & kExponent) == kExponent) return i;
  }
  return -1;
}

}  // namespace

int64_t FirstNonFinite(DType t, const void* data, int64_t n) {
  switch (t) {
    case DType::kF32: return FirstNonFiniteT<uint32_t, 0x7f800000u>(data, n);
    case DType::kBF16: return FirstNonFiniteT<uint16_t, 0x7f80u>(data, n);
    case DType::kF16: return FirstNonFiniteT<uint16_t, 0x7c00u>(data, n);
  }
  return -1;
}

}  // namespace tessera
