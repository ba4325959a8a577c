// Attention's AMX panels (ops/bf16_amx_attention.h) against double references: scores over head
// dims of whole and partial 16-pair steps (2 to 512 elements; SigLIP's 72) and every key count of a
// tile (whole and partial 16-key blocks), P.V over every key count and column counts with whole and
// partial 16-column blocks, subsets of keys, rescale factors, panels of 1-16 rows, and V packed by
// the call or beforehand (AmxPackV, as panels sharing a tile do). Rows past n end at an unreadable page, so a
// tile that read past its last key would fault; NaN where the kernels must not look (keys
// outside the subset, weight pairs past the tile, rows past mr, scratch left from earlier calls)
// would reach the results.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/bf16_amx_attention.h"
#include "pv_check.h"
#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"

namespace tessera {
namespace {

constexpr uint16_t kBf16NaN = 0x7fc0;

// `count` bf16 values whose last one ends where an inaccessible page begins.
class GuardedBf16 {
 public:
  explicit GuardedBf16(size_t count) : page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
    const size_t bytes = (count * 2 + page_ - 1) / page_ * page_;
    size_ = bytes + page_;
    base_ = static_cast<char*>(mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) std::abort();
    mprotect(base_ + bytes, page_, PROT_NONE);
    data_ = reinterpret_cast<uint16_t*>(base_ + bytes) - count;
  }
  ~GuardedBf16() { munmap(base_, size_); }
  GuardedBf16(const GuardedBf16&) = delete;
  GuardedBf16& operator=(const GuardedBf16&) = delete;
  uint16_t* data() { return data_; }

 private:
  size_t page_, size_ = 0;
  char* base_ = nullptr;
  uint16_t* data_ = nullptr;
};

void FillRandom(std::mt19937& rng, uint16_t* x, size_t n) {
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < n; ++i) x[i] = F32ToBf16(nd(rng));
}

// One f32 chain per element over `terms` exact products: |error| <= terms * 2^-24 * sum |terms|.
double ChainBound(int64_t terms, double mag) { return (terms + 1) * std::ldexp(mag, -24) + 1e-30; }

// Scratch that holds NaN before every call: a kernel must write what it reads of it.
AlignedBuffer PoisonedScratch(int64_t d) {
  AlignedBuffer buf(ops::AmxAttentionScratchBytes(d));
  std::fill(buf.as<uint16_t>(), buf.as<uint16_t>() + ops::AmxAttentionScratchBytes(d) / 2, kBf16NaN);
  return buf;
}

TEST(AttentionAmx, ScoresMatchDouble) {
  if (!ops::AmxAttentionUsable()) GTEST_SKIP() << "no AMX-BF16 tiles on this CPU (or turned off)";
  std::mt19937 rng(31);
  for (int64_t pairs : {1, 4, 15, 16, 17, 32, 36, 48, 128, 256}) {
    const int64_t d = 2 * pairs, stride = d + 6;  // K rows with a gap between them
    for (int n : {1, 5, 15, 16, 17, 31, 33, 48, 63, 64}) {
      std::vector<uint16_t> q(16 * d);
      FillRandom(rng, q.data(), q.size());
      AlignedBuffer panel_buf(pairs * 16 * 4);
      uint32_t* panel = panel_buf.as<uint32_t>();
      for (int r = 0; r < 16; ++r)
        for (int64_t p = 0; p < pairs; ++p)
          panel[p * 16 + r] = q[r * d + 2 * p] | static_cast<uint32_t>(q[r * d + 2 * p + 1]) << 16;
      GuardedBf16 k((n - 1) * stride + d);  // the last row ends at the guard page
      FillRandom(rng, k.data(), (n - 1) * stride + d);
      AlignedBuffer scratch = PoisonedScratch(d);
      AlignedBuffer out_buf(64 * 16 * 4);
      float* out = out_buf.as<float>();
      std::fill(out, out + 64 * 16, NAN);
      // Prefetching the rows themselves meanwhile must not change anything.
      const ops::PrefetchRows ahead{k.data(), stride * 2, d * 2, n};
      ops::AmxScores16(panel, pairs, k.data(), stride, n, out, n % 2 ? &ahead : nullptr, scratch.data());
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < 16; ++r) {
          double want = 0, mag = 0;
          for (int64_t e = 0; e < d; ++e) {
            const double x = double(Bf16ToF32(q[r * d + e])) * Bf16ToF32(k.data()[t * stride + e]);
            want += x, mag += std::fabs(x);
          }
          ASSERT_NEAR(out[t * 16 + r], want, ChainBound(d, mag)) << "pairs " << pairs << " n " << n << " t " << t
                                                                  << " r " << r;
        }
    }
  }
}

