#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "ops/bf16_amx.h"
#include "ops/bf16_amx_attention.h"
#include "ops/bf16_dot.h"
#include "ops/quant_gemm.h"
#include "ops/simd.h"

namespace tessera::ops {
namespace {

bool HasAvx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"); }
bool HasAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         HasAvx2();
}

std::atomic<bool> bf16_dot_enabled{true};
std::atomic<bool> bf16_amx_enabled{true};

// AMX-BF16 and AMX-TILE (CPUID leaf 7: EDX bits 22 and 24), and Linux's permission for this
// process to use the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18):
// without it the first tile instruction faults. Asked once (a function-local static).
// `bit`: the data type's feature (22 AMX-BF16, 25 AMX-INT8).
bool AmxUsable(int bit) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << bit)) || !(d & (1u << 24))) return false;
#ifdef SYS_arch_prctl
  constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
  return false;
#endif
}

// TESSERA_AMX=0 (or off) keeps every kernel off AMX tiles.
bool AmxWanted() {
  const char* off = std::getenv("TESSERA_AMX");
  return !(off && (std::strcmp(off, "0") == 0 || std::strcmp(off, "off") == 0));
}

Bf16AmxGemmFn ChooseBf16Amx() { return AmxWanted() && AmxUsable(22) ? &Bf16AmxGemm : nullptr; }

const Bf16DotKernels* ChooseBf16Dot() {
  const char* want = std::getenv("TESSERA_SIMD");
  if (want && (std::strcmp(want, "generic") == 0 || std::strcmp(want, "avx2") == 0)) return nullptr;
  return HasAvx512() && __builtin_cpu_supports("avx512bf16") ? &Bf16DotAvx512() : nullptr;
}

const SimdKernels& Choose() {
  const char* want = std::getenv("TESSERA_SIMD");
  const SimdKernels* avx512 = HasAvx512() ? SimdAvx512() : nullptr;
  const SimdKernels* avx2 = HasAvx2() ? SimdAvx2() : nullptr;
  if (want && std::strcmp(want, "generic") == 0) return SimdGeneric();
  if (want && std::strcmp(want, "avx512") == 0 && avx512) return *avx512;
  // AVX2 first: the 512-bit kernels ran the per-row dot products of prefill attention slower
  // (bench/results/kernel_choices.md, "AVX2 before AVX-512"). AVX-512 stays selectable.
  if (avx2) return *avx2;
  if (avx512) return *avx512;
  return SimdGeneric();
}

// The kernels chosen apart from Simd() at 512 bits: where the CPU has AVX-512 and TESSERA_SIMD
// does not ask for generic or avx2.
bool WideWanted() {
  const char* want = std::getenv("TESSERA_SIMD");
  if (want && (std::strcmp(want, "generic") == 0 || std::strcmp(want, "avx2") == 0)) return false;
  return HasAvx512();
}

GemmTileWideFn ChooseGemmTileWide() { return WideWanted() ? GemmTileWideAvx512() : nullptr; }

ExpSubSumFn ChooseExpSubSumWide() { return WideWanted() ? SimdAvx512()->exp_sub_sum : Simd().exp_sub_sum; }

GeluTanhMulFn ChooseGeluTanhMulWide() {
  return WideWanted() ? SimdAvx512()->gelu_tanh_mul : Simd().gelu_tanh_mul;
}

DotRows4TokensFn ChooseDotRows4Tokens() {
  if (!WideWanted()) return nullptr;  // (checked first: SimdAvx2() only on CPUs with AVX2)
  const SimdKernels& avx2 = *SimdAvx2();
  const bool same_bits = Simd().dot_rows4_f32 == avx2.dot_rows4_f32 && Simd().dot_rows4_bf16 == avx2.dot_rows4_bf16;
  return same_bits ? DotRows4TokensAvx512() : nullptr;
}

}  // namespace

ExpSubSumFn ExpSubSumWide() {
  static const ExpSubSumFn chosen = ChooseExpSubSumWide();
  return chosen;
}

GeluTanhMulFn GeluTanhMulWide() {
  static const GeluTanhMulFn chosen = ChooseGeluTanhMulWide();
  return chosen;
}

const SimdKernels& Simd() {
  static const SimdKernels& chosen = Choose();
  return chosen;
}

const Bf16DotKernels* Bf16Dot() {
  static const Bf16DotKernels* const chosen = ChooseBf16Dot();
  return bf16_dot_enabled.load(std::memory_order_relaxed) ? chosen : nullptr;
}

DotRows4TokensFn DotRows4Tokens() {
  static const DotRows4TokensFn chosen = ChooseDotRows4Tokens();
  return chosen;
}

GemmTileWideFn GemmTileWide() {
  static const GemmTileWideFn chosen = ChooseGemmTileWide();
  return chosen;
}

void EnableBf16Dot(bool on) { bf16_dot_enabled.store(on, std::memory_order_relaxed); }

Bf16AmxGemmFn Bf16Amx() {
  if (Bf16Dot() == nullptr || !bf16_amx_enabled.load(std::memory_order_relaxed)) return nullptr;
  static const Bf16AmxGemmFn chosen = ChooseBf16Amx();
  return chosen;
}

bool AmxInt8Usable() {
  static const bool usable = AmxWanted() && AmxUsable(25);
  return usable;
}

bool Bf16AmxActive() { return Bf16Amx() != nullptr; }

bool AmxAttentionUsable() { return Bf16Amx() != nullptr; }

void EnableBf16Amx(bool on) { bf16_amx_enabled.store(on, std::memory_order_relaxed); }

int AvailableSimd(const SimdKernels** out, int max) {
  int n = 0;
  if (HasAvx512() && n < max) out[n++] = SimdAvx512();
  if (HasAvx2() && n < max) out[n++] = SimdAvx2();
  if (n < max) out[n++] = &SimdGeneric();
  return n;
}

}  // namespace tessera::ops
