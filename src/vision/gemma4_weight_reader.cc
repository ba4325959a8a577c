#include "vision/gemma4_weight_reader.h"

#include <cmath>

#include "vision/weight_panels.h"

namespace tessera::vision {

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

StatusOr<std::string> Gemma4WeightReader::FirstPresent(const std::vector<std::string>& names,
                                                       const std::string& what) const {
  std::string tried;
  for (const std::string& n : names) {
    if (ckpt_.Contains(n)) return n;
    tried += (tried.empty() ? "" : ", ") + n;
  }
  return InvalidArgument(ckpt_.path() + ": no " + what + " (looked for " + tried + ")");
}

StatusOr<io::SafetensorsTensor> Gemma4WeightReader::Get(const std::string& name,
                                                        const std::vector<int64_t>& shape) const {
  StatusOr<io::SafetensorsTensor> t = ckpt_.Get(name);
  if (!t.ok()) return t.status();
  if (t.value().shape != shape)
    return InvalidArgument("vision weights: tensor " + name + " in " + ckpt_.path() + " has shape " +
                           ShapeString(t.value().shape) + ", expected " + ShapeString(shape));
  return t;
}

Status Gemma4WeightReader::Matrix(const std::string& name, int64_t out, int64_t in, ops::WeightView* view) {
  StatusOr<io::SafetensorsTensor> t = Get(name, {out, in});
  if (!t.ok()) return t.status();
  const io::SafetensorsTensor& v = t.value();
  const int64_t bad = FirstNonFinite(v.dtype, v.data, out * in);
  if (bad >= 0)
    return InvalidArgument("vision weights: tensor " + name + " in " + ckpt_.path() + " has a non-finite value at [" +
                           std::to_string(bad / in) + ", " + std::to_string(bad % in) + "]");
  if (precision_ == ops::MatmulPrecision::kBf16 && v.dtype != DType::kBF16) {
    if (in > ops::kMaxRoundedRowDotFloats)
      return InvalidArgument("vision weights: matmul precision bf16 supports up to " +
                             std::to_string(ops::kMaxRoundedRowDotFloats) + " input features, " + name + " has " +
                             std::to_string(in));
    owned_.emplace_back(static_cast<size_t>(out * in) * 2);
    ConvertDType(v.dtype, v.data, DType::kBF16, owned_.back().data(), static_cast<size_t>(out * in));
    *view = {owned_.back().data(), DType::kBF16, out, in};
  } else {
    *view = {v.data, v.dtype, out, in};
  }
  PackPanelsForEncode(precision_, view, &owned_, v.data, v.nbytes);
  return Status::Ok();
}

Status Gemma4WeightReader::Floats(const std::string& name, const std::vector<int64_t>& shape,
                                  std::vector<float>* out) const {
  StatusOr<io::SafetensorsTensor> t = Get(name, shape);
  if (!t.ok()) return t.status();
  const int64_t n = t.value().numel();
  out->resize(static_cast<size_t>(n));
  DecodeToF32(t.value().dtype, t.value().data, out->data(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite((*out)[i]))
      return InvalidArgument("vision weights: tensor " + name + " in " + ckpt_.path() +
                             " has a non-finite value at flat index " + std::to_string(i));
  return Status::Ok();
}

StatusOr<io::SafetensorsTensor> Gemma4WeightReader::Table(const std::string& name,
                                                          const std::vector<int64_t>& shape) const {
  StatusOr<io::SafetensorsTensor> t = Get(name, shape);
  if (!t.ok()) return t.status();
  const int64_t bad = FirstNonFinite(t.value().dtype, t.value().data, t.value().numel());
  if (bad >= 0)
    return InvalidArgument("vision weights: tensor " + name + " in " + ckpt_.path() +
                           " has a non-finite value at flat index " + std::to_string(bad));
  return t;
}

Status Gemma4WeightReader::Scalar(const std::string& name, float* out) const {
  StatusOr<io::SafetensorsTensor> t = ckpt_.Get(name);
  if (!t.ok()) return t.status();
  if (t.value().numel() != 1)
    return InvalidArgument("vision weights: tensor " + name + " in " + ckpt_.path() + " has shape " +
                           ShapeString(t.value().shape) + ", expected a scalar");
  DecodeToF32(t.value().dtype, t.value().data, out, 1);
  if (std::isnan(*out)) return InvalidArgument("vision weights: tensor " + name + " in " + ckpt_.path() + " is nan");
  return Status::Ok();
}

}  // namespace tessera::vision
