#include <atomic>
#include <cstdlib>
#include <cstring>

#include "ops/quant_dot.h"

namespace tessera::ops {
namespace {

std::atomic<const QuantDotKernels*> forced{nullptr};

bool HasAvx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"); }
bool HasAvx512Vnni() {
  return HasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

const QuantDotKernels& Choose() {
  const char* want = std::getenv("TESSERA_SIMD");
  if (want && std::strcmp(want, "generic") == 0) return QuantDotGeneric();
  const QuantDotKernels* avx2 = QuantDotAvx2();
  if (want && std::strcmp(want, "avx2") == 0 && avx2) return *avx2;
  if (const QuantDotKernels* avx512 = QuantDotAvx512()) return *avx512;
  return avx2 ? *avx2 : QuantDotGeneric();
}

}  // namespace

const QuantDotKernels* QuantDotAvx2() { return HasAvx2() ? &QuantDotAvx2Kernels() : nullptr; }
const QuantDotKernels* QuantDotAvx512() { return HasAvx512Vnni() ? &QuantDotAvx512Kernels() : nullptr; }

const QuantDotKernels& QuantDot() {
  static const QuantDotKernels& chosen = Choose();
  const QuantDotKernels* f = forced.load(std::memory_order_relaxed);
  return f ? *f : chosen;
}

int AvailableQuantDot(const QuantDotKernels** out, int max) {
  int n = 0;
  if (const QuantDotKernels* k = QuantDotAvx512(); k && n < max) out[n++] = k;
  if (const QuantDotKernels* k = QuantDotAvx2(); k && n < max) out[n++] = k;
  if (n < max) out[n++] = &QuantDotGeneric();
  return n;
}

void SetQuantDotForTesting(const QuantDotKernels* k) { forced.store(k, std::memory_order_relaxed); }

}  // namespace tessera::ops
