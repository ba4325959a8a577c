// Linear on prepacked panels, the path a model loaded with WeightLoadOptions::pack_panels_for
// takes: bf16 pair panels (ops::WeightView::pairs, ops::PackPairPanels) at matmul precision bf16
// and f32 panels (ops::WeightView::panels, ops::PackF32Panels) at precision f32. For each: against
// LinearReference on every shape class, the panels (not the stored matrix) are what is read, a
// token's result is the same alone or in any batch (decode = prefill), the paths that cannot use
// the panels fall back to the stored matrix, and the loader packs what Linear reads and keeps the
// model's logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include <unistd.h>

#include "io/safetensors_checkpoint.h"
#include "io/safetensors_writer.h"
#include "linear_check.h"
#include "model/loaded_model.h"
#include "ops/bf16_dot.h"
#include "runtime/session.h"
#include "tessera/aligned_buffer.h"
#include "tessera/gemm.h"
#include "tessera/linear.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ops::MatmulPrecision;

// A bf16 weight [out, in], its panels, and x [n, in + 5] (strided).
struct Problem {
  int64_t n, in, out, xs, ys;
  std::vector<uint16_t> w;
  AlignedBuffer panels;
  std::vector<float> x;
  AlignedBuffer scratch;  // x_pairs, GemmScratchWords(n, in) words

  ops::WeightView View() const {
    ops::WeightView v{w.data(), DType::kBF16, out, in};
    v.pairs = panels.as<uint32_t>();
    return v;
  }
  uint32_t* XPairs() { return scratch.as<uint32_t>(); }
};

Problem MakeProblem(std::mt19937& rng, int64_t n, int64_t in, int64_t out) {
  std::normal_distribution<float> nd;
  Problem p{n, in, out, in + 5, out + 3, std::vector<uint16_t>(out * in),
            AlignedBuffer(ops::PairPanelWords(out, in) * sizeof(uint32_t)), std::vector<float>(n * (in + 5)),
            AlignedBuffer(ops::GemmScratchWords(n, in) * sizeof(uint32_t))};
  for (uint16_t& v : p.w) v = F32ToBf16(nd(rng));
  for (float& v : p.x) v = nd(rng);
  EXPECT_TRUE(ops::PackPairPanels({p.w.data(), DType::kBF16, out, in}, p.panels.as<uint32_t>()));
  return p;
}

// f32 sums of `in` exact products of N(0,1) values vs double (the bf16 Linear tests' bound).
double Tolerance(int64_t in) { return 2e-5 * std::sqrt(static_cast<double>(in)) * 4; }

bool HasDot() { return ops::Bf16Dot() != nullptr; }

// The panel layout element by element: partial 16-row panels, odd depths (the last pair's high
// half zero); f32 weights are refused and leave dst alone.
TEST(LinearPanels, PackLayout) {
  if (!HasDot()) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(21);
  for (auto [out, in] : {std::pair<int64_t, int64_t>{16, 32}, {5, 7}, {37, 65}, {33, 1}, {17, 4100}}) {
    Problem p = MakeProblem(rng, 1, in, out);
    const uint32_t* dst = p.panels.as<uint32_t>();
    const int64_t pairs = (in + 1) / 2;
    ASSERT_EQ(ops::PairPanelWords(out, in), (out + 15) / 16 * pairs * 16);
    for (int64_t c = 0; c < (out + 15) / 16; ++c)
      for (int64_t q = 0; q < pairs; ++q)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t r = 16 * c + j;
          const uint32_t lo = r < out ? p.w[r * in + 2 * q] : 0;
          const uint32_t hi = r < out && 2 * q + 1 < in ? p.w[r * in + 2 * q + 1] : 0;
          ASSERT_EQ(dst[(c * pairs + q) * 16 + j], lo | hi << 16) << out << "x" << in << " c " << c << " q " << q;
        }
  }
  // Rows read back from the panels (a tied embedding's lookup) are the stored rows.
  for (auto [out, in] : {std::pair<int64_t, int64_t>{37, 65}, {16, 2}, {3, 1}}) {
    Problem p = MakeProblem(rng, 1, in, out);
    std::vector<float> got(in + 1, -7.0f), want(in);
    for (int64_t r = 0; r < out; ++r) {
      ops::PairPanelRowToF32(p.panels.as<uint32_t>(), in, r, got.data());
      DecodeToF32(DType::kBF16, p.w.data() + r * in, want.data(), in);
      for (int64_t i = 0; i < in; ++i) ASSERT_EQ(got[i], want[i]) << out << "x" << in << " r " << r << " i " << i;
      ASSERT_EQ(got[in], -7.0f) << "wrote past the row";
    }
  }
  std::vector<float> wf(16 * 4, 1.0f);
  std::vector<uint32_t> dst(ops::PairPanelWords(16, 4), 7u);
  EXPECT_FALSE(ops::PackPairPanels({wf.data(), DType::kF32, 16, 4}, dst.data()));
  for (uint32_t v : dst) ASSERT_EQ(v, 7u);
}

