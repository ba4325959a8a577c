// Vision encoders: seconds per image and GFLOP/s of Model::EncodePixels (the tower alone, on the
// processor's pixels) and Model::EncodeImages (decoded image in, preprocessing included), at f32
// and bf16 matmul precision, against the machine's GEMM peaks (bench/roofline.h). The FLOP count
// is the tower's matmuls plus both attention products over all patch pairs, plus the patch
// embedding and the projector, read from the checkpoint's config.json (bench/vision_peers.py
// counts the same way for the peers' columns).
//
//   build/release/tessera_bench_vision --model DIR --image PNG [--pixels NPY] [--positions NPY]
//       [--precisions f32,bf16] [--reps 3] [--image-reps 1] [--threads N] [--json OUT] [--features OUT.npy]
//
// --pixels / --positions: the transformers processor's arrays (bench/vision_peers.py writes them),
// so every engine encodes the same input; without them EncodePixels gets the processor's output of
// --image. EncodePixels: median of --reps after one untimed call; EncodeImages then runs on the
// warm encoder, --image-reps timed calls. --features writes the f32 precision's EncodePixels soft
// tokens for the peers' numerics check (with a single --precisions entry, that precision's).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_args.h"
#include "roofline.h"
#include "tessera/engine.h"
#include "tessera/image.h"
#include "tessera/npy.h"

using namespace tessera;

namespace {

// The few integers of config.json's "vision_config" the FLOP count needs. config.json is the
// checkpoint's own (written by transformers), so a flat key search inside that object is enough;
// a missing key is reported by name.
struct TowerShape {
  int64_t layers = 0, hidden = 0, intermediate = 0, heads = 0, head_dim = 0, kv_heads = 0, patch = 0;
  bool gated = false;  // Gemma 4's MLP has a gate projection
  int64_t pooling = 3, mm_tokens_per_image = 256;
};

bool FindInt(const std::string& obj, const std::string& key, int64_t* out) {
  const size_t k = obj.find("\"" + key + "\"");
  if (k == std::string::npos) return false;
  const size_t colon = obj.find(':', k);
  if (colon == std::string::npos) return false;
  char* end = nullptr;
  const long long v = std::strtoll(obj.c_str() + colon + 1, &end, 10);
  if (end == obj.c_str() + colon + 1) return false;
  *out = v;
  return true;
}

StatusOr<TowerShape> ReadTowerShape(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream f(path);
  if (!f) return InvalidArgument("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const size_t at = text.find("\"vision_config\"");
  const size_t open = at == std::string::npos ? at : text.find('{', at);
  if (open == std::string::npos) return InvalidArgument(path + ": no vision_config object");
  size_t close = open;
  for (int depth = 0; close < text.size(); ++close) {
    depth += text[close] == '{' ? 1 : text[close] == '}' ? -1 : 0;
    if (depth == 0) break;
  }
  const std::string v = text.substr(open, close - open + 1);
  TowerShape s;
  const struct { const char* key; int64_t* out; } need[] = {
      {"num_hidden_layers", &s.layers}, {"hidden_size", &s.hidden}, {"intermediate_size", &s.intermediate},
      {"num_attention_heads", &s.heads}, {"patch_size", &s.patch}};
  for (const auto& n : need)
    if (!FindInt(v, n.key, n.out)) return InvalidArgument(path + ": vision_config." + n.key + " missing");
  s.gated = v.find("gemma4_vision") != std::string::npos;
  s.head_dim = s.hidden / s.heads;
  s.kv_heads = s.heads;
  FindInt(v, "head_dim", &s.head_dim);  // Gemma 4 names them; SigLIP derives them
  FindInt(v, "num_key_value_heads", &s.kv_heads);
  FindInt(v, "pooling_kernel_size", &s.pooling);
  FindInt(text, "mm_tokens_per_image", &s.mm_tokens_per_image);
  return s;
}

// FLOPs (2 per multiply-add) of one image of `patches` patch rows making `soft_tokens` rows of
// width `text_hidden`.
double TowerFlops(const TowerShape& s, int64_t patches, int64_t soft_tokens, int64_t text_hidden) {
  const double n = static_cast<double>(patches), d = static_cast<double>(s.hidden);
  const double q = static_cast<double>(s.heads * s.head_dim), kv = static_cast<double>(s.kv_heads * s.head_dim);
  const double per_layer = 2 * n * d * (q + 2 * kv) + 2 * n * q * d +
                           2 * n * d * static_cast<double>(s.intermediate) * (s.gated ? 3 : 2) + 2 * 2 * n * n * q;
  const double embed = 2 * n * 3 * static_cast<double>(s.patch * s.patch) * d;
  const double proj = 2 * static_cast<double>(soft_tokens) * d * static_cast<double>(text_hidden);
  return embed + static_cast<double>(s.layers) * per_layer + proj;
}

struct Args {
  std::string model, image, pixels, positions, json, features;
  std::vector<std::string> precisions = {"f32", "bf16"};
  int reps = 3, image_reps = 1, threads = 0;
};

struct Row {
  std::string what, precision;
  double seconds = 0, gflops = 0, pct_peak = 0;
  int64_t patches = 0, soft_tokens = 0;
};

Status ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a->model = v;
    else if (k == "--image") a->image = v;
    else if (k == "--pixels") a->pixels = v;
    else if (k == "--positions") a->positions = v;
    else if (k == "--json") a->json = v;
    else if (k == "--features") a->features = v;
    else if (k == "--reps") a->reps = std::atoi(v.c_str());
    else if (k == "--image-reps") a->image_reps = std::atoi(v.c_str());
    else if (k == "--threads") a->threads = std::atoi(v.c_str());
    else if (k == "--precisions") {
      a->precisions.clear();
      std::stringstream ss(v);
      for (std::string p; std::getline(ss, p, ',');) a->precisions.push_back(p);
    } else {
      return InvalidArgument("unknown option " + k + " (see --help)");
    }
  }
  if (a->model.empty() || a->image.empty()) return InvalidArgument("--model and --image are required");
  if (a->reps < 1 || a->image_reps < 1)
    return InvalidArgument("--reps and --image-reps must be >= 1, got " + std::to_string(a->reps) + ", " +
                           std::to_string(a->image_reps));
  return Status::Ok();
}

