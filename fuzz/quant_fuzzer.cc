// libFuzzer target: the block formats (tessera/quant.h) on arbitrary bytes. The first byte picks the
// type; the rest is read as whole blocks. Invariants: FirstNonFiniteBlock reports exactly the blocks
// whose dequantized values are non-finite (a NaN or inf scale reaches every value of its block, a
// finite one none); and the same bytes read as floats, when finite, quantize to blocks that
// dequantize to finite values, twice to the same bytes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "tessera/quant.h"

namespace {

using tessera::QuantType;

constexpr QuantType kTypes[] = {QuantType::kQ4_0, QuantType::kQ5_0, QuantType::kQ8_0, QuantType::kQ4_K,
                                QuantType::kQ5_K, QuantType::kQ6_K, QuantType::kQ4_1, QuantType::kQ5_1};

void CheckDequantize(QuantType t, const uint8_t* data, size_t size) {
  const int64_t be = tessera::QuantBlockElems(t), bb = tessera::QuantBlockBytes(t);
  const int64_t nb = static_cast<int64_t>(size) / bb;
  std::vector<float> y(static_cast<size_t>(nb * be));
  tessera::DequantizeRow(t, data, y.data(), nb * be);
  const int64_t first = tessera::FirstNonFiniteBlock(t, data, nb * be);
  FUZZ_CHECK(first >= -1 && first < nb, "block index out of range");
  int64_t want = -1;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t bad = 0;
    for (int64_t i = b * be; i < (b + 1) * be; ++i) bad += std::isfinite(y[static_cast<size_t>(i)]) ? 0 : 1;
    FUZZ_CHECK(bad == 0 || bad == be, "a block is either all finite or all not");
    if (bad && want < 0) want = b;
  }
  FUZZ_CHECK(first == want, "FirstNonFiniteBlock disagrees with the dequantized values");
}

void CheckQuantize(QuantType t, const uint8_t* data, size_t size) {
  const int64_t be = tessera::QuantBlockElems(t);
  const int64_t n = static_cast<int64_t>(size / sizeof(float)) / be * be;
  if (n == 0) return;
  std::vector<float> x(static_cast<size_t>(n));
  std::memcpy(x.data(), data, x.size() * sizeof(float));
  for (float& v : x) {
    if (!std::isfinite(v) || std::fabs(v) > 1e4f) v = 0.0f;  // scales stay within f16
  }
  const size_t bytes = static_cast<size_t>(tessera::QuantRowBytes(t, n));
  std::vector<uint8_t> q1(bytes), q2(bytes);
  tessera::QuantizeRow(t, x.data(), q1.data(), n);
  tessera::QuantizeRow(t, x.data(), q2.data(), n);
  FUZZ_CHECK(q1 == q2, "quantizing is deterministic");
  FUZZ_CHECK(tessera::FirstNonFiniteBlock(t, q1.data(), n) == -1, "finite input gives finite scales");
  std::vector<float> y(static_cast<size_t>(n));
  tessera::DequantizeRow(t, q1.data(), y.data(), n);
  for (float v : y) FUZZ_CHECK(std::isfinite(v), "finite blocks dequantize to finite values");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const QuantType t = kTypes[data[0] % (sizeof(kTypes) / sizeof(kTypes[0]))];
  tessera::fuzz::NoEscape("quant", [&] {
    CheckDequantize(t, data + 1, size - 1);
    CheckQuantize(t, data + 1, size - 1);
  });
  return 0;
}
