// The ONNX adapters (src/onnx/): hand-checkable tiny cases and bad input. Conformance against
// onnxruntime and the ONNX reference lives in python/tests/test_onnx_*.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tessera/aligned_buffer.h"
#include "tessera/dtype.h"
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
struct TinyAttention {
  std::vector<float> q = {1, 1}, k = {0, kLn3}, v = {0, 4}, y = std::vector<float>(2, -1);
  AttentionInputs in;
  AttentionAttrs attrs;
  AttentionOutputs out;

  TinyAttention() {
    in.q = F32(q, {1, 1, 2, 1});  // [B, H, S_q, D]
    in.k = F32(k, {1, 1, 2, 1});
    in.v = F32(v, {1, 1, 2, 1});
    attrs.scale = 1.0f;
    out.y = {y.data(), {1, 1, 2, 1}};
  }
};

TEST(OnnxAttention, TinyCausalCaseByHand) {
  TinyAttention t;
  t.attrs.is_causal = 1;
  Ctx c;
  ASSERT_TRUE(Attention(t.in, t.attrs, t.out, c.ctx).ok());
  EXPECT_FLOAT_EQ(t.y[0], 0.0f);  // query 0 sees key 0 only (top-left without a cache)
  EXPECT_NEAR(t.y[1], 3.0f, 1e-6);
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
  std::vector<float> y(16), qk(16);
  AttentionOutputs out;
  out.y = {y.data(), {1, 4, 2, 2}};
  out.qk_matmul_output = MutableTensorRef{qk.data(), {1, 4, 2, 3}};
  Ctx c;
  ExpectError(Attention(in, {}, out, c.ctx), StatusCode::kInvalidArgument, {"qk_matmul_output must be [1, 4, 2, 2]"});
  out.qk_matmul_output.reset();
  out.y.shape = {1, 4, 2, 3};
  ExpectError(Attention(in, {}, out, c.ctx), StatusCode::kInvalidArgument, {"Y must be [1, 4, 2, 2]"});

  AttentionAttrs attrs;
  attrs.softmax_precision = 2;
  ExpectError(InferAttentionShapes(in, attrs).status(), StatusCode::kInvalidArgument,
              {"softmax_precision must be 1 (float), 10 (float16), 11 (double) or 16 (bfloat16), got 2"});
  attrs = {};
  attrs.left_window_size = -2;
  ExpectError(InferAttentionShapes(in, attrs).status(), StatusCode::kInvalidArgument, {"left_window_size", "got -2"});
  attrs.left_window_size = 1;
  attrs.opset = 24;
  ExpectError(InferAttentionShapes(in, attrs).status(), StatusCode::kInvalidArgument,
              {"left_window_size needs opset 25, the node has opset 24"});
  attrs = {};
  attrs.q_num_heads = 4;
  ExpectError(InferAttentionShapes(in, attrs).status(), StatusCode::kInvalidArgument,
              {"must not be given with 4-D inputs (opset 25)"});
}

// The tiny causal case with a window: left_window_size 0 leaves each query its own key only.
TEST(OnnxAttention, Opset25WindowByHand) {
  TinyAttention t;
  t.attrs.left_window_size = 0;
  t.attrs.right_window_size = 0;  // (no is_causal: the right bound alone hides key 1 from query 0)
  Ctx c;
  ASSERT_TRUE(Attention(t.in, t.attrs, t.out, c.ctx).ok());
  EXPECT_FLOAT_EQ(t.y[0], 0.0f);
  EXPECT_FLOAT_EQ(t.y[1], 4.0f);
}

