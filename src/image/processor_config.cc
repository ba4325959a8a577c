// Reading a checkpoint's image-processor settings: processor_config.json's "image_processor"
// object (Gemma 4 checkpoints) or preprocessor_config.json (Gemma 3), each field checked and named
// in errors; absent or null fields keep transformers' defaults for the family.
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

#include "io/input_file.h"
#include "io/json_nesting.h"
#include "tessera/image.h"

namespace tessera::image {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxConfigBytes = 16 << 20;

ProcessorConfig FamilyDefaults(Family family) {
  ProcessorConfig c;
  c.family = family;
  if (family != Family::kGemma3) {
    for (int i = 0; i < 3; ++i) c.mean[i] = 0.0f, c.std[i] = 1.0f;
  }
  return c;
}

Status Bad(const std::string& name, const std::string& field, const Json& v, const std::string& want) {
  return InvalidArgument("image processor config '" + name + "': field '" + field + "' is " + v.dump() + "; " + want);
}

// Reads `field` into *out when present and not null.
Status ReadInt(const Json& o, const std::string& field, const std::string& name, int64_t* out) {
  auto it = o.find(field);
  if (it == o.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer()) return Bad(name, field, *it, "expected an integer");
  *out = it->get<int64_t>();
  return Status::Ok();
}

Status ReadBool(const Json& o, const std::string& field, const std::string& name, bool* out) {
  auto it = o.find(field);
  if (it == o.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return Bad(name, field, *it, "expected true or false");
  *out = it->get<bool>();
  return Status::Ok();
}

// image_mean / image_std: three numbers, or one for all channels.
Status ReadTriple(const Json& o, const std::string& field, const std::string& name, float out[3]) {
  auto it = o.find(field);
  if (it == o.end() || it->is_null()) return Status::Ok();
  if (it->is_number()) {
    for (int i = 0; i < 3; ++i) out[i] = it->get<float>();
    return Status::Ok();
  }
  if (!it->is_array() || it->size() != 3) return Bad(name, field, *it, "expected 3 numbers (R, G, B)");
  for (int i = 0; i < 3; ++i) {
    if (!(*it)[i].is_number()) return Bad(name, field, *it, "expected 3 numbers (R, G, B)");
    out[i] = (*it)[i].get<float>();
  }
  return Status::Ok();
}

Status ReadSize(const Json& o, const std::string& name, ProcessorConfig* c) {
  auto it = o.find("size");
  if (it == o.end() || it->is_null()) return Status::Ok();
  if (it->is_number_integer()) {
    c->size = it->get<int64_t>();
    return Status::Ok();
  }
  const bool hw = it->is_object() && it->contains("height") && it->contains("width") &&
                  (*it)["height"].is_number_integer() && (*it)["width"].is_number_integer();
  if (!hw) return Bad(name, "size", *it, "expected {\"height\": N, \"width\": N}");
  if ((*it)["height"] != (*it)["width"]) return Bad(name, "size", *it, "only a square size is supported");
  c->size = (*it)["height"].get<int64_t>();
  return Status::Ok();
}

Status ReadFields(const Json& o, const std::string& name, ProcessorConfig* c) {
  TESSERA_RETURN_IF_ERROR(ReadSize(o, name, c));
  TESSERA_RETURN_IF_ERROR(ReadTriple(o, "image_mean", name, c->mean));
  TESSERA_RETURN_IF_ERROR(ReadTriple(o, "image_std", name, c->std));
  TESSERA_RETURN_IF_ERROR(ReadInt(o, "image_seq_length", name, &c->image_seq_length));
  TESSERA_RETURN_IF_ERROR(ReadInt(o, "patch_size", name, &c->patch_size));
  TESSERA_RETURN_IF_ERROR(ReadInt(o, "pooling_kernel_size", name, &c->pooling_kernel_size));
  TESSERA_RETURN_IF_ERROR(ReadInt(o, "max_soft_tokens", name, &c->max_soft_tokens));
  TESSERA_RETURN_IF_ERROR(ReadBool(o, "do_resize", name, &c->do_resize));
  TESSERA_RETURN_IF_ERROR(ReadBool(o, "do_rescale", name, &c->do_rescale));
  TESSERA_RETURN_IF_ERROR(ReadBool(o, "do_convert_rgb", name, &c->do_convert_rgb));
  bool normalize = false;
  if (o.contains("do_normalize") && !o["do_normalize"].is_null()) {
    TESSERA_RETURN_IF_ERROR(ReadBool(o, "do_normalize", name, &normalize));
    c->do_normalize = normalize;
  }
  bool pan_and_scan = false;
  TESSERA_RETURN_IF_ERROR(ReadBool(o, "do_pan_and_scan", name, &pan_and_scan));
  if (pan_and_scan)
    return Unimplemented("image processor config '" + name + "': do_pan_and_scan is not supported");
  if (auto it = o.find("rescale_factor"); it != o.end() && !it->is_null()) {
    if (!it->is_number()) return Bad(name, "rescale_factor", *it, "expected a number");
    c->rescale_factor = it->get<double>();
  }
  int64_t resample = -1;
  TESSERA_RETURN_IF_ERROR(ReadInt(o, "resample", name, &resample));
  if (resample == 2 || resample == 3) c->resample = static_cast<Resample>(resample);
  else if (resample != -1)
    return Bad(name, "resample", o["resample"], "supported: 2 (bilinear) or 3 (bicubic)");
  return Status::Ok();
}

}  // namespace

StatusOr<ImageProcessor> ImageProcessor::FromJson(const std::string& json, Family family, const std::string& name) {
  TESSERA_RETURN_IF_ERROR(io::CheckJsonNesting(json, "image processor config '" + name + "'"));
  const Json doc = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return InvalidArgument("image processor config '" + name + "' is not a JSON object");
  ProcessorConfig c = FamilyDefaults(family);
  // processor_config.json nests the image processor; image_seq_length may sit at the top level.
  TESSERA_RETURN_IF_ERROR(ReadInt(doc, "image_seq_length", name, &c.image_seq_length));
  auto nested = doc.find("image_processor");
  if (nested != doc.end() && !nested->is_object()) return Bad(name, "image_processor", *nested, "expected an object");
  TESSERA_RETURN_IF_ERROR(ReadFields(nested != doc.end() ? *nested : doc, name, &c));
  return FromConfig(c);
}

StatusOr<ImageProcessor> ImageProcessor::FromCheckpoint(const std::string& dir, Family family) {
  for (const char* file : {"processor_config.json", "preprocessor_config.json"}) {
    const std::string path = dir + "/" + file;
    if (io::DescribeNonRegular(path).rfind("does not exist", 0) == 0) continue;
    StatusOr<std::string> text = io::ReadInputFile(path, "image processor config", kMaxConfigBytes);
    if (!text.ok()) return text.status();
    // A processor_config.json without an image processor (text-only) defers to the other file.
    if (std::string(file) == "processor_config.json" && text.value().find("\"image_processor\"") == std::string::npos)
      continue;
    return FromJson(text.value(), family, path);
  }
  return FromConfig(FamilyDefaults(family));
}

}  // namespace tessera::image
