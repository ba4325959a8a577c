// Random attention problems for the kernel sweep tests: shapes, dtypes and structured masks
// drawn from a seed, with storage owned by the problem.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tessera/attention.h"
#include "tessera/thread_pool.h"

namespace tessera::testing {

struct ProblemConfig {
  int64_t batch = 2, hq = 8, hkv = 4, s_q = 16, s_kv = 128, d = 64, dv = 64;
  DType kv_dtype = DType::kF32;
  // Mask features.
  bool causal = true;
  int32_t window_left = -1, window_right = -1;
  bool blocks = false;          // image blocks crossing tile edges
  bool blocks_ignore_window = false;
  bool padding = false;         // per-row kv_valid < s_kv (including 0 for some row)
  bool ring = false;            // keys stored out of position order (slot = pos mod s_kv)
  bool random_q_pos = false;    // query positions drawn at random instead of bottom-right
  int dense = 0;                // 0 none, 1 additive (per head), 2 additive broadcast over heads, 3 bool
  float scale = 0;              // 0: 1/sqrt(d)
  float softcap = 0;
  bool strided_kv = false;      // K/V live in a larger cache buffer (capacity > s_kv)
  std::string Describe() const;
};

// Draws a config with the given shape and random mask features.
ProblemConfig RandomMaskConfig(std::mt19937& rng, int64_t batch, int64_t hq, int64_t hkv, int64_t s_q, int64_t s_kv,
                               int64_t d, DType dtype);

class Problem {
 public:
  Problem(const ProblemConfig& cfg, uint32_t seed);
  const ProblemConfig& config() const { return cfg_; }
  // Params writing to `out` ([B, Hq, S_q, Dv] f32, contiguous).
  AttentionParams Params(std::vector<float>& out) const;
  size_t OutSize() const { return static_cast<size_t>(cfg_.batch * cfg_.hq * cfg_.s_q * cfg_.dv); }
  // Overwrites every K/V element that no query may see (padding slots and keys invisible to all
  // queries) with NaN: a kernel that reads them would poison its output.
  void PoisonInvisibleKeys();
  // Writes NaN, +inf or -inf (drawn at random) into one element each of a few random q rows, K
  // rows and V rows (any slot: visible to all, some or no queries, padding included; half of the
  // key picks near the queries' positions, where tiles are partly visible). (A NaN or +inf bias
  // is refused by ValidateAttention.)
  void InjectNonFinite(std::mt19937& rng);
  // Sets element d of q row (b, h, t) (what 0), or of K (1) / V (2) slot t of KV head h, to x.
  void SetElement(int what, int64_t b, int64_t h, int64_t t, int64_t d, float x);
  // Runs `kernel` at `precision` on a fresh arena (a failed Status fails the test) and returns the
  // output [B, Hq, S_q, Dv].
  std::vector<float> Run(AttentionPrecision precision, AttentionKernel kernel, ThreadPool* pool) const;
  // Largest finite |v| over every V slot (the scale of the bf16 tolerances).
  double MaxAbsFiniteV() const;

 private:
  ProblemConfig cfg_;
  int64_t capacity_;                         // key slots per (b, h) in the K/V buffers
  std::vector<float> q_;                     // [B, Hq, S_q, D]
  std::vector<uint8_t> k_, v_;               // [B, Hkv, capacity, D|Dv] in kv_dtype
  std::vector<int32_t> q_pos_, k_pos_, kv_valid_, q_blk_, k_blk_;  // [B,S_q], [B,S_kv], [B], ...
  std::vector<float> bias_;                  // [B, Hq|1, S_q, S_kv]
  std::vector<uint8_t> bool_mask_;           // [B, 1, S_q, S_kv]
};

}  // namespace tessera::testing
