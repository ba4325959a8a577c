// libFuzzer target: one GGUF file image (io::GgufFile::FromBytes, the parser Open runs on a mapped
// file). Invariants on success: every metadata value reads back through the getter of its type;
// every tensor's view has the byte size its shape and type imply and is fully readable (ASan);
// and copying the file through GgufWriter (to a scratch file) and reading it again gives the same
// metadata, types and tensor bytes.
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "tessera/gguf.h"

namespace {

using tessera::Status;
using tessera::StatusOr;
using tessera::io::GgufFile;
using tessera::io::GgufTensor;
using tessera::io::GgufType;
using tessera::io::GgufWriter;

bool SameDouble(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Copies key's value into w with its exact type; checks the getter of that type answers.
void CopyValue(const GgufFile& f, const std::string& key, GgufWriter* w) {
  const GgufType t = f.TypeOf(key).value();
  if (t != GgufType::kArray) {
    switch (t) {
      case GgufType::kString: w->SetString(key, f.GetString(key).value()); return;
      case GgufType::kBool: w->SetBool(key, f.GetBool(key).value()); return;
      case GgufType::kF32: w->SetF32(key, static_cast<float>(f.GetFloat(key).value())); return;
      case GgufType::kF64: w->SetF64(key, f.GetFloat(key).value()); return;
      case GgufType::kU64: w->SetU64(key, f.GetU64(key).value()); return;
      default: w->SetInt(key, t, f.GetInt(key).value()); return;
    }
  }
  const GgufType e = f.ArrayTypeOf(key).value();
  switch (e) {
    case GgufType::kString: w->SetStringArray(key, f.GetStringArray(key).value()); return;
    case GgufType::kBool: w->SetBoolArray(key, f.GetBoolArray(key).value()); return;
    case GgufType::kF32: w->SetF32Array(key, f.GetFloatArray(key).value()); return;
    case GgufType::kF64: w->SetF64Array(key, f.GetF64Array(key).value()); return;
    case GgufType::kU64: w->SetU64Array(key, f.GetU64Array(key).value()); return;
    default: w->SetIntArray(key, e, f.GetIntArray(key).value()); return;
  }
}

void CheckSameValue(const GgufFile& a, const GgufFile& b, const std::string& key) {
  const GgufType t = a.TypeOf(key).value();
  FUZZ_CHECK(b.TypeOf(key).ok() && b.TypeOf(key).value() == t, "round-trip type");
  if (t == GgufType::kArray) {
    const GgufType e = a.ArrayTypeOf(key).value();
    FUZZ_CHECK(b.ArrayTypeOf(key).value() == e, "round-trip array type");
    if (e == GgufType::kString) {
      FUZZ_CHECK(a.GetStringArray(key).value() == b.GetStringArray(key).value(), "round-trip strings");
    } else if (e == GgufType::kBool) {
      FUZZ_CHECK(a.GetBoolArray(key).value() == b.GetBoolArray(key).value(), "round-trip bools");
    } else if (e == GgufType::kF32 || e == GgufType::kF64) {
      const auto x = a.GetF64Array(key).value(), y = b.GetF64Array(key).value();
      FUZZ_CHECK(x.size() == y.size(), "round-trip float array length");
      for (size_t i = 0; i < x.size(); ++i) FUZZ_CHECK(SameDouble(x[i], y[i]), "round-trip float array");
    } else {
      FUZZ_CHECK(a.GetU64Array(key).ok() == b.GetU64Array(key).ok() &&
                     a.GetIntArray(key).ok() == b.GetIntArray(key).ok(), "round-trip int array range");
      if (a.GetU64Array(key).ok()) FUZZ_CHECK(a.GetU64Array(key).value() == b.GetU64Array(key).value(), "u64s");
      if (a.GetIntArray(key).ok()) FUZZ_CHECK(a.GetIntArray(key).value() == b.GetIntArray(key).value(), "ints");
    }
    return;
  }
  if (t == GgufType::kString) FUZZ_CHECK(a.GetString(key).value() == b.GetString(key).value(), "string");
  if (t == GgufType::kBool) FUZZ_CHECK(a.GetBool(key).value() == b.GetBool(key).value(), "bool");
  if (t == GgufType::kF32 || t == GgufType::kF64)
    FUZZ_CHECK(SameDouble(a.GetFloat(key).value(), b.GetFloat(key).value()), "float");
  if (t == GgufType::kU64) FUZZ_CHECK(a.GetU64(key).value() == b.GetU64(key).value(), "u64");
}

// A scratch directory for the round trip's file, removed at exit (plain char arrays: they outlive
// the exit handlers, where a static std::string might already be destroyed).
char g_scratch_dir[] = "/tmp/gguf_fuzz_XXXXXX";
char g_scratch_file[sizeof(g_scratch_dir) + 8];

const char* ScratchPath() {
  static const bool made = [] {
    FUZZ_CHECK(::mkdtemp(g_scratch_dir) != nullptr, "mkdtemp");
    std::snprintf(g_scratch_file, sizeof(g_scratch_file), "%s/rt.gguf", g_scratch_dir);
    std::atexit([] {
      ::unlink(g_scratch_file);
      ::rmdir(g_scratch_dir);
    });
    return true;
  }();
  (void)made;
  return g_scratch_file;
}

void CheckRoundTrip(const GgufFile& f) {
  GgufWriter w;
  for (const std::string& key : f.Keys()) CopyValue(f, key, &w);
  for (const GgufTensor& t : f.tensors()) {
    if (t.name.size() >= 64) return;  // the writer keeps to llama.cpp's name limit
    GgufWriter::Fill fill = [&t](char* dst) {
      if (t.nbytes) std::memcpy(dst, t.data, t.nbytes);
      return Status::Ok();
    };
    if (t.quant != tessera::QuantType::kNone)
      w.AddQuantTensor(t.name, t.shape, t.quant, fill);
    else
      w.AddTensor(t.name, t.shape, t.dtype, fill);
  }
  const Status s = w.Write(ScratchPath(), static_cast<uint32_t>(f.alignment()));
  FUZZ_CHECK(s.ok(), s.message().c_str());
  StatusOr<GgufFile> g = GgufFile::Open(ScratchPath());
  FUZZ_CHECK(g.ok(), g.ok() ? "" : g.status().message().c_str());
  const GgufFile& h = g.value();
  FUZZ_CHECK(h.alignment() == f.alignment(), "round-trip alignment");
  std::vector<std::string> keys = f.Keys();
  if (f.alignment() != 32 && !f.Has("general.alignment")) keys.push_back("general.alignment");
  FUZZ_CHECK(h.Keys() == keys, "round-trip keys");
  for (const std::string& key : f.Keys()) CheckSameValue(f, h, key);
  FUZZ_CHECK(h.tensors().size() == f.tensors().size(), "round-trip tensor count");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensor &a = f.tensors()[i], &b = h.tensors()[i];
    FUZZ_CHECK(a.name == b.name && a.shape == b.shape && a.ggml_type == b.ggml_type && a.nbytes == b.nbytes,
               "round-trip tensor info");
    FUZZ_CHECK(a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0, "round-trip tensor bytes");
  }
}

void Check(const std::string& bytes) {
  StatusOr<GgufFile> r = GgufFile::FromBytes(bytes, "fuzz.gguf");
  if (!r.ok()) {
    FUZZ_CHECK(r.status().message().find("fuzz.gguf") != std::string::npos, "an error must name the file");
    return;
  }
  const GgufFile& f = r.value();
  FUZZ_CHECK(f.version() == 2 || f.version() == 3, "version");
  FUZZ_CHECK(f.alignment() > 0 && (f.alignment() & (f.alignment() - 1)) == 0, "alignment a power of two");
  for (const std::string& key : f.Keys()) FUZZ_CHECK(f.Has(key) && f.TypeOf(key).ok(), "listed key");
  unsigned sink = 0;
  for (const GgufTensor& t : f.tensors()) {
    FUZZ_CHECK(f.Find(t.name) == &t, "Find");
    FUZZ_CHECK(t.shape.size() <= 4, "rank");
    FUZZ_CHECK((t.data == nullptr) == (t.nbytes == 0), "null data iff empty");
    FUZZ_CHECK(t.nbytes <= bytes.size(), "tensor larger than the file");
    const auto* p = static_cast<const uint8_t*>(t.data);
    for (uint64_t i = 0; i < t.nbytes; ++i) sink += p[i];
  }
  (void)sink;
  CheckRoundTrip(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::NoEscape("GgufFile::FromBytes", [&] { Check(bytes); });
  return 0;
}
