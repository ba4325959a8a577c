#include "io/gguf_format.h"

#include <algorithm>
#include <limits>

namespace tessera::io::gguf {
namespace {

// ggml's type ids (ggml.h). Ids it removed (4, 5, 31-33, 36-38) keep their names so a file using
// them is refused by name.
constexpr GgmlType kTypes[] = {
    {0, "f32", true, DType::kF32, QuantType::kNone},
    {1, "f16", true, DType::kF16, QuantType::kNone},
    {2, "q4_0", true, DType::kF32, QuantType::kQ4_0},
    {3, "q4_1", true, DType::kF32, QuantType::kQ4_1},
    {4, "q4_2 (removed from ggml)", false, DType::kF32, QuantType::kNone},
    {5, "q4_3 (removed from ggml)", false, DType::kF32, QuantType::kNone},
    {6, "q5_0", true, DType::kF32, QuantType::kQ5_0},
    {7, "q5_1", true, DType::kF32, QuantType::kQ5_1},
    {8, "q8_0", true, DType::kF32, QuantType::kQ8_0},
    {9, "q8_1", false, DType::kF32, QuantType::kNone},
    {10, "q2_K", false, DType::kF32, QuantType::kNone},
    {11, "q3_K", false, DType::kF32, QuantType::kNone},
    {12, "q4_K", true, DType::kF32, QuantType::kQ4_K},
    {13, "q5_K", true, DType::kF32, QuantType::kQ5_K},
    {14, "q6_K", true, DType::kF32, QuantType::kQ6_K},
    {15, "q8_K", false, DType::kF32, QuantType::kNone},
    {16, "iq2_xxs", false, DType::kF32, QuantType::kNone},
    {17, "iq2_xs", false, DType::kF32, QuantType::kNone},
    {18, "iq3_xxs", false, DType::kF32, QuantType::kNone},
    {19, "iq1_s", false, DType::kF32, QuantType::kNone},
    {20, "iq4_nl", false, DType::kF32, QuantType::kNone},
    {21, "iq3_s", false, DType::kF32, QuantType::kNone},
    {22, "iq2_s", false, DType::kF32, QuantType::kNone},
    {23, "iq4_xs", false, DType::kF32, QuantType::kNone},
    {24, "i8", false, DType::kF32, QuantType::kNone},
    {25, "i16", false, DType::kF32, QuantType::kNone},
    {26, "i32", false, DType::kF32, QuantType::kNone},
    {27, "i64", false, DType::kF32, QuantType::kNone},
    {28, "f64", false, DType::kF32, QuantType::kNone},
    {29, "iq1_m", false, DType::kF32, QuantType::kNone},
    {30, "bf16", true, DType::kBF16, QuantType::kNone},
    {31, "q4_0_4_4 (removed from ggml)", false, DType::kF32, QuantType::kNone},
    {32, "q4_0_4_8 (removed from ggml)", false, DType::kF32, QuantType::kNone},
    {33, "q4_0_8_8 (removed from ggml)", false, DType::kF32, QuantType::kNone},
    {34, "tq1_0", false, DType::kF32, QuantType::kNone},
    {35, "tq2_0", false, DType::kF32, QuantType::kNone},
    {36, "iq4_nl_4_4 (removed from ggml)", false, DType::kF32, QuantType::kNone},
    {37, "iq4_nl_4_8 (removed from ggml)", false, DType::kF32, QuantType::kNone},
    {38, "iq4_nl_8_8 (removed from ggml)", false, DType::kF32, QuantType::kNone},
    {39, "mxfp4", false, DType::kF32, QuantType::kNone},
    {40, "nvfp4", false, DType::kF32, QuantType::kNone},
    {41, "q1_0", false, DType::kF32, QuantType::kNone},
    {42, "q2_0", false, DType::kF32, QuantType::kNone},
};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == 43);

constexpr const char* kValueTypeNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
constexpr uint64_t kScalarBytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

}  // namespace

const GgmlType* FindGgmlType(uint32_t id) {
  return id < sizeof(kTypes) / sizeof(kTypes[0]) ? &kTypes[id] : nullptr;
}

uint32_t GgmlTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kBF16: return 30;
  }
  return 0;
}

uint32_t GgmlTypeOf(QuantType quant) {
  for (const GgmlType& t : kTypes)
    if (t.supported && t.quant == quant && quant != QuantType::kNone) return t.id;
  return 0;
}

int64_t BlockElems(const GgmlType& t) {
  if (!t.supported) return 0;
  return t.quant == QuantType::kNone ? 1 : QuantBlockElems(t.quant);
}

int64_t RowBytes(const GgmlType& t, int64_t n) {
  const int64_t elems = BlockElems(t);
  if (elems <= 0 || n < 0 || n % elems != 0) return -1;
  const int64_t block_bytes =
      t.quant == QuantType::kNone ? static_cast<int64_t>(DTypeSize(t.dtype)) : QuantBlockBytes(t.quant);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n / elems, block_bytes, &bytes)) return -1;  // (QuantRowBytes does not check)
  return bytes;
}

Status TensorBytes(const GgmlType& t, const std::vector<int64_t>& shape, const std::string& what, uint64_t* nbytes) {
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) overflow = overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) numel = 0, overflow = false;
  if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return InvalidArgument(what + " shape " + ShapeString(shape) + " overflows the element count");
  const int64_t ne0 = shape.empty() ? 1 : shape.back();
  const int64_t elems = BlockElems(t);
  if (elems <= 0 || ne0 % elems != 0)
    return InvalidArgument(what + " of " + t.name + " has rows of " + std::to_string(ne0) +
                           " values, not a multiple of its block of " + std::to_string(elems));
  const int64_t row_bytes = RowBytes(t, ne0);
  const uint64_t rows = ne0 == 0 ? 0 : numel / static_cast<uint64_t>(ne0);
  if (row_bytes < 0 || __builtin_mul_overflow(rows, static_cast<uint64_t>(row_bytes), nbytes) ||
      *nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return InvalidArgument(what + " shape " + ShapeString(shape) + " of " + t.name + " overflows the byte count");
  return Status::Ok();
}

std::string TypeName(uint32_t type) {
  if (type < sizeof(kValueTypeNames) / sizeof(kValueTypeNames[0])) return kValueTypeNames[type];
  return "type " + std::to_string(type);
}

uint64_t ScalarBytes(uint32_t type) {
  return type < sizeof(kScalarBytes) / sizeof(kScalarBytes[0]) ? kScalarBytes[type] : 0;
}

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 200;
  std::string out = "'";
  const std::string_view shown = s.substr(0, kMax);
  for (char c : shown) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {  // control bytes would garble a terminal
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  out += "'";
  if (s.size() > kMax) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace tessera::io::gguf