// Token counts from decode (1-3) through partial and whole 8-token tiles; widths off the 16-column
// panel and 32-column tile; depths odd, under one k block, and over 4096 (several blocks of
// pairs); strided x and y; no pool and 3 threads.
TEST(LinearPanels, MatchReferenceAtBf16) {
  if (!HasDot()) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(22);
  ThreadPool pool3(3);
  for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 5, 3}, {2, 7, 17}, {3, 64, 32}, {8, 256, 33},
                            {9, 257, 129}, {37, 513, 300}, {1, 1152, 1001}, {17, 4097, 45}, {4, 8200, 20},
                            {1, 9000, 70}, {12, 2, 16}}) {
    Problem p = MakeProblem(rng, n, in, out);
    std::vector<float> ref(n * p.ys), y(n * p.ys);
    ops::LinearReference(p.View(), p.x.data(), n, p.xs, ref.data(), p.ys, MatmulPrecision::kBf16);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
      std::fill(y.begin(), y.end(), testing::kUnwritten);
      ops::Linear(p.View(), p.x.data(), n, p.xs, y.data(), p.ys, pool, MatmulPrecision::kBf16, p.XPairs());
      ASSERT_TRUE(testing::LinearRowsMatch(y, ref, n, p.ys, out, Tolerance(in)))
          << "n=" << n << " in=" << in << " out=" << out << " threads " << (pool != nullptr);
    }
  }
}

// With panels and a scratch Linear reads the panels only: a stored matrix full of NaN changes
// nothing. Without the scratch, at precision f32, or with the dot product off it reads the stored
// matrix (here a different one, whose reference it must then match).
TEST(LinearPanels, PanelsAreWhatIsRead) {
  if (!HasDot()) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(23);
  ThreadPool pool(2);
  for (int64_t n : {1, 3, 20}) {
    Problem p = MakeProblem(rng, n, 300, 50);
    Problem other = MakeProblem(rng, n, 300, 50);
    std::vector<float> want(n * p.ys), want_other(n * p.ys), want_other_f32(n * p.ys), y(n * p.ys);
    ops::LinearReference(p.View(), p.x.data(), n, p.xs, want.data(), p.ys, MatmulPrecision::kBf16);
    ops::LinearReference(other.View(), p.x.data(), n, p.xs, want_other.data(), p.ys, MatmulPrecision::kBf16);
    ops::LinearReference(other.View(), p.x.data(), n, p.xs, want_other_f32.data(), p.ys, MatmulPrecision::kF32);
    auto check = [&](const std::vector<float>& ref, const char* what) {
      for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 0; o < p.out; ++o)
          ASSERT_NEAR(y[t * p.ys + o], ref[t * p.ys + o], Tolerance(p.in)) << what << " n=" << n << " t=" << t << " o=" << o;
    };
    ops::WeightView nan_data = p.View();
    std::vector<uint16_t> nans(p.w.size(), 0x7fc0);
    nan_data.data = nans.data();
    ops::Linear(nan_data, p.x.data(), n, p.xs, y.data(), p.ys, &pool, MatmulPrecision::kBf16, p.XPairs());
    check(want, "panels with NaN stored data");
    ops::WeightView mixed = other.View();  // other's stored matrix, p's panels
    mixed.pairs = p.panels.as<uint32_t>();
    ops::Linear(mixed, p.x.data(), n, p.xs, y.data(), p.ys, &pool, MatmulPrecision::kBf16, nullptr);
    check(want_other, "no scratch");
    ops::Linear(mixed, p.x.data(), n, p.xs, y.data(), p.ys, &pool, MatmulPrecision::kF32, p.XPairs());
    check(want_other_f32, "precision f32");
    ops::EnableBf16Dot(false);
    ops::Linear(mixed, p.x.data(), n, p.xs, y.data(), p.ys, &pool, MatmulPrecision::kBf16, p.XPairs());
    ops::EnableBf16Dot(true);
    check(want_other, "dot product off");
  }
}