TEST(OnnxAttention, QkMatmulOutputModesByHand) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> want = {{0, kLn3, 0, kLn3}, {0, kLn3, 0, kLn3}, {0, -inf, 0, kLn3},
                                                {1, 0, 0.25f, 0.75f}};
  for (int64_t mode = 0; mode < 4; ++mode) {
    TinyAttention t;
    t.attrs.is_causal = 1;
    t.attrs.qk_matmul_output_mode = mode;
    std::vector<float> qk(4, 7);
    t.out.qk_matmul_output = MutableTensorRef{qk.data(), {1, 1, 2, 2}};
    Ctx c;
    ASSERT_TRUE(Attention(t.in, t.attrs, t.out, c.ctx).ok());
    for (int i = 0; i < 4; ++i) {
      if (std::isinf(want[mode][i])) {
        EXPECT_EQ(qk[i], want[mode][i]) << "mode " << mode << " at " << i;
      } else {
        EXPECT_NEAR(qk[i], want[mode][i], 1e-6) << "mode " << mode << " at " << i;
      }
    }
  }
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
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"do_rotary=1 needs the cos_cache and sin_cache inputs"});
  }
  {
    TinyGqa t;
    t.attrs.causal = 0;
    t.attrs.local_window_size = 2;
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"local_window_size must be -1 when causal is 0, got 2"});
  }
  {
    TinyGqa t;
    const std::vector<float> sink = {0};
    t.in.head_sink = F32(sink, {1});
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"head_sink must be [2] (num_heads), got [1]"});
  }
  {
    TinyGqa t;
    std::vector<float> qk(4);
    t.out.output_qk = MutableTensorRef{qk.data(), {1, 2, 1, 2}};
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"output_qk is requested but qk_output is 0"});
  }
  {
    TinyGqa t;
    t.out.present_value.data = t.output.data();  // key in place, value not
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"present_key and present_value"});
  }
}

// Scores 0 and ln 3 (exp 1 and 3), values 0 and 4: a sink z makes the output 12 / (4 + e^z).
TEST(OnnxGroupQueryAttention, SmoothSoftmaxAndHeadSinkByHand) {
  Ctx c;
  {
    TinyGqa t;
    t.attrs.smooth_softmax = 1;  // a sink of 0 for both heads
    ASSERT_TRUE(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx).ok());
    EXPECT_NEAR(t.output[0], 2.4f, 1e-6);
    EXPECT_NEAR(t.output[1], 2.4f, 1e-6);
  }
  {
    TinyGqa t;
    const std::vector<float> sink = {std::log(4.0f), -std::numeric_limits<float>::infinity()};
    t.in.head_sink = F32(sink, {2});
    t.attrs.smooth_softmax = 0;  // head_sink applies whatever smooth_softmax says (as onnxruntime)
    ASSERT_TRUE(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx).ok());
    EXPECT_NEAR(t.output[0], 1.5f, 1e-6);
    EXPECT_NEAR(t.output[1], 3.0f, 1e-6);
  }
}

TEST(OnnxGroupQueryAttention, OutputQkByHand) {
  for (int64_t mode : {1, 2}) {
    TinyGqa t;
    t.attrs.qk_output = mode;
    std::vector<float> qk(4, 7);
    t.out.output_qk = MutableTensorRef{qk.data(), {1, 2, 1, 2}};
    Ctx c;
    ASSERT_TRUE(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx).ok());
    const std::vector<float> want = mode == 1 ? std::vector<float>{0, kLn3, 0, kLn3} : std::vector<float>{0.25f, 0.75f, 0.25f, 0.75f};
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(qk[i], want[i], 1e-6) << "qk_output " << mode << " at " << i;
  }
}

// A first prompt of two tokens without a past (present separate): causal = 0 lets query 0 see key 1.
TEST(OnnxGroupQueryAttention, CausalZeroSeesLaterKeys) {
  const std::vector<float> query = {1, 1}, key = {0, kLn3}, value = {0, 4};
  const std::vector<int32_t> seqlens_k = {1};
  const int32_t total = 2;
  for (int64_t causal : {1, 0}) {
    GroupQueryAttentionInputs in;
    in.query = F32(query, {1, 2, 1});
    in.key = F32(key, {1, 2, 1});
    in.value = F32(value, {1, 2, 1});
    in.seqlens_k = TensorRef{seqlens_k.data(), ElemType::kInt32, {1}};
    in.total_sequence_length = TensorRef{&total, ElemType::kInt32, {}};
    GroupQueryAttentionAttrs attrs;
    attrs.num_heads = attrs.kv_num_heads = 1;
    attrs.scale = 1.0f;
    attrs.causal = causal;
    std::vector<float> output(2), pk(2), pv(2);
    GroupQueryAttentionOutputs out;
    out.output = {output.data(), {1, 2, 1}};
    out.present_key = {pk.data(), {1, 1, 2, 1}};
    out.present_value = {pv.data(), {1, 1, 2, 1}};
    Ctx c;
    ASSERT_TRUE(GroupQueryAttention(in, attrs, out, c.ctx).ok());
    EXPECT_NEAR(output[0], causal ? 0.0f : 3.0f, 1e-6);
    EXPECT_NEAR(output[1], 3.0f, 1e-6);
  }
}

