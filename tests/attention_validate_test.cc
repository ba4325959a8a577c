// Bad input to Attention()/AttentionBias() returns a Status naming the problem; nothing crashes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"

namespace tessera {
namespace {

struct Fixture {
  int64_t B = 2, Hq = 4, Hkv = 2, S_q = 3, S_kv = 5, D = 8, Dv = 8;
  std::vector<float> q, k, v, out, bias;
  std::vector<int32_t> q_pos, k_pos, valid, q_blk, k_blk;
  AttentionParams p;
  Fixture() {
    q.assign(B * Hq * S_q * D, 0.5f);
    k.assign(B * Hkv * S_kv * D, 0.25f);
    v.assign(B * Hkv * S_kv * Dv, 1.0f);
    out.assign(B * Hq * S_q * Dv, 0.0f);
    bias.assign(B * Hq * S_q * S_kv, 0.0f);
    q_pos = {2, 3, 4, 2, 3, 4};
    k_pos = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
    valid = {5, 5};
    q_blk.assign(B * S_q, -1);
    k_blk.assign(B * S_kv, -1);
    p.q = HeadsView::Dense(q.data(), DType::kF32, B, Hq, S_q, D);
    p.k = HeadsView::Dense(k.data(), DType::kF32, B, Hkv, S_kv, D);
    p.v = HeadsView::Dense(v.data(), DType::kF32, B, Hkv, S_kv, Dv);
    p.out = OutView::Dense(out.data(), B, Hq, S_q, Dv);
    p.mask.q_pos = q_pos.data();
    p.mask.k_pos = k_pos.data();
    p.mask.kv_valid = valid.data();
  }
};

void ExpectError(const AttentionParams& p, const std::string& fragment) {
  Arena scratch;
  AttentionContext ctx{nullptr, &scratch};
  for (AttentionKernel k : {AttentionKernel::kAuto, AttentionKernel::kReference, AttentionKernel::kPrefill,
                            AttentionKernel::kDecode}) {
    Status s = Attention(p, ctx, k);
    ASSERT_FALSE(s.ok()) << "expected an error containing '" << fragment << "'";
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  }
}

TEST(AttentionValidate, AcceptsTheFixture) {
  Fixture f;
  Arena scratch;
  AttentionContext ctx{nullptr, &scratch};
  ASSERT_TRUE(Attention(f.p, ctx).ok());
}

TEST(AttentionValidate, ShapeErrors) {
  {
    Fixture f;
    f.p.k.batch = 1;
    ExpectError(f.p, "batch mismatch");
  }
  {
    Fixture f;
    f.p.q.heads = 3;
    f.p.out.heads = 3;
    ExpectError(f.p, "not a multiple of kv heads 2");
  }
  {
    Fixture f;
    f.p.q.dim = 7;
    ExpectError(f.p, "q head_dim 7 != k head_dim 8");
  }
  {
    Fixture f;
    f.p.v.seq = 4;
    ExpectError(f.p, "k has 5 keys but v has 4");
  }
  {
    Fixture f;
    f.p.out.dim = 4;
    ExpectError(f.p, "out must be [2, 4, 3, 8]");
  }
  {
    Fixture f;
    f.p.k.heads = 3;
    ExpectError(f.p, "k heads 3 != v heads 2");
  }
}

TEST(AttentionValidate, HeadDimBeyondMaximum) {
  Fixture f;
  std::vector<float> big_q(f.B * f.Hq * f.S_q * 513), big_k(f.B * f.Hkv * f.S_kv * 513);
  f.p.q = HeadsView::Dense(big_q.data(), DType::kF32, f.B, f.Hq, f.S_q, 513);
  f.p.k = HeadsView::Dense(big_k.data(), DType::kF32, f.B, f.Hkv, f.S_kv, 513);
  ExpectError(f.p, "head_dim 513 exceeds the supported maximum 512");
}

TEST(AttentionValidate, MaskErrors) {
  {
    Fixture f;
    f.valid[1] = 6;
    ExpectError(f.p, "kv_valid[1] = 6 is outside [0, 5]");
  }
  {
    Fixture f;
    f.valid[0] = -1;
    ExpectError(f.p, "kv_valid[0] = -1");
  }
  {
    Fixture f;
    f.p.mask.q_block = f.q_blk.data();
    ExpectError(f.p, "q_block and k_block must be given together");
  }
  {
    Fixture f;
    f.k_blk[3] = -2;
    f.p.mask.q_block = f.q_blk.data();
    f.p.mask.k_block = f.k_blk.data();
    ExpectError(f.p, "k_block[3] = -2");
  }
  {
    Fixture f;
    f.p.mask.window_left = -3;
    ExpectError(f.p, "window (-3, -1)");
  }
  {
    Fixture f;
    f.p.mask.q_pos = nullptr;
    ExpectError(f.p, "q_pos is required");
  }
  {
    Fixture f;
    f.bias[7] = std::numeric_limits<float>::quiet_NaN();
    f.p.mask.dense = {DenseMask::Kind::kAdditive, f.bias.data(), f.Hq * f.S_q * f.S_kv, f.S_q * f.S_kv, f.S_kv, 1};
    ExpectError(f.p, "bias is NaN at [0, 0, 1, 2]");
  }
  {
    Fixture f;
    f.bias[0] = std::numeric_limits<float>::infinity();
    f.p.mask.dense = {DenseMask::Kind::kAdditive, f.bias.data(), f.Hq * f.S_q * f.S_kv, f.S_q * f.S_kv, f.S_kv, 1};
    ExpectError(f.p, "bias is +inf");
  }
}

TEST(AttentionValidate, ScalarErrors) {
  {
    Fixture f;
    f.p.scale = std::numeric_limits<float>::infinity();
    ExpectError(f.p, "scale");
  }
  {
    Fixture f;
    f.p.softcap = -1.0f;
    ExpectError(f.p, "softcap");
  }
  {
    Fixture f;
    f.p.q.dtype = DType::kBF16;
    ExpectError(f.p, "q must be f32");
  }
  {
    Fixture f;
    f.p.v.dtype = DType::kF16;
    ExpectError(f.p, "k dtype f32 differs from v dtype f16");
  }
}

TEST(AttentionBiasExport, MatchesKernelVisibility) {
  // Export the mask, run attention with the exported bias as a dense mask and no structure,
  // and compare with the structured run: both must see exactly the same keys.
  Fixture f;
  f.p.mask.window_left = 1;
  f.p.mask.window_right = -1;  // unbounded to the right: block members may see later keys
  f.q_blk = {0, 0, -1, -1, 1, 1};
  f.k_blk = {-1, -1, 0, 0, 0, -1, -1, -1, 1, 1};
  f.p.mask.q_block = f.q_blk.data();
  f.p.mask.k_block = f.k_blk.data();
  f.valid = {5, 4};
  for (size_t i = 0; i < f.k.size(); ++i) f.k[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < f.v.size(); ++i) f.v[i] = std::cos(0.11f * i);
  std::vector<float> bias(f.B * f.S_q * f.S_kv);
  ASSERT_TRUE(AttentionBias(f.p.mask, f.B, f.S_q, f.S_kv, -std::numeric_limits<float>::infinity(), bias.data()).ok());
  // Hand-checked: batch row 0, query 0 (pos 2, block 0): the left window drops key pos 0,
  // causal keeps pos 1..2, keys at pos 3..4 (block 0) join through the block.
  // Batch row 1, query 1 (pos 3, block 1): window keeps pos 2..3; key pos 4 (block 1) is padding.
  const float inf = std::numeric_limits<float>::infinity();
  const float want_r0q0[5] = {-inf, 0, 0, 0, 0};
  const float want_r1q1[5] = {-inf, -inf, 0, 0, -inf};
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(bias[(0 * f.S_q + 0) * f.S_kv + j], want_r0q0[j]) << j;
    EXPECT_EQ(bias[(1 * f.S_q + 1) * f.S_kv + j], want_r1q1[j]) << j;
  }