// Each output is the same chain of k blocks whatever n: a token's result alone (decode) is bit for
// bit its result in any batch, at any position of a tile (prefill), threads or not.
TEST(LinearPanels, TokenAloneOrInABatchIsBitIdentical) {
  if (!HasDot()) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(24);
  ThreadPool pool(2);
  for (int64_t in : {300, 5000}) {
    Problem p = MakeProblem(rng, 23, in, 150);
    std::vector<float> all(p.n * p.out), part(p.n * p.out);
    ops::Linear(p.View(), p.x.data(), p.n, p.xs, all.data(), p.out, &pool, MatmulPrecision::kBf16, p.XPairs());
    for (int64_t start : {0, 1, 5, 11, 22}) {
      const int64_t cnt = start == 22 ? 1 : p.n - start;
      ops::Linear(p.View(), p.x.data() + start * p.xs, cnt, p.xs, part.data(), p.out, start % 2 ? nullptr : &pool,
                  MatmulPrecision::kBf16, p.XPairs());
      for (int64_t i = 0; i < cnt * p.out; ++i)
        ASSERT_EQ(part[i], all[start * p.out + i]) << "in " << in << " start " << start << " i " << i;
    }
  }
}

// Every token count of a small batch (speculative verification, a serving batch): each tile height
// 1-8 has its own strip shape, and a 9-17 token batch ends in a partial tile of any height. Each
// token matches the reference and is bit for bit its decode (alone) result.
TEST(LinearPanels, EverySmallBatchMatchesReferenceAndDecode) {
  if (!HasDot()) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  std::mt19937 rng(25);
  ThreadPool pool(2);
  for (auto [in, out] : {std::pair<int64_t, int64_t>{37, 45}, {530, 200}, {2050, 81}}) {
    for (int64_t n = 1; n <= 17; ++n) {
      Problem p = MakeProblem(rng, n, in, out);
      std::vector<float> ref(n * p.ys), y(n * p.ys, testing::kUnwritten), one(p.ys);
      ops::LinearReference(p.View(), p.x.data(), n, p.xs, ref.data(), p.ys, MatmulPrecision::kBf16);
      ops::Linear(p.View(), p.x.data(), n, p.xs, y.data(), p.ys, &pool, MatmulPrecision::kBf16, p.XPairs());
      ASSERT_TRUE(testing::LinearRowsMatch(y, ref, n, p.ys, out, Tolerance(in))) << "n=" << n << " in=" << in;
      for (int64_t t = 0; t < n; ++t) {
        ops::Linear(p.View(), p.x.data() + t * p.xs, 1, p.xs, one.data(), p.ys, nullptr, MatmulPrecision::kBf16,
                    p.XPairs());
        for (int64_t o = 0; o < out; ++o)
          ASSERT_EQ(one[o], y[t * p.ys + o]) << "n=" << n << " in=" << in << " token " << t << " out " << o;
      }
    }
  }
}