// EncodePixels' input. From --pixels (and --positions): the transformers processor's arrays, with
// the counts the encoder needs taken from the config (Gemma 3: mm_tokens_per_image; Gemma 4: the
// valid rows over the pooling window). Without them: Tessera's processor output of the image.
StatusOr<image::PixelInput> MakeInput(const Args& a, const Model& m, const TowerShape& s,
                                      const StatusOr<image::Image>& img) {
  if (a.pixels.empty()) {
    if (!img.ok()) return img.status();
    auto proc = m.ImageProcessor();
    if (!proc.ok()) return proc.status();
    return proc.value()->Process(img.value());
  }
  auto px = io::ReadNpy(a.pixels);
  if (!px.ok()) return px.status();
  image::PixelInput p;
  p.pixels = std::move(px.value().data);
  const int64_t rows = px.value().shape[0], cols = px.value().shape.size() == 2 ? px.value().shape[1] : 1;
  if (!s.gated) {  // [3 * size, size] as written by vision_peers.py
    if (rows != 3 * cols || cols % s.patch != 0)
      return InvalidArgument(a.pixels + ": expected [3 * size, size] with size a multiple of the patch " +
                             std::to_string(s.patch) + ", got [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    p.shape = {3, cols, cols};
    p.valid_rows = (cols / s.patch) * (cols / s.patch);
    p.soft_tokens = s.mm_tokens_per_image;
    return p;
  }
  if (a.positions.empty()) return InvalidArgument("--positions is required with --pixels for a Gemma 4 tower");
  auto pos = io::ReadNpy(a.positions);  // f32 (the reader's one dtype), whole numbers
  if (!pos.ok()) return pos.status();
  if (static_cast<int64_t>(pos.value().data.size()) != 2 * rows)
    return InvalidArgument(a.positions + ": " + std::to_string(pos.value().data.size()) + " values, expected 2 per row of " +
                           a.pixels + " (" + std::to_string(rows) + " rows)");
  p.shape = {rows, cols};
  p.positions.resize(pos.value().data.size());
  for (size_t i = 0; i < p.positions.size(); ++i) p.positions[i] = static_cast<int32_t>(pos.value().data[i]);
  for (int64_t r = 0; r < rows; ++r) p.valid_rows += p.positions[2 * r] >= 0 ? 1 : 0;
  p.soft_tokens = p.valid_rows / (s.pooling * s.pooling);
  return p;
}

// The probed compute peaks (bench/roofline.h) a row's "% of peak" is against.
struct Peaks {
  double fma = 0, dot = 0, amx = 0;
  // f32 against the FMA peak; bf16 against AMX's where Linear runs on it, else the bf16 dot
  // product's (twice the FMA rate, where present).
  double For(const std::string& prec) const {
    if (prec != "bf16" && prec != "bfloat16") return fma;
    return amx > 0 ? amx : dot > 0 ? dot : fma;
  }
};

Status WriteJson(const std::string& path, const std::string& model, int threads, const Peaks& peaks,
                 const std::vector<Row>& rows) {
  std::ofstream f(path);
  if (!f) return InvalidArgument("cannot write " + path);
  f << "{\"model\": \"" << model << "\", \"threads\": " << threads << ", \"fma_peak_gflops\": " << peaks.fma
    << ", \"bf16_dot_peak_gflops\": " << peaks.dot << ", \"amx_bf16_peak_gflops\": " << peaks.amx << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    f << (i ? ", " : "") << "{\"what\": \"" << r.what << "\", \"precision\": \"" << r.precision
      << "\", \"seconds\": " << r.seconds << ", \"gflops\": " << r.gflops << ", \"pct_peak\": " << r.pct_peak
      << ", \"patches\": " << r.patches << ", \"soft_tokens\": " << r.soft_tokens << "}";
  }
  f << "]}\n";
  return Status::Ok();
}