  Arena scratch;
  AttentionContext ctx{nullptr, &scratch};
  ASSERT_TRUE(Attention(f.p, ctx, AttentionKernel::kReference).ok());
  const std::vector<float> structured = f.out;
  AttentionParams dense = f.p;
  dense.mask.causal = false;
  dense.mask.window_left = dense.mask.window_right = -1;
  dense.mask.q_block = dense.mask.k_block = nullptr;
  dense.mask.kv_valid = nullptr;
  dense.mask.dense = {DenseMask::Kind::kAdditive, bias.data(), f.S_q * f.S_kv, 0, f.S_kv, 1};
  ASSERT_TRUE(Attention(dense, ctx, AttentionKernel::kPrefill).ok());
  for (size_t i = 0; i < structured.size(); ++i) EXPECT_NEAR(f.out[i], structured[i], 1e-6f) << i;
}

TEST(AttentionBiasExport, BadInput) {
  Fixture f;
  std::vector<float> bias(f.B * f.S_q * f.S_kv);
  EXPECT_FALSE(AttentionBias(f.p.mask, f.B, f.S_q, f.S_kv, 1.0f, bias.data()).ok());
  EXPECT_FALSE(AttentionBias(f.p.mask, f.B, f.S_q, f.S_kv, -1.0f, nullptr).ok());
  f.valid[0] = 9;
  Status s = AttentionBias(f.p.mask, f.B, f.S_q, f.S_kv, -1.0f, bias.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("kv_valid[0] = 9"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera
