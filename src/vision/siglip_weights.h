// The weights of a Gemma 3 vision path bound from a checkpoint: the SigLIP tower's matrices as
// views into the (memory-mapped) checkpoint in their stored dtype, its vectors copied to f32, and
// the projector's matrix transposed once into Linear's [out, in] layout.
#pragma once

#include <string>
#include <vector>

#include "io/safetensors_checkpoint.h"
#include "tessera/aligned_buffer.h"
#include "tessera/linear.h"
#include "tessera/precision.h"
#include "vision/siglip_config.h"

namespace tessera::vision {

struct SiglipLayerWeights {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;
  ops::WeightView q, k, v, o, fc1, fc2;
  std::vector<float> q_b, k_b, v_b, o_b, fc1_b, fc2_b;
};

struct SiglipWeights {
  // The Conv2d patch embedding as a Linear [hidden, channels * patch * patch] over patches
  // flattened in the conv weight's (c, ky, kx) order.
  ops::WeightView patch;
  std::vector<float> patch_b;
  std::vector<float> position;  // [num_patches, hidden]
  std::vector<SiglipLayerWeights> layers;
  std::vector<float> post_w, post_b;
  std::vector<float> mm_norm_w;  // Gemma3RMSNorm weight (applied as 1 + w)
  ops::WeightView mm_proj;       // [text_hidden, vision_hidden]: mm_input_projection_weight transposed
  std::vector<AlignedBuffer> owned;
};

// Binds every tensor under the vision tower prefix ("model.vision_tower.", "vision_tower.", each
// optionally followed by "vision_model.") and the projector prefix ("model.multi_modal_projector."
// or "multi_modal_projector."), checking names and shapes. At precision kBf16 a matrix not stored as
// bf16 is converted to a bf16 copy (Linear rounds its inputs only over bf16 weights). Errors name
// the tensor and the checkpoint.
StatusOr<SiglipWeights> LoadSiglipWeights(const io::SafetensorsCheckpoint& ckpt, const SiglipConfig& config,
                                          int64_t text_hidden, ops::MatmulPrecision precision);

}  // namespace tessera::vision
