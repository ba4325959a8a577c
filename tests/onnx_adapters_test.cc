// The ONNX adapters (src/onnx/): hand-checkable tiny cases and bad input. Conformance against
// onnxruntime and the ONNX reference lives in python/tests/test_onnx_*.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/onnx/attention.h"
#include "tessera/onnx/group_query_attention.h"

namespace tessera::onnx {
namespace {

const float kLn3 = std::log(3.0f);

struct Ctx {
  Arena kernel_scratch, index_scratch;
  OpContext ctx{{nullptr, &kernel_scratch}, &index_scratch};
};

TensorRef F32(const std::vector<float>& v, std::vector<int64_t> shape) {
  return {v.data(), ElemType::kFloat32, std::move(shape)};
}

// Expects a Status with `code` whose message contains every piece of `parts`.
void ExpectError(const Status& st, StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), code) << st.message();
  for (const std::string& part : parts) EXPECT_NE(st.message().find(part), std::string::npos) << st.message();
}

// One head, D = 1, scale 1: scores are q*k. Keys 0 and ln 3 give weights 1/4 and 3/4, so with
// values 0 and 4 a query seeing both keys outputs 3, one seeing key 0 only outputs 0.
TEST(OnnxAttention, TinyCausalCaseByHand) {
  const std::vector<float> q = {1, 1}, k = {0, kLn3}, v = {0, 4};
  AttentionInputs in;
  in.q = F32(q, {1, 1, 2, 1});  // [B, H, S_q, D]
  in.k = F32(k, {1, 1, 2, 1});
  in.v = F32(v, {1, 1, 2, 1});
  AttentionAttrs attrs;
  attrs.is_causal = 1;
  attrs.scale = 1.0f;
  std::vector<float> y(2, -1);
  AttentionOutputs out;
  out.y = {y.data(), {1, 1, 2, 1}};
  Ctx c;
  ASSERT_TRUE(Attention(in, attrs, out, c.ctx).ok());
  EXPECT_FLOAT_EQ(y[0], 0.0f);  // query 0 sees key 0 only (top-left without a cache)
  EXPECT_NEAR(y[1], 3.0f, 1e-6);
}

TEST(OnnxAttention, PastIsConcatenatedAndOffsetsCausal) {
  // One new query after one cached key: it sits at position 1 and sees both keys.
  const std::vector<float> q = {1}, k = {kLn3}, v = {4}, pk = {0}, pv = {0};
  AttentionInputs in;
  in.q = F32(q, {1, 1, 1});  // 3-D [B, S_q, Hq*D]
  in.k = F32(k, {1, 1, 1});
  in.v = F32(v, {1, 1, 1});
  in.past_key = F32(pk, {1, 1, 1, 1});
  in.past_value = F32(pv, {1, 1, 1, 1});
  AttentionAttrs attrs;
  attrs.is_causal = 1;
  attrs.q_num_heads = attrs.kv_num_heads = 1;
  attrs.scale = 1.0f;
  std::vector<float> y(1), present_k(2), present_v(2);
  AttentionOutputs out;
  out.y = {y.data(), {1, 1, 1}};
  out.present_key = MutableTensorRef{present_k.data(), {1, 1, 2, 1}};
  out.present_value = MutableTensorRef{present_v.data(), {1, 1, 2, 1}};
  Ctx c;
  ASSERT_TRUE(Attention(in, attrs, out, c.ctx).ok());
  EXPECT_NEAR(y[0], 3.0f, 1e-6);
  EXPECT_EQ(present_k, (std::vector<float>{0, kLn3}));
  EXPECT_EQ(present_v, (std::vector<float>{0, 4}));
}

TEST(OnnxAttention, ShortBoolMaskHidesTrailingKeys) {
  // attn_mask [1] (one key column) of T = 2: key 1 is padded with false, so y = v[0].
  const std::vector<float> q = {1}, k = {0, kLn3}, v = {5, 4};
  const uint8_t mask[1] = {1};
  AttentionInputs in;
  in.q = F32(q, {1, 1, 1, 1});
  in.k = F32(k, {1, 1, 2, 1});
  in.v = F32(v, {1, 1, 2, 1});
  in.attn_mask = TensorRef{mask, ElemType::kBool, {1}};
  std::vector<float> y(1);
  AttentionOutputs out;
  out.y = {y.data(), {1, 1, 1, 1}};
  Ctx c;
  ASSERT_TRUE(Attention(in, AttentionAttrs{}, out, c.ctx).ok());
  EXPECT_FLOAT_EQ(y[0], 5.0f);
}