// A bf16 copy of a test checkpoint (config and every tensor rounded to bf16) in a temporary
// directory, removed with the object.
class Bf16Checkpoint {
 public:
  // A directory of the test's own: ctest runs tests in parallel processes, and two tests once
  // shared one (the first to finish removed the other's checkpoint).
  explicit Bf16Checkpoint(const std::string& name)
      : dir_(fs::path(::testing::TempDir()) /
             ("tessera_panels_" + name + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() +
              "_" + std::to_string(getpid()))) {
    const fs::path src = fs::path(TESSERA_TESTDATA_DIR) / "models" / name;
    fs::create_directories(dir_);
    fs::copy_file(src / "config.json", dir_ / "config.json", fs::copy_options::overwrite_existing);
    StatusOr<io::SafetensorsCheckpoint> ckpt = io::SafetensorsCheckpoint::Open(src.string());
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().message();
    io::SafetensorsWriter w;
    for (const std::string& t : ckpt.value().TensorNames()) {
      StatusOr<io::SafetensorsTensor> v = ckpt.value().Get(t);
      std::vector<float> f(v.value().numel());
      DecodeToF32(v.value().dtype, v.value().data, f.data(), f.size());
      EXPECT_TRUE(w.AddF32(t, DType::kBF16, v.value().shape, f).ok()) << t;
    }
    EXPECT_TRUE(w.WriteFile((dir_ / "model.safetensors").string()).ok());
  }
  ~Bf16Checkpoint() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

// Every matrix a Linear reads: the LM head and each layer's projections (a shared-KV layer has no
// k / v).
std::vector<const ops::WeightView*> LinearViews(const model::GemmaWeights& w) {
  std::vector<const ops::WeightView*> linear{&w.lm_head};
  for (const model::LayerWeights& lw : w.layers)
    for (const ops::WeightView* v : {&lw.q_proj, &lw.k_proj, &lw.v_proj, &lw.o_proj, &lw.gate, &lw.up, &lw.down})
      if (v->data != nullptr) linear.push_back(v);
  return linear;
}

// Linear on a loaded view (its panels, where packed) against LinearReference on its stored matrix,
// 3 random tokens at precision mp.
::testing::AssertionResult ViewMatchesReference(const ops::WeightView& v, MatmulPrecision mp, ThreadPool* pool,
                                                std::mt19937& rng) {
  const int64_t n = 3;
  std::normal_distribution<float> nd;
  std::vector<float> x(n * v.in), y(n * v.out, testing::kUnwritten), ref(n * v.out);
  for (float& e : x) e = nd(rng);
  AlignedBuffer scratch(ops::GemmScratchWords(n, v.in) * sizeof(uint32_t));
  ops::Linear(v, x.data(), n, v.in, y.data(), v.out, pool, mp, scratch.as<uint32_t>());
  ops::LinearReference(v, x.data(), n, v.in, ref.data(), v.out, mp);
  return testing::LinearRowsMatch(y, ref, n, v.out, v.out, Tolerance(v.in)) << " " << v.out << "x" << v.in;
}

// Prefill + decode logits of a model at matmul precision bf16.
std::vector<float> RunLogits(const model::GemmaModel& m, ThreadPool* pool, MatmulPrecision mp = MatmulPrecision::kBf16) {
  runtime::SessionOptions o;
  o.max_context = 48, o.max_chunk = 16;
  o.matmul_precision = mp;
  auto s = runtime::Session::Create(m, o, pool);
  EXPECT_TRUE(s.ok()) << s.status().message();
  runtime::Prompt p;
  for (int i = 0; i < 21; ++i) p.tokens.push_back((i * 37 + 11) % 90);
  std::vector<float> last(m.arch().vocab), all;
  EXPECT_TRUE(s.value()->Prefill({p}, last.data()).ok());
  all = last;
  int32_t next = 5;
  const uint8_t active = 1;
  for (int step = 0; step < 5; ++step) {
    EXPECT_TRUE(s.value()->Decode(&next, &active, last.data()).ok());
    all.insert(all.end(), last.begin(), last.end());
    next = (next * 7 + 3) % 90;
  }
  return all;
}

// The loader packs every matrix a Linear reads (and not the embedding tables, which are looked up
// by row, unless tied to the LM head: then the lookup reads its panels), each view's panels are its own matrix (Linear on them matches the reference on the
// stored matrix), and the packed model runs. Its logits differ from the unpacked model's only by
// f32 summation order, which can flip a bf16 rounding of some later Linear input; these tiny
// random models amplify such flips (seen: the dot product on vs off moves the Gemma-3 model's
// logits 1.2e-2, half of what rounding every Linear input to bf16 does), so the packed model is held
// below the whole bf16-rounding effect (bf16 vs f32 matmuls), where a misattached matrix would be
// of the order of the logits.
TEST(LinearPanels, LoaderPacksWhatLinearReads) {
  if (!HasDot()) GTEST_SKIP() << "no AVX-512-BF16 on this CPU";
  ThreadPool pool(2);
  std::mt19937 rng(25);
  for (const char* name : {"gemma4_text", "gemma3_text"}) {
    Bf16Checkpoint ck(name);
    model::WeightLoadOptions packed_options;
    packed_options.pack_panels_for = MatmulPrecision::kBf16;
    auto plain = model::LoadedModel::Load(ck.dir());
    auto packed = model::LoadedModel::Load(ck.dir(), packed_options);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    const model::GemmaWeights& w = packed.value()->model().weights();
    const bool tied = w.lm_head.data == w.embed.data;  // then the lookup reads the LM head's panels
    EXPECT_EQ(w.embed.pairs, tied ? w.lm_head.pairs : nullptr) << name;
    const std::vector<const ops::WeightView*> linear = LinearViews(w);
    ASSERT_GE(linear.size(), 5 * w.layers.size() + 1) << name;
    for (const ops::WeightView* v : linear) {
      ASSERT_NE(v->pairs, nullptr) << name;
      ASSERT_TRUE(ViewMatchesReference(*v, MatmulPrecision::kBf16, &pool, rng)) << name;
    }
    for (const model::LayerWeights& lw : plain.value()->model().weights().layers) EXPECT_EQ(lw.q_proj.pairs, nullptr);
    const std::vector<float> a = RunLogits(plain.value()->model(), &pool), b = RunLogits(packed.value()->model(), &pool);
    const std::vector<float> f32 = RunLogits(plain.value()->model(), &pool, MatmulPrecision::kF32);
    double scale = 0, diff = 0, bf16_effect = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(b[i])) << name << " " << i;
      scale = std::max(scale, double(std::fabs(a[i])));
      diff = std::max(diff, double(std::fabs(a[i] - b[i])));
      bf16_effect = std::max(bf16_effect, double(std::fabs(a[i] - f32[i])));
    }
    EXPECT_GT(bf16_effect, 1e-4 * scale) << name;
    EXPECT_LT(diff, bf16_effect) << name;
    std::printf("%s: max|logit| %.3f, bf16 vs f32 matmuls %.2e, packed vs unpacked %.2e\n", name, scale, bf16_effect,
                diff);
  }
}

