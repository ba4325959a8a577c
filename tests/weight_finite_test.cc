// A checkpoint whose weights hold a NaN or an infinity fails to load, with an error naming the
// tensor and the element, whichever way the loader reads the matrix: mapped as stored, converted,
// or packed into panels (docs/reliability.md, "Non-finite numbers"). Before, only the norm
// vectors were checked and such a checkpoint loaded and ran.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "io/safetensors_checkpoint.h"
#include "io/safetensors_writer.h"
#include "model/loaded_model.h"
#include "ops/bf16_dot.h"
#include "tessera/thread_pool.h"
#include "temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A copy of test checkpoint `name` in `into` (removed when the test ends), with element `index` of
// the tensor whose key ends in `suffix` set to x (stored in its dtype).
fs::path PatchedCheckpoint(const testing::TempDir& into, const std::string& name, const std::string& suffix,
                           int64_t index, float x) {
  const fs::path src = fs::path(TESSERA_TESTDATA_DIR) / "models" / name;
  const fs::path dir = into.path();
  fs::copy_file(src / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  StatusOr<io::SafetensorsCheckpoint> ckpt = io::SafetensorsCheckpoint::Open(src.string());
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().message();
  io::SafetensorsWriter w;
  bool patched = false;
  for (const std::string& t : ckpt.value().TensorNames()) {
    const io::SafetensorsTensor v = ckpt.value().Get(t).value();
    std::vector<float> f(v.numel());
    DecodeToF32(v.dtype, v.data, f.data(), f.size());
    if (t.size() >= suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0) {
      f.at(index) = x;
      patched = true;
    }
    EXPECT_TRUE(w.AddF32(t, v.dtype, v.shape, f).ok()) << t;
  }
  EXPECT_TRUE(patched) << suffix;
  EXPECT_TRUE(w.WriteFile((dir / "model.safetensors").string()).ok());
  return dir;
}

void ExpectLoadError(const fs::path& dir, const model::WeightLoadOptions& options, const std::string& want) {
  auto loaded = model::LoadedModel::Load(dir.string(), options);
  ASSERT_FALSE(loaded.ok()) << "loaded a checkpoint with a non-finite weight; want: " << want;
  EXPECT_NE(loaded.status().message().find(want), std::string::npos) << loaded.status().message();
}

// Every way of binding a matrix: as stored (mapped), converted to bf16, packed into f32 panels,
// packed into bf16 pair panels (where the CPU has the dot product; else read as converted).
std::vector<model::WeightLoadOptions> AllLoadPaths(ThreadPool* pool) {
  std::vector<model::WeightLoadOptions> all(4);
  all[1].convert_to = DType::kBF16;
  all[2].pack_panels_for = ops::MatmulPrecision::kF32;
  all[3].convert_to = DType::kBF16;
  all[3].pack_panels_for = ops::MatmulPrecision::kBf16;
  for (auto& o : all) o.pool = pool;
  return all;
}

TEST(WeightLoader, NonFiniteLinearWeightIsAnError) {
  ThreadPool pool(2);
  const float kinds[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity()};
  const char* names[] = {"nan", "inf", "-inf"};
  for (const char* model : {"gemma3_text", "gemma4_text"}) {
    const fs::path src = fs::path(TESSERA_TESTDATA_DIR) / "models" / model;
    auto clean = model::LoadedModel::Load(src.string());
    ASSERT_TRUE(clean.ok()) << clean.status().message();
    const int64_t in = clean.value()->model().weights().layers[1].down.in;
    for (int k = 0; k < 3; ++k) {
      // Row 3, column 5 of layer 1's down projection.
      const testing::TempDir tmp("tessera_nonfinite");
      const fs::path dir = PatchedCheckpoint(tmp, model, "layers.1.mlp.down_proj.weight", 3 * in + 5, kinds[k]);
      for (const model::WeightLoadOptions& o : AllLoadPaths(k == 1 ? nullptr : &pool))
        ExpectLoadError(dir, o,
                        std::string("tensor layers.1.mlp.down_proj.weight in ") + dir.string() +
                            "/model.safetensors has a non-finite value (" + names[k] + ") at [3, 5]");
    }
  }
}

// The embedding table (read by row, and as the tied LM head) is checked like any matrix.
TEST(WeightLoader, NonFiniteEmbeddingIsAnError) {
  ThreadPool pool(2);
  const testing::TempDir tmp("tessera_nonfinite");
  const fs::path dir =
      PatchedCheckpoint(tmp, "gemma3_text", "embed_tokens.weight", 7, std::numeric_limits<float>::quiet_NaN());
  for (const model::WeightLoadOptions& o : AllLoadPaths(&pool))
    ExpectLoadError(dir, o, "tensor embed_tokens.weight in");
}

// A finite f32 weight that overflows bf16 is named as such when the load converts to bf16.
TEST(WeightLoader, OverflowOnConversionIsAnError) {
  const testing::TempDir tmp("tessera_nonfinite");
  const fs::path dir =
      PatchedCheckpoint(tmp, "gemma3_text", "layers.0.self_attn.q_proj.weight", 0, std::numeric_limits<float>::max());
  model::WeightLoadOptions plain, to_bf16;
  to_bf16.convert_to = DType::kBF16;
  ASSERT_TRUE(model::LoadedModel::Load(dir.string(), plain).ok());
  ExpectLoadError(dir, to_bf16, "has a non-finite value (inf) at [0, 0] after conversion to bf16");
}

}  // namespace
}  // namespace tessera