// The block_ids extension (com.tessera.TesseraGroupQueryAttention): a first prompt of two tokens,
// keys 0 and ln 3, values 0 and 4. Query 0 sees key 1 only when both tokens are in one block (3,
// else 0). With local_window_size 1 query 1 sees key 0 only if blocks ignore the window (3, else 4).
struct BlockCase {
  std::vector<int32_t> blocks;
  int64_t window, ignore_window;
  float want0, want1;
};

TEST(OnnxGroupQueryAttention, BlockIdsByHand) {
  const std::vector<float> query = {1, 1}, key = {0, kLn3}, value = {0, 4};
  const std::vector<int32_t> seqlens_k = {1};
  const int32_t total = 2;
  for (const BlockCase& bc : {BlockCase{{0, 0}, -1, 0, 0, 3}, BlockCase{{1, 1}, -1, 0, 3, 3},
                              BlockCase{{1, 2}, -1, 0, 0, 3}, BlockCase{{0, 1}, -1, 0, 0, 3},
                              BlockCase{{1, 1}, 1, 0, 3, 4}, BlockCase{{1, 1}, 1, 1, 3, 3}}) {
    GroupQueryAttentionInputs in;
    in.query = F32(query, {1, 2, 1});
    in.key = F32(key, {1, 2, 1});
    in.value = F32(value, {1, 2, 1});
    in.seqlens_k = TensorRef{seqlens_k.data(), ElemType::kInt32, {1}};
    in.total_sequence_length = TensorRef{&total, ElemType::kInt32, {}};
    in.block_ids = TensorRef{bc.blocks.data(), ElemType::kInt32, {1, 2}};
    GroupQueryAttentionAttrs attrs;
    attrs.num_heads = attrs.kv_num_heads = 1;
    attrs.scale = 1.0f;
    attrs.local_window_size = bc.window;
    attrs.blocks_ignore_window = bc.ignore_window;
    std::vector<float> output(2), pk(2), pv(2);
    GroupQueryAttentionOutputs out;
    out.output = {output.data(), {1, 2, 1}};
    out.present_key = {pk.data(), {1, 1, 2, 1}};
    out.present_value = {pv.data(), {1, 1, 2, 1}};
    Ctx c;
    ASSERT_TRUE(GroupQueryAttention(in, attrs, out, c.ctx).ok());
    EXPECT_NEAR(output[0], bc.want0, 1e-6) << bc.blocks[0] << "," << bc.blocks[1] << " window " << bc.window;
    EXPECT_NEAR(output[1], bc.want1, 1e-6) << bc.blocks[0] << "," << bc.blocks[1] << " window " << bc.window;
  }
}

// Windowed caches (sliding_window_cache = 1): one head, D = 1, all keys 0, so a query's output
// is the mean of the values it sees; value = the token's position. Window W = 2: the query and
// the token before it.
struct WindowStep {
  std::vector<float> query, key, value;
  std::vector<int32_t> seqlens_k;
  int32_t total;
  GroupQueryAttentionInputs in;
  GroupQueryAttentionAttrs attrs;
  std::vector<float> output;
  GroupQueryAttentionOutputs out;

  // Tokens [first, first + n) into a cache of capacity C (past) / present (in place when equal).
  WindowStep(int first, int n, int64_t C, std::vector<float>& past_k, std::vector<float>& past_v,
             std::vector<float>& present_k, std::vector<float>& present_v)
      : query(n, 1.0f), key(n, 0.0f), value(n), seqlens_k{first + n - 1}, total(first + n), output(n, -1.0f) {
    for (int i = 0; i < n; ++i) value[i] = static_cast<float>(first + i);
    in.query = F32(query, {1, n, 1});
    in.key = F32(key, {1, n, 1});
    in.value = F32(value, {1, n, 1});
    in.past_key = F32(past_k, {1, 1, C, 1});
    in.past_value = F32(past_v, {1, 1, C, 1});
    in.seqlens_k = TensorRef{seqlens_k.data(), ElemType::kInt32, {1}};
    in.total_sequence_length = TensorRef{&total, ElemType::kInt32, {}};
    attrs.num_heads = attrs.kv_num_heads = 1;
    attrs.scale = 1.0f;
    attrs.local_window_size = 2;
    attrs.sliding_window_cache = 1;
    out.output = {output.data(), {1, n, 1}};
    out.present_key = {present_k.data(), {1, 1, C, 1}};
    out.present_value = {present_v.data(), {1, 1, C, 1}};
  }
};