// ---- f32 panels: precision f32's prepacked form ----

// An f32 weight [out, in], its f32 panels, and x [n, in + 5] (strided).
struct F32Problem {
  int64_t n, in, out, xs, ys;
  std::vector<float> w;
  AlignedBuffer panels;
  std::vector<float> x;

  ops::WeightView Stored() const { return {w.data(), DType::kF32, out, in}; }
  ops::WeightView View() const {
    ops::WeightView v = Stored();
    v.panels = panels.as<float>();
    return v;
  }
};

F32Problem MakeF32Problem(std::mt19937& rng, int64_t n, int64_t in, int64_t out) {
  std::normal_distribution<float> nd;
  F32Problem p{n, in, out, in + 5, out + 3, std::vector<float>(out * in),
               AlignedBuffer(ops::F32PanelFloats(out, in) * sizeof(float)), std::vector<float>(n * (in + 5))};
  for (float& v : p.w) v = nd(rng);
  for (float& v : p.x) v = nd(rng);
  ops::PackF32Panels(p.Stored(), p.panels.as<float>());
  return p;
}

// The layout element by element (partial 16-row panels, depths off the 8-deep transpose), bf16
// weights widened exactly, and rows read back (a tied embedding's lookup) are the stored rows.
TEST(LinearF32Panels, PackLayout) {
  std::mt19937 rng(31);
  for (auto [out, in] : {std::pair<int64_t, int64_t>{16, 32}, {5, 7}, {37, 65}, {33, 1}, {17, 1030}}) {
    F32Problem p = MakeF32Problem(rng, 1, in, out);
    const float* dst = p.panels.as<float>();
    ASSERT_EQ(ops::F32PanelFloats(out, in), (out + 15) / 16 * in * 16);
    for (int64_t c = 0; c < (out + 15) / 16; ++c)
      for (int64_t k = 0; k < in; ++k)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t r = 16 * c + j;
          ASSERT_EQ(dst[(c * in + k) * 16 + j], r < out ? p.w[r * in + k] : 0.0f) << out << "x" << in << " c " << c;
        }
    std::vector<uint16_t> wb(p.w.size());
    EncodeFromF32(DType::kBF16, p.w.data(), wb.data(), wb.size());
    AlignedBuffer widened(ops::F32PanelFloats(out, in) * sizeof(float));
    ops::PackF32Panels({wb.data(), DType::kBF16, out, in}, widened.as<float>());
    for (int64_t r = 0; r < out; ++r)
      for (int64_t k = 0; k < in; ++k)
        ASSERT_EQ(widened.as<float>()[((r / 16) * in + k) * 16 + r % 16], Bf16ToF32(wb[r * in + k])) << r << " " << k;
    std::vector<float> got(in + 1, testing::kUnwritten);
    for (int64_t r = 0; r < out; ++r) {
      ops::F32PanelRowToF32(dst, in, r, got.data());
      for (int64_t i = 0; i < in; ++i) ASSERT_EQ(got[i], p.w[r * in + i]) << out << "x" << in << " r " << r << " i " << i;
      ASSERT_EQ(got[in], testing::kUnwritten) << "wrote past the row";
    }
  }
}

