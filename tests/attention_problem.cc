#include "attention_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include <gtest/gtest.h>

#include "attention/mask.h"
#include "tessera/aligned_buffer.h"

namespace tessera::testing {

std::string ProblemConfig::Describe() const {
  std::ostringstream s;
  s << "B=" << batch << " Hq=" << hq << " Hkv=" << hkv << " S_q=" << s_q << " S_kv=" << s_kv << " D=" << d
    << " Dv=" << dv << " kv=" << DTypeName(kv_dtype) << " causal=" << causal << " window=(" << window_left << ","
    << window_right << ") blocks=" << blocks << " blocks_ignore_window=" << blocks_ignore_window << " padding=" << padding << " ring=" << ring
    << " random_q_pos=" << random_q_pos << " dense=" << dense << " scale=" << scale << " softcap=" << softcap
    << " strided=" << strided_kv;
  return s.str();
}

ProblemConfig RandomMaskConfig(std::mt19937& rng, int64_t batch, int64_t hq, int64_t hkv, int64_t s_q, int64_t s_kv,
                               int64_t d, DType dtype) {
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ProblemConfig c;
  c.batch = batch, c.hq = hq, c.hkv = hkv, c.s_q = s_q, c.s_kv = s_kv, c.d = d, c.kv_dtype = dtype;
  c.dv = coin(0.25) ? std::max<int64_t>(8, d / 2) : d;  // D != Dv sometimes
  c.causal = coin(0.8);
  if (coin(0.5)) {
    c.window_left = uniform(0, static_cast<int>(std::min<int64_t>(s_kv, 300)));
    c.window_right = c.causal ? 0 : uniform(-1, 40);
  }
  c.blocks = coin(0.5);
  c.blocks_ignore_window = c.blocks && coin(0.3);
  c.padding = coin(0.4);
  c.ring = coin(0.3);
  c.random_q_pos = coin(0.15);
  c.dense = coin(0.2) ? uniform(1, 3) : 0;
  c.scale = coin(0.5) ? 1.0f : 0.0f;
  c.softcap = coin(0.3) ? (coin(0.5) ? 2.0f : 30.0f) : 0.0f;
  c.strided_kv = coin(0.3);
  return c;
}

Problem::Problem(const ProblemConfig& cfg, uint32_t seed) : cfg_(cfg) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t B = cfg.batch, S_q = cfg.s_q, S_kv = cfg.s_kv;
  capacity_ = cfg.strided_kv ? S_kv + 17 : S_kv;
  if (cfg_.scale == 0) cfg_.scale = 1.0f / std::sqrt(static_cast<float>(cfg.d));

  q_.resize(B * cfg.hq * S_q * cfg.d);
  for (float& x : q_) x = nd(rng);
  const size_t es = DTypeSize(cfg.kv_dtype);
  std::vector<float> tmp;
  auto fill = [&](std::vector<uint8_t>& dst, int64_t dim) {
    tmp.resize(B * cfg.hkv * capacity_ * dim);
    for (float& x : tmp) x = nd(rng);
    dst.resize(tmp.size() * es);
    EncodeFromF32(cfg.kv_dtype, tmp.data(), dst.data(), tmp.size());
  };
  fill(k_, cfg.d);
  fill(v_, cfg.dv);