TEST(OnnxGroupQueryAttention, WindowCacheInPlaceByHand) {
  std::vector<float> k(2, 9.0f), v(2, 9.0f);  // capacity C = W = 2: one row evicted per step
  Ctx c;
  for (int t = 0; t < 6; ++t) {
    WindowStep s(t, 1, 2, k, v, k, v);
    ASSERT_TRUE(GroupQueryAttention(s.in, s.attrs, s.out, c.ctx).ok()) << t;
    EXPECT_FLOAT_EQ(s.output[0], t == 0 ? 0.0f : t - 0.5f) << t;
    if (t == 0) {
      EXPECT_EQ(v[0], 0.0f);
    } else {
      EXPECT_EQ(v, (std::vector<float>{t - 1.0f, static_cast<float>(t)})) << t;  // the newest two, in order
    }
  }
}

TEST(OnnxGroupQueryAttention, WindowCacheStagedPromptByHand) {
  // Capacity 3, window 2: evicted 2 at a time. A 5-token prompt exceeds the cache (staged); it
  // leaves positions 2-4 (L(5) = 3); the next token leaves positions 4-5 (L(6) = 2). present is
  // a separate buffer: rows past L are zeros.
  std::vector<float> pk(3, 9.0f), pv(3, 9.0f), k(3, 9.0f), v(3, 9.0f);
  Ctx c;
  WindowStep prompt(0, 5, 3, pk, pv, k, v);
  ASSERT_TRUE(GroupQueryAttention(prompt.in, prompt.attrs, prompt.out, c.ctx).ok());
  EXPECT_EQ(prompt.output, (std::vector<float>{0.0f, 0.5f, 1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(v, (std::vector<float>{2, 3, 4}));
  std::vector<float> k2(3, 9.0f), v2(3, 9.0f);
  WindowStep next(5, 1, 3, k, v, k2, v2);
  ASSERT_TRUE(GroupQueryAttention(next.in, next.attrs, next.out, c.ctx).ok());
  EXPECT_FLOAT_EQ(next.output[0], 4.5f);
  EXPECT_EQ(v2, (std::vector<float>{4, 5, 0}));
  EXPECT_EQ(k2, (std::vector<float>{0, 0, 0}));
}

TEST(OnnxGroupQueryAttention, WindowCacheNeedsAWindowAndRoom) {
  std::vector<float> k(1), v(1);
  Ctx c;
  WindowStep small(0, 1, 1, k, v, k, v);  // capacity 1 < window 2
  ExpectError(GroupQueryAttention(small.in, small.attrs, small.out, c.ctx), StatusCode::kInvalidArgument,
              {"past_key capacity 1 must be >= local_window_size 2"});
  std::vector<float> k2(2), v2(2);
  WindowStep no_window(0, 1, 2, k2, v2, k2, v2);
  no_window.attrs.local_window_size = -1;
  ExpectError(GroupQueryAttention(no_window.in, no_window.attrs, no_window.out, c.ctx), StatusCode::kInvalidArgument,
              {"sliding_window_cache = 1 needs local_window_size > 0"});
}

TEST(OnnxGroupQueryAttention, BadBlockIdsAreNamed) {
  Ctx c;
  {
    TinyGqa t;
    const std::vector<int32_t> blocks = {-3};
    t.in.block_ids = TensorRef{blocks.data(), ElemType::kInt32, {1, 1}};
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"block_ids[0][0] = -3 is negative"});
    EXPECT_EQ(t.cache_k, (std::vector<float>{0, 7, 7, 7}));  // refused before any write
  }
  {
    TinyGqa t;
    const std::vector<int32_t> blocks = {1, 1};
    t.in.block_ids = TensorRef{blocks.data(), ElemType::kInt32, {1, 2}};
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"block_ids must be [1, 1]", "got [1, 2]"});
  }
  {
    TinyGqa t;
    const std::vector<int64_t> blocks = {1};
    t.in.block_ids = TensorRef{blocks.data(), ElemType::kInt64, {1, 1}};
    ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
                {"block_ids must be int32, got int64"});
  }
}