TEST(AttentionAmx, PvMatchesDouble) {
  if (!ops::AmxAttentionUsable()) GTEST_SKIP() << "no AMX-BF16 tiles on this CPU (or turned off)";
  std::mt19937 rng(32);
  for (int n : {1, 2, 7, 16, 31, 32, 33, 50, 63, 64}) {
    for (int64_t cols : {1, 8, 16, 24, 32, 40, 72, 256, 512}) {
      const int64_t stride = cols + 3;
      GuardedBf16 v((n - 1) * stride + cols);  // the last row ends at the guard page
      std::vector<uint16_t> vals((n - 1) * stride + cols);
      FillRandom(rng, vals.data(), vals.size());
      std::vector<uint16_t> wv(16 * 64);
      FillRandom(rng, wv.data(), wv.size());
      for (int mr : {1, 5, 16}) {
        // Key-major weight pairs, [32 pairs][16 rows]: rows past mr and pairs past the tile hold
        // NaN (what a softmax leaves there), which must reach no result.
        AlignedBuffer w_buf(32 * 16 * 4);
        uint32_t* w = w_buf.as<uint32_t>();
        for (int p = 0; p < 32; ++p)
          for (int r = 0; r < 16; ++r) {
            const uint32_t lo = wv[r * 64 + 2 * p], hi = 2 * p + 1 < n ? wv[r * 64 + 2 * p + 1] : 0;
            w[p * 16 + r] = r < mr && 2 * p < n ? lo | hi << 16 : 0x7fc07fc0u;
          }
        for (int variant = 0; variant < 4; ++variant) {
          // Every key, or a random subset whose other keys' V rows hold NaN; V packed by the call
          // itself, or beforehand by AmxPackV (NaN past its columns' chunks).
          const int subset = variant % 2;
          const bool prepacked = variant >= 2;
          const uint64_t keys = subset ? std::uniform_int_distribution<uint64_t>()(rng) : ~uint64_t{0};
          std::memcpy(v.data(), vals.data(), vals.size() * 2);
          for (int t = 0; t < n; ++t)
            if (!(keys >> t & 1)) std::fill(v.data() + t * stride, v.data() + t * stride + cols, kBf16NaN);
          testing::PvCase pc(n, mr, subset, cols);
          AlignedBuffer scratch = PoisonedScratch(32);
          AlignedBuffer packed(ops::AmxPackVWords(cols) * 4);
          std::fill(packed.as<uint32_t>(), packed.as<uint32_t>() + ops::AmxPackVWords(cols), 0x7fc07fc0u);
          if (prepacked) ops::AmxPackV(v.data(), stride, n, keys, cols, packed.as<uint32_t>());
          const ops::PrefetchRows ahead{v.data(), stride * 2, cols * 2, n};
          ops::AmxPv16(w, prepacked ? packed.as<uint32_t>() : nullptr, v.data(), stride, n, keys, pc.c.data(), pc.cs,
                       mr, pc.Alpha(), cols, n % 2 ? &ahead : nullptr, scratch.data());
          ASSERT_TRUE(testing::PvRowsMatch(pc, mr, cols, n, keys, wv.data(), v.data(), stride,
                                           [&](double mag) { return ChainBound(n + 1, mag); }))
              << "n " << n << " cols " << cols << " mr " << mr << " variant " << variant;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