  kv_valid_.resize(B);
  k_pos_.resize(B * S_kv);
  k_blk_.assign(B * S_kv, -1);
  q_pos_.resize(B * S_q);
  q_blk_.assign(B * S_q, -1);
  for (int64_t b = 0; b < B; ++b) {
    int64_t valid = S_kv;
    if (cfg.padding) valid = (b == 0 && B > 1) ? 0 : uniform(std::min<int64_t>(S_q, S_kv) / 2, S_kv);
    if (cfg.padding && b == B - 1) valid = S_kv;  // keep one unpadded row
    kv_valid_[b] = static_cast<int32_t>(valid);
    // Positions: the row holds tokens [p0, p0 + valid); in ring layout token t sits at slot t % S_kv.
    const int64_t p0 = cfg.ring ? uniform(S_kv, 3 * S_kv) : 0;
    for (int64_t j = 0; j < S_kv; ++j) k_pos_[b * S_kv + j] = static_cast<int32_t>(p0 + j);
    if (cfg.ring) {
      const int64_t shift = p0 % S_kv;
      for (int64_t t = 0; t < valid; ++t) {
        // Slot of token p0 + t in a ring of `valid` live entries (rotation keeps all valid slots filled).
        k_pos_[b * S_kv + (t + shift) % std::max<int64_t>(valid, 1)] = static_cast<int32_t>(p0 + t);
      }
    }
    // Image blocks over token positions [p0, p0 + valid): 1-3 runs starting just before a 64-key
    // tile edge, so blocks straddle tiles; consecutive runs are different images.
    std::vector<std::pair<int64_t, int64_t>> runs;  // [start, end) in token offsets
    if (cfg.blocks && valid > 2) {
      int64_t cursor = uniform(0, std::min<int64_t>(valid - 1, 70));
      const int n = static_cast<int>(uniform(1, 3));
      for (int r = 0; r < n && cursor < valid; ++r) {
        const int64_t start = std::min(valid - 1, ((cursor + 63) / 64) * 64 - uniform(0, 5));
        const int64_t len = uniform(1, std::max<int64_t>(2, std::min<int64_t>(valid - start, 150)));
        runs.push_back({std::max(start, cursor), std::min(valid, std::max(start, cursor) + len)});
        cursor = runs.back().second + (uniform(0, 1) ? 0 : uniform(1, 40));  // adjacent images sometimes
      }
    }
    auto block_of = [&](int64_t offset) {
      for (size_t r = 0; r < runs.size(); ++r)
        if (offset >= runs[r].first && offset < runs[r].second) return static_cast<int32_t>(r + 10 * b);
      return -1;
    };
    for (int64_t j = 0; j < valid; ++j) k_blk_[b * S_kv + j] = block_of(k_pos_[b * S_kv + j] - p0);
    // Padding slots hold junk positions/blocks that must never matter.
    for (int64_t j = valid; j < S_kv; ++j) {
      k_pos_[b * S_kv + j] = static_cast<int32_t>(uniform(-5, 5 * S_kv));
      k_blk_[b * S_kv + j] = static_cast<int32_t>(uniform(-1, 3));
    }
    for (int64_t i = 0; i < S_q; ++i) {
      const int64_t off = cfg.random_q_pos ? uniform(-3, valid + 3) : valid - S_q + i;  // bottom-right
      q_pos_[b * S_q + i] = static_cast<int32_t>(p0 + off);
      q_blk_[b * S_q + i] = (off >= 0 && off < valid) ? block_of(off) : -1;
    }
  }
  if (cfg.dense == 1 || cfg.dense == 2) {
    const int64_t heads = cfg.dense == 1 ? cfg.hq : 1;
    bias_.resize(B * heads * S_q * S_kv);
    std::uniform_real_distribution<float> ud(-2.0f, 2.0f);
    for (float& x : bias_) x = std::bernoulli_distribution(0.1)(rng) ? -std::numeric_limits<float>::infinity() : ud(rng);
  } else if (cfg.dense == 3) {
    bool_mask_.resize(B * S_q * S_kv);
    for (uint8_t& x : bool_mask_) x = std::bernoulli_distribution(0.85)(rng);
  }
}

AttentionParams Problem::Params(std::vector<float>& out) const {
  const ProblemConfig& c = cfg_;
  out.assign(OutSize(), -12345.0f);  // poison: every element must be written
  AttentionParams p;
  p.q = HeadsView::Dense(q_.data(), DType::kF32, c.batch, c.hq, c.s_q, c.d);
  p.k = {k_.data(), c.kv_dtype, c.batch, c.hkv, c.s_kv, c.d, c.hkv * capacity_ * c.d, capacity_ * c.d, c.d};
  p.v = {v_.data(), c.kv_dtype, c.batch, c.hkv, c.s_kv, c.dv, c.hkv * capacity_ * c.dv, capacity_ * c.dv, c.dv};
  p.out = OutView::Dense(out.data(), c.batch, c.hq, c.s_q, c.dv);
  p.mask.q_pos = q_pos_.data();
  p.mask.k_pos = k_pos_.data();
  p.mask.kv_valid = kv_valid_.data();
  p.mask.causal = c.causal;
  p.mask.window_left = c.window_left;
  p.mask.window_right = c.window_right;
  if (c.blocks) {
    p.mask.q_block = q_blk_.data();
    p.mask.k_block = k_blk_.data();
    p.mask.blocks_ignore_window = c.blocks_ignore_window;
  }
  if (c.dense == 1 || c.dense == 2) {
    p.mask.dense.kind = DenseMask::Kind::kAdditive;
    p.mask.dense.data = bias_.data();
    p.mask.dense.stride_head = c.dense == 1 ? c.s_q * c.s_kv : 0;
    p.mask.dense.stride_batch = (c.dense == 1 ? c.hq : 1) * c.s_q * c.s_kv;
    p.mask.dense.stride_q = c.s_kv;
    p.mask.dense.stride_k = 1;
  } else if (c.dense == 3) {
    p.mask.dense.kind = DenseMask::Kind::kBool;
    p.mask.dense.data = bool_mask_.data();
    p.mask.dense.stride_batch = c.s_q * c.s_kv;
    p.mask.dense.stride_head = 0;
    p.mask.dense.stride_q = c.s_kv;
    p.mask.dense.stride_k = 1;
  }
  p.scale = cfg_.scale;
  p.softcap = c.softcap;
  return p;
}