// Token counts from decode (1-5: the micro-tile's short row counts) through partial and whole
// 6-token tiles; widths off the 16-column panel and the 32-column block; depths under one 1024 k
// block and over several; strided x and y; no pool and 3 threads.
TEST(LinearF32Panels, MatchReferenceAtF32) {
  std::mt19937 rng(32);
  ThreadPool pool3(3);
  for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 5, 3}, {2, 7, 17}, {3, 64, 32}, {4, 256, 33},
                            {5, 257, 129}, {6, 100, 48}, {37, 513, 300}, {1, 1152, 1001}, {17, 4097, 45},
                            {4, 2050, 20}, {1, 3000, 70}, {12, 2, 16}}) {
    F32Problem p = MakeF32Problem(rng, n, in, out);
    std::vector<float> ref(n * p.ys), y(n * p.ys);
    ops::LinearReference(p.Stored(), p.x.data(), n, p.xs, ref.data(), p.ys, MatmulPrecision::kF32);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
      std::fill(y.begin(), y.end(), testing::kUnwritten);
      ops::Linear(p.View(), p.x.data(), n, p.xs, y.data(), p.ys, pool, MatmulPrecision::kF32);
      ASSERT_TRUE(testing::LinearRowsMatch(y, ref, n, p.ys, out, Tolerance(in)))
          << "n=" << n << " in=" << in << " out=" << out << " threads " << (pool != nullptr);
    }
  }
}

// With f32 panels Linear at precision f32 reads the panels only, decode included: stored data full
// of NaN changes nothing, and another matrix's stored data beside p's panels gives p's result.
TEST(LinearF32Panels, PanelsAreWhatIsRead) {
  std::mt19937 rng(33);
  ThreadPool pool(2);
  for (int64_t n : {1, 3, 20}) {
    F32Problem p = MakeF32Problem(rng, n, 300, 50);
    F32Problem other = MakeF32Problem(rng, n, 300, 50);
    std::vector<float> want(n * p.ys), y(n * p.ys, testing::kUnwritten);
    ops::LinearReference(p.Stored(), p.x.data(), n, p.xs, want.data(), p.ys, MatmulPrecision::kF32);
    ops::WeightView nan_data = p.View();
    std::vector<float> nans(p.w.size(), std::numeric_limits<float>::quiet_NaN());
    nan_data.data = nans.data();
    ops::Linear(nan_data, p.x.data(), n, p.xs, y.data(), p.ys, &pool, MatmulPrecision::kF32);
    ASSERT_TRUE(testing::LinearRowsMatch(y, want, n, p.ys, p.out, Tolerance(p.in))) << "NaN stored data, n=" << n;
    ops::WeightView mixed = other.View();  // other's stored matrix, p's panels
    mixed.panels = p.panels.as<float>();
    std::fill(y.begin(), y.end(), testing::kUnwritten);
    ops::Linear(mixed, p.x.data(), n, p.xs, y.data(), p.ys, nullptr, MatmulPrecision::kF32);
    ASSERT_TRUE(testing::LinearRowsMatch(y, want, n, p.ys, p.out, Tolerance(p.in))) << "other stored data, n=" << n;
  }
}

// Each output is one chain of 1024-deep k blocks whatever n: a token alone (decode) gives bit for
// bit its result in any batch at any tile position (prefill), threads or not, and the same bits
// as the GEMM packing the stored matrix per call.
TEST(LinearF32Panels, TokenAloneOrInABatchIsBitIdentical) {
  std::mt19937 rng(34);
  ThreadPool pool(2);
  for (int64_t in : {300, 2500}) {
    F32Problem p = MakeF32Problem(rng, 23, in, 150);
    std::vector<float> all(p.n * p.out), part(p.n * p.out), per_call(p.n * p.out);
    ops::Linear(p.View(), p.x.data(), p.n, p.xs, all.data(), p.out, &pool, MatmulPrecision::kF32);
    ops::Gemm(p.Stored(), p.x.data(), p.n, p.xs, per_call.data(), p.out, &pool, MatmulPrecision::kF32);
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], per_call[i]) << "in " << in << " i " << i;
    for (int64_t start : {0, 1, 5, 11, 22}) {
      const int64_t cnt = start == 22 ? 1 : p.n - start;
      ops::Linear(p.View(), p.x.data() + start * p.xs, cnt, p.xs, part.data(), p.out, start % 2 ? nullptr : &pool,
                  MatmulPrecision::kF32);
      for (int64_t i = 0; i < cnt * p.out; ++i)
        ASSERT_EQ(part[i], all[start * p.out + i]) << "in " << in << " start " << start << " i " << i;
    }
  }
}