// Writes [rows, hidden] f32 as .npy (version 1.0 header padded to 64 bytes).
Status WriteNpy(const std::string& path, const ImageFeatures& feat) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return InvalidArgument("cannot write " + path);
  const int64_t rows = feat.hidden ? static_cast<int64_t>(feat.rows.size()) / feat.hidden : 0;
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                  std::to_string(feat.hidden) + "), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  const uint16_t len = static_cast<uint16_t>(h.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&len), 2);
  f << h;
  f.write(reinterpret_cast<const char*>(feat.rows.data()), static_cast<std::streamsize>(feat.rows.size() * 4));
  return Status::Ok();
}

// One precision: loads the model for it (bf16: weights converted and repacked for bf16 panels),
// then times EncodePixels and EncodeImages.
Status RunPrecision(const Args& a, const std::string& prec, const TowerShape& shape, const StatusOr<image::Image>& img,
                    double peak, std::vector<Row>* rows) {
  ops::MatmulPrecision mp;
  if (!ops::ParseMatmulPrecision(prec, &mp)) return InvalidArgument("--precisions: unknown " + prec);
  LoadOptions load;
  load.threads = a.threads;
  load.repack_for = mp;
  if (mp == ops::MatmulPrecision::kBf16) load.convert_to = DType::kBF16;
  auto loaded = Model::Load(a.model, load);
  if (!loaded.ok()) return loaded.status();
  const Model& m = *loaded.value();
  auto input = MakeInput(a, m, shape, img);
  if (!input.ok()) return input.status();
  EncodeOptions eo;
  eo.matmul_precision = mp;
  const std::vector<image::PixelInput> pixels = {input.value()};
  const std::vector<image::Image> images = img.ok() ? std::vector<image::Image>{img.value()} : std::vector<image::Image>{};
  Status st = Status::Ok();
  ImageFeatures feat;
  const double px_ms = bench::MedianMs(a.reps, [&] {
    auto r = m.EncodePixels(pixels, eo);
    if (!r.ok()) st = r.status();
    else feat = std::move(r).value();
  });
  if (!st.ok()) return st;
  // EncodeImages needs the image processor too: its failure leaves that row out, not the run. The
  // encoder is warm from EncodePixels, so its --image-reps calls are all timed.
  Status im_st = img.status();
  std::vector<double> im_all;
  for (int r = 0; r < a.image_reps && im_st.ok(); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    im_st = m.EncodeImages(images, eo).status();
    im_all.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(im_all.begin(), im_all.end());
  const double im_ms = im_all[im_all.size() / 2];
  if (!im_st.ok()) std::printf("%-13s %-5s not measured: %s\n", "EncodeImages", prec.c_str(), im_st.message().c_str());
  if (!a.features.empty() && (mp == ops::MatmulPrecision::kF32 || a.precisions.size() == 1)) {
    if (Status w = WriteNpy(a.features, feat); !w.ok()) return w;
  }
  const int64_t soft = feat.tokens_per_image.empty() ? 0 : feat.tokens_per_image[0];
  const int64_t patches = input.value().shape.size() == 3
                              ? (input.value().shape[1] / shape.patch) * (input.value().shape[2] / shape.patch)
                              : input.value().shape[0];
  const double flops = TowerFlops(shape, patches, soft, feat.hidden);
  for (const auto& [what, ms] : {std::pair<const char*, double>{"EncodePixels", px_ms}, {"EncodeImages", im_ms}}) {
    if (!im_st.ok() && std::string(what) == "EncodeImages") continue;
    Row r{what, prec, ms / 1e3, flops / (ms * 1e6), 0, patches, soft};
    r.pct_peak = peak > 0 ? 100 * r.gflops / peak : 0;
    rows->push_back(r);
    std::printf("%-13s %-5s %10.3f %10.1f %9.0f%% %8lld %6lld\n", what, prec.c_str(), r.seconds, r.gflops,
                r.pct_peak, (long long)patches, (long long)soft);
    std::fflush(stdout);
  }
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (const int rc = bench::CheckArgs(argc, argv,
                                      " --model DIR --image PNG [--pixels NPY] [--positions NPY] [--precisions f32,bf16]"
                                      " [--reps 3] [--image-reps 1] [--threads N] [--json OUT] [--features OUT.npy]\n");
      rc >= 0)
    return rc;
  Args a;
  a.threads = DefaultThreadCount();
  Status st = ParseArgs(argc, argv, &a);
  auto shape = st.ok() ? ReadTowerShape(a.model) : StatusOr<TowerShape>(st);
  if (!shape.ok()) {
    std::fprintf(stderr, "tessera_bench_vision: %s\n", shape.status().message().c_str());
    return 2;
  }
  // Without the image only EncodeImages is lost, as long as --pixels gives EncodePixels its input.
  const auto img = image::LoadImageFile(a.image);
  if (!img.ok() && a.pixels.empty()) {
    std::fprintf(stderr, "tessera_bench_vision: %s\n", img.status().message().c_str());
    return 2;
  }
  Peaks peaks;
  peaks.fma = bench::FmaPeakGflops(a.threads);
  peaks.dot = bench::Bf16DotPeakGflops(a.threads);
  peaks.amx = bench::AmxBf16PeakGflops(a.threads);
  std::printf("model %s, image %s (%lld x %lld), %d threads, median of %d; peaks: f32 FMA %.1f GFLOP/s, "
              "bf16 dot %.1f GFLOP/s, AMX bf16 %.1f GFLOP/s (bf16 rows against %s)\n\n",
              a.model.c_str(), a.image.c_str(), (long long)(img.ok() ? img.value().width : 0), (long long)(img.ok() ? img.value().height : 0),
              a.threads, a.reps, peaks.fma, peaks.dot, peaks.amx, peaks.amx > 0 ? "AMX" : "the dot product");
  std::printf("%-13s %-5s %10s %10s %10s %8s %6s\n", "call", "prec", "s/image", "GFLOP/s", "% peak", "patches",
              "soft");
  std::vector<Row> rows;
  for (const std::string& p : a.precisions) {
    if (Status s = RunPrecision(a, p, shape.value(), img, peaks.For(p), &rows); !s.ok()) {
      std::fprintf(stderr, "tessera_bench_vision: %s: %s\n", p.c_str(), s.message().c_str());
      return 1;
    }
  }
  if (!a.json.empty()) {
    if (Status s = WriteJson(a.json, a.model, a.threads, peaks, rows); !s.ok()) {
      std::fprintf(stderr, "tessera_bench_vision: %s\n", s.message().c_str());
      return 1;
    }
  }
  return 0;
}