void Problem::PoisonInvisibleKeys() {
  const ProblemConfig& c = cfg_;
  std::vector<float> dummy;
  const AttentionParams p = Params(dummy);
  const size_t es = DTypeSize(c.kv_dtype);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t j = 0; j < c.s_kv; ++j) {
      bool seen = false;
      if (j < attn::KvValid(p.mask, b, c.s_kv)) {
        for (int64_t i = 0; i < c.s_q && !seen; ++i) {
          const int32_t qb = p.mask.q_block ? p.mask.q_block[b * c.s_q + i] : -1;
          const int32_t kb = p.mask.k_block ? p.mask.k_block[b * c.s_kv + j] : -1;
          seen = attn::StructuredVisible(p.mask, p.mask.q_pos[b * c.s_q + i], qb, p.mask.k_pos[b * c.s_kv + j], kb);
        }
      }
      if (seen) continue;
      for (int64_t h = 0; h < c.hkv; ++h) {
        EncodeFromF32(c.kv_dtype, std::vector<float>(c.d, nan).data(),
                      k_.data() + ((b * c.hkv + h) * capacity_ + j) * c.d * es, c.d);
        EncodeFromF32(c.kv_dtype, std::vector<float>(c.dv, nan).data(),
                      v_.data() + ((b * c.hkv + h) * capacity_ + j) * c.dv * es, c.dv);
      }
    }
  }
}

void Problem::SetElement(int what, int64_t b, int64_t h, int64_t t, int64_t d, float x) {
  const ProblemConfig& c = cfg_;
  if (what == 0) {
    q_[((b * c.hq + h) * c.s_q + t) * c.d + d] = x;
    return;
  }
  const int64_t dim = what == 1 ? c.d : c.dv;
  std::vector<uint8_t>& buf = what == 1 ? k_ : v_;
  EncodeFromF32(c.kv_dtype, &x, buf.data() + (((b * c.hkv + h) * capacity_ + t) * dim + d) * DTypeSize(c.kv_dtype), 1);
}

void Problem::InjectNonFinite(std::mt19937& rng) {
  const ProblemConfig& c = cfg_;
  const float kinds[3] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto bad = [&] { return kinds[uniform(0, 2)]; };
  const size_t es = DTypeSize(c.kv_dtype);
  const int64_t q_rows = c.batch * c.hq * c.s_q;
  for (int n = uniform(0, 2); n > 0; --n) q_[uniform(0, q_rows - 1) * c.d + uniform(0, c.d - 1)] = bad();
  // A K or V element of a random slot: half near the end of the row's keys, where bottom-right
  // queries sit and causal tiles are partly visible.
  auto poke = [&](std::vector<uint8_t>& buf, int64_t dim) {
    const int64_t b = uniform(0, c.batch - 1), h = uniform(0, c.hkv - 1);
    const int64_t j = uniform(0, 1) ? uniform(0, c.s_kv - 1) : uniform(std::max<int64_t>(0, c.s_kv - c.s_q - 8), c.s_kv - 1);
    const float x = bad();
    EncodeFromF32(c.kv_dtype, &x, buf.data() + (((b * c.hkv + h) * capacity_ + j) * dim + uniform(0, dim - 1)) * es, 1);
  };
  for (int n = uniform(0, 3); n > 0; --n) poke(k_, c.d);
  for (int n = uniform(1, 4); n > 0; --n) poke(v_, c.dv);
}

std::vector<float> Problem::Run(AttentionPrecision precision, AttentionKernel kernel, ThreadPool* pool) const {
  std::vector<float> out;
  AttentionParams p = Params(out);
  p.precision = precision;
  Arena scratch;
  AttentionContext ctx{pool, &scratch};
  const Status st = Attention(p, ctx, kernel);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

double Problem::MaxAbsFiniteV() const {
  std::vector<float> unused;
  const AttentionParams p = Params(unused);
  std::vector<float> row(p.v.dim);
  double mx = 0;
  for (int64_t b = 0; b < p.v.batch; ++b)
    for (int64_t h = 0; h < p.v.heads; ++h)
      for (int64_t j = 0; j < p.v.seq; ++j) {
        DecodeToF32(p.v.dtype, p.v.At(b, h, j), row.data(), row.size());
        for (float x : row)
          if (std::isfinite(x)) mx = std::max(mx, double(std::fabs(x)));
      }
  return mx;
}

}  // namespace tessera::testing