// D = 2, one head: a decode step at position 1 after key/value 0 at row 0. The rotary tables turn
// position 1 by 90 degrees, so key (1, 0) enters the cache as (0, 1) and query (1, 0) becomes
// (0, 1): scores 0 and 1, output 4e / (1 + e) in both dims. position_ids [[0]] (no rotation)
// leaves the key as it is.
TEST(OnnxGroupQueryAttention, RotaryByHand) {
  const std::vector<float> query = {1, 0}, key = {1, 0}, value = {4, 4};
  const std::vector<float> cos = {1, 0}, sin = {0, 1};  // [2 positions, R/2 = 1]
  const std::vector<int32_t> seqlens_k = {1};
  const std::vector<int64_t> position_ids = {0};
  const int32_t total = 2;
  for (bool with_ids : {false, true}) {
    std::vector<float> cache_k(6, 0), cache_v(6, 0);  // [1, 1, 3, 2]
    GroupQueryAttentionInputs in;
    in.query = F32(query, {1, 1, 2});
    in.key = F32(key, {1, 1, 2});
    in.value = F32(value, {1, 1, 2});
    in.past_key = F32(cache_k, {1, 1, 3, 2});
    in.past_value = F32(cache_v, {1, 1, 3, 2});
    in.seqlens_k = TensorRef{seqlens_k.data(), ElemType::kInt32, {1}};
    in.total_sequence_length = TensorRef{&total, ElemType::kInt32, {}};
    in.cos_cache = F32(cos, {2, 1});
    in.sin_cache = F32(sin, {2, 1});
    if (with_ids) in.position_ids = TensorRef{position_ids.data(), ElemType::kInt64, {1, 1}};
    GroupQueryAttentionAttrs attrs;
    attrs.num_heads = attrs.kv_num_heads = 1;
    attrs.scale = 1.0f;
    attrs.do_rotary = 1;
    std::vector<float> output(2);
    GroupQueryAttentionOutputs out;
    out.output = {output.data(), {1, 1, 2}};
    out.present_key = {cache_k.data(), {1, 1, 3, 2}};
    out.present_value = {cache_v.data(), {1, 1, 3, 2}};
    Ctx c;
    ASSERT_TRUE(GroupQueryAttention(in, attrs, out, c.ctx).ok());
    if (with_ids) {
      EXPECT_EQ(cache_k, (std::vector<float>{0, 0, 1, 0, 0, 0}));
      continue;
    }
    EXPECT_EQ(cache_k, (std::vector<float>{0, 0, 0, 1, 0, 0}));
    const float e = std::exp(1.0f);
    EXPECT_NEAR(output[0], 4 * e / (1 + e), 1e-6);
    EXPECT_NEAR(output[1], 4 * e / (1 + e), 1e-6);
  }
}

// A bf16 cache: the new row is rounded to bf16 as it enters, and attention reads the rounded key.
TEST(OnnxGroupQueryAttention, Bf16CacheInPlace) {
  TinyGqa t;
  std::vector<uint16_t> ck(4, F32ToBf16(7)), cv(4, F32ToBf16(7));
  ck[0] = cv[0] = F32ToBf16(0);
  t.in.past_key = TensorRef{ck.data(), ElemType::kBFloat16, {1, 1, 4, 1}};
  t.in.past_value = TensorRef{cv.data(), ElemType::kBFloat16, {1, 1, 4, 1}};
  t.out.present_key = {ck.data(), {1, 1, 4, 1}, ElemType::kBFloat16};
  t.out.present_value = {cv.data(), {1, 1, 4, 1}, ElemType::kBFloat16};
  Ctx c;
  ASSERT_TRUE(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx).ok());
  EXPECT_EQ(ck[1], F32ToBf16(kLn3));
  EXPECT_EQ(cv[1], F32ToBf16(4));
  EXPECT_EQ(ck[2], F32ToBf16(7));  // rows >= T untouched
  const double e = std::exp(static_cast<double>(Bf16ToF32(F32ToBf16(kLn3))));
  EXPECT_NEAR(t.output[0], 4 * e / (1 + e), 1e-6);
  t.out.present_key.type = ElemType::kFloat32;
  ExpectError(GroupQueryAttention(t.in, t.attrs, t.out, c.ctx), StatusCode::kInvalidArgument,
              {"present_key must be bfloat16, got float32"});
}

}  // namespace
}  // namespace tessera::onnx