// At precision f32 the loader packs every f32 matrix a Linear reads (the embedding only when tied
// to the LM head), each view's panels are its own matrix, and the packed model's logits equal the
// unpacked one's up to f32 summation order (the unpacked model runs its decode and short chunks
// on the row-dot path): within 1e-4 of the largest logit, where a misattached matrix would be of
// the order of the logits. Panels are packed only where the precision reads them: not at
// precision bf16 for f32 matrices, not at precision f32 for bf16 ones, stored or converted to f32
// (f32 panels would double their memory).
TEST(LinearF32Panels, LoaderPacksWhatLinearReads) {
  ThreadPool pool(2);
  std::mt19937 rng(35);
  model::WeightLoadOptions f32_options, bf16_options;
  f32_options.pack_panels_for = MatmulPrecision::kF32;
  bf16_options.pack_panels_for = MatmulPrecision::kBf16;
  for (const char* name : {"gemma4_text", "gemma3_text"}) {
    const std::string dir = (fs::path(TESSERA_TESTDATA_DIR) / "models" / name).string();
    auto plain = model::LoadedModel::Load(dir);
    auto packed = model::LoadedModel::Load(dir, f32_options);
    auto at_bf16 = model::LoadedModel::Load(dir, bf16_options);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    ASSERT_TRUE(at_bf16.ok()) << at_bf16.status().message();
    const model::GemmaWeights& w = packed.value()->model().weights();
    ASSERT_EQ(w.lm_head.dtype, DType::kF32) << name;
    const bool tied = w.lm_head.data == w.embed.data;
    EXPECT_EQ(w.embed.panels, tied ? w.lm_head.panels : nullptr) << name;
    const std::vector<const ops::WeightView*> linear = LinearViews(w);
    ASSERT_GE(linear.size(), 5 * w.layers.size() + 1) << name;
    for (const ops::WeightView* v : linear) {
      ASSERT_NE(v->panels, nullptr) << name;
      ASSERT_EQ(v->pairs, nullptr) << name;
      ASSERT_TRUE(ViewMatchesReference(*v, MatmulPrecision::kF32, &pool, rng)) << name;
    }
    for (const model::LayerWeights& lw : at_bf16.value()->model().weights().layers)
      EXPECT_TRUE(lw.q_proj.panels == nullptr && lw.q_proj.pairs == nullptr) << name;
    const std::vector<float> a = RunLogits(plain.value()->model(), &pool, MatmulPrecision::kF32);
    const std::vector<float> b = RunLogits(packed.value()->model(), &pool, MatmulPrecision::kF32);
    double scale = 0, diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(b[i])) << name << " " << i;
      scale = std::max(scale, double(std::fabs(a[i])));
      diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    }
    EXPECT_LT(diff, 1e-4 * scale) << name;
    std::printf("%s: max|logit| %.3f, f32 panels vs unpacked %.2e\n", name, scale, diff);
  }
  // A bf16 checkpoint at precision f32, as stored or converted to f32 on load (Model.load's
  // default): not packed (panels beside a bf16 matrix or an owned converted copy would double it).
  Bf16Checkpoint ck("gemma3_text");
  model::WeightLoadOptions converted = f32_options;
  converted.convert_to = DType::kF32;
  for (const model::WeightLoadOptions* o : {&f32_options, &converted}) {
    auto bf16_at_f32 = model::LoadedModel::Load(ck.dir(), *o);
    ASSERT_TRUE(bf16_at_f32.ok()) << bf16_at_f32.status().message();
    const model::GemmaWeights& bw = bf16_at_f32.value()->model().weights();
    EXPECT_EQ(bw.lm_head.dtype, o->convert_to ? DType::kF32 : DType::kBF16);
    for (const model::LayerWeights& lw : bw.layers) EXPECT_TRUE(lw.up.panels == nullptr && lw.up.pairs == nullptr);
  }
}

}  // namespace
}  // namespace tessera
