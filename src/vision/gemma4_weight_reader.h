// Reads the vision weights of a Gemma 4 / Gemma 4 unified checkpoint: matrices as Linear views into
// the mapped file (converted to bf16 where precision bf16 needs it), small tensors copied to f32.
// Every check names the tensor and the checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors_checkpoint.h"
#include "tessera/aligned_buffer.h"
#include "tessera/linear.h"
#include "tessera/precision.h"
#include "tessera/status.h"

namespace tessera::vision {

class Gemma4WeightReader {
 public:
  Gemma4WeightReader(const io::SafetensorsCheckpoint& ckpt, ops::MatmulPrecision precision)
      : ckpt_(ckpt), precision_(precision) {}

  bool Has(const std::string& name) const { return ckpt_.Contains(name); }
  // The first of `names` the checkpoint holds, or InvalidArgument listing them.
  StatusOr<std::string> FirstPresent(const std::vector<std::string>& names, const std::string& what) const;
  // A [out, in] matrix for ops::Linear. At precision bf16 a matrix stored f32/f16 is converted to
  // bf16 (an owned copy), as that precision rounds like a bf16 model. Non-finite values are refused.
  Status Matrix(const std::string& name, int64_t out, int64_t in, ops::WeightView* view);
  // Any tensor of exactly `shape` as f32 (row-major copy); non-finite values are refused.
  Status Floats(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>* out) const;
  // A tensor of exactly `shape`, as stored (a view into the checkpoint), checked finite.
  StatusOr<io::SafetensorsTensor> Table(const std::string& name, const std::vector<int64_t>& shape) const;
  // A 0-d (or 1-element) tensor as f32; infinities allowed (the clip bounds default to them).
  Status Scalar(const std::string& name, float* out) const;
  // Memory the converted matrices live in (moved into the encoder that reads them).
  std::vector<AlignedBuffer> TakeOwned() { return std::move(owned_); }

 private:
  StatusOr<io::SafetensorsTensor> Get(const std::string& name, const std::vector<int64_t>& shape) const;
  const io::SafetensorsCheckpoint& ckpt_;
  ops::MatmulPrecision precision_;
  std::vector<AlignedBuffer> owned_;
};

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace tessera::vision