TEST(OnnxAttention, BadInputNamesOperatorArgumentAndValue) {
  const std::vector<float> x(64, 0.0f);
  AttentionInputs in;
  in.q = F32(x, {1, 4, 2, 2});
  in.k = F32(x, {1, 3, 2, 2});
  in.v = F32(x, {1, 3, 2, 2});
  EXPECT_EQ(InferAttentionShapes(in, {}).status().code(), StatusCode::kInvalidArgument);
  ExpectError(InferAttentionShapes(in, {}).status(), StatusCode::kInvalidArgument,
              {"onnx::Attention", "q_num_heads 4", "kv_num_heads 3"});

  in.k = F32(x, {1, 2, 2, 2});
  in.v = F32(x, {1, 2, 2, 2});
  in.q = F32(x, {1, 4, 2});
  ExpectError(InferAttentionShapes(in, {}).status(), StatusCode::kInvalidArgument, {"same rank", "[1, 4, 2]"});

  in.q = F32(x, {1, 4, 2, 2});
  in.attn_mask = F32(x, {3, 2, 2});
  ExpectError(InferAttentionShapes(in, {}).status(), StatusCode::kInvalidArgument,
              {"attn_mask", "[3, 2, 2]", "q_num_heads is 4"});

  in.attn_mask.reset();
  const std::vector<int64_t> nonpad = {3};
  in.nonpad_kv_seqlen = TensorRef{nonpad.data(), ElemType::kInt64, {1}};
  ExpectError(InferAttentionShapes(in, {}).status(), StatusCode::kInvalidArgument,
              {"nonpad_kv_seqlen[0] = 3", "[0, 2]"});
  AttentionAttrs opset23;
  opset23.opset = 23;
  ExpectError(InferAttentionShapes(in, opset23).status(), StatusCode::kInvalidArgument, {"opset 24"});

  in.nonpad_kv_seqlen.reset();
  std::vector<float> y(16);
  AttentionOutputs out;
  out.y = {y.data(), {1, 4, 2, 2}};
  out.qk_matmul_output = true;
  Ctx c;
  ExpectError(Attention(in, {}, out, c.ctx), StatusCode::kUnimplemented, {"qk_matmul_output"});
  out.qk_matmul_output = false;
  out.y.shape = {1, 4, 2, 3};
  ExpectError(Attention(in, {}, out, c.ctx), StatusCode::kInvalidArgument, {"Y must be [1, 4, 2, 2]"});
}

// GQA: 2 query heads share one KV head; D = 1, scale 1; the cache holds key 0 / value 0 at row 0.
struct TinyGqa {
  std::vector<float> query = {1, 1}, key = {kLn3}, value = {4};
  std::vector<float> cache_k = {0, 7, 7, 7}, cache_v = {0, 7, 7, 7};  // [1, 1, 4, 1]
  std::vector<int32_t> seqlens_k = {1};
  int32_t total = 2;
  GroupQueryAttentionInputs in;
  GroupQueryAttentionAttrs attrs;
  std::vector<float> output = std::vector<float>(2, -1);
  GroupQueryAttentionOutputs out;

  TinyGqa() {
    in.query = F32(query, {1, 1, 2});
    in.key = F32(key, {1, 1, 1});
    in.value = F32(value, {1, 1, 1});
    in.past_key = F32(cache_k, {1, 1, 4, 1});
    in.past_value = F32(cache_v, {1, 1, 4, 1});
    in.seqlens_k = TensorRef{seqlens_k.data(), ElemType::kInt32, {1}};
    in.total_sequence_length = TensorRef{&total, ElemType::kInt32, {}};
    attrs.num_heads = 2;
    attrs.kv_num_heads = 1;
    attrs.scale = 1.0f;
    out.output = {output.data(), {1, 1, 2}};
    out.present_key = {cache_k.data(), {1, 1, 4, 1}};  // in place
    out.present_value = {cache_v.data(), {1, 1, 4, 1}};
  }
};

TEST(OnnxGroupQueryAttention, TinyDecodeInPlaceByHand) {
  TinyGqa t;
  Ctx c;
  ASSERT_TRUE(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx).ok());
  EXPECT_EQ(t.cache_k, (std::vector<float>{0, kLn3, 7, 7}));  // written at seqlens_k[0]; rows >= T untouched
  EXPECT_EQ(t.cache_v, (std::vector<float>{0, 4, 7, 7}));
  EXPECT_NEAR(t.output[0], 3.0f, 1e-6);
  EXPECT_NEAR(t.output[1], 3.0f, 1e-6);
}

TEST(OnnxGroupQueryAttention, LocalWindowOfOneSeesOnlyTheQuery) {
  TinyGqa t;
  t.attrs.local_window_size = 1;  // one key visible, the query's own
  Ctx c;
  ASSERT_TRUE(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx).ok());
  EXPECT_FLOAT_EQ(t.output[0], 4.0f);
  EXPECT_FLOAT_EQ(t.output[1], 4.0f);
}

TEST(OnnxGroupQueryAttention, BadInputNamesOperatorArgumentAndValue) {
  Ctx c;
  {
    TinyGqa t;
    t.seqlens_k[0] = 2;
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"onnx::GroupQueryAttention", "seqlens_k[0] = 2", "[0, 1]"});
  }
  {
    TinyGqa t;
    t.total = 5;
    t.seqlens_k[0] = 4;
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"capacity 4", "total_sequence_length 5"});
  }
  {
    TinyGqa t;
    t.attrs.kv_num_heads = 3;
    ExpectError(InferGroupQueryAttentionShapes(t.in, t.attrs, true).status(), StatusCode::kInvalidArgument,
                {"num_heads 2", "kv_num_heads 3"});
  }
  {
    TinyGqa t;
    t.attrs.do_rotary = 1;
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kUnimplemented, {"do_rotary"});
  }
  {
    TinyGqa t;
    t.out.present_value.data = t.output.data();  // key in place, value not
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"present_key and present_value"});
  }
}

}  // namespace
}  // namespace tessera::onnx
