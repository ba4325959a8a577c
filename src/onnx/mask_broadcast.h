// An ONNX attention mask or bias tensor as the kernel's DenseMask: broadcasting becomes strides
// (0 on broadcast dims), so no [B, H, S_q, S_kv] buffer is ever materialized.
#pragma once

#include <cstdint>

#include "tessera/attention.h"
#include "tessera/onnx/tensor_ref.h"
#include "tessera/status.h"

namespace tessera::onnx {

struct BroadcastMask {
  DenseMask dense;          // views the tensor's data; logical shape [B, H, S_q, key_columns]
  int64_t key_columns = 0;  // the tensor's last dim; keys at or beyond it are masked out
};

// Maps `mask` (rank 1..4, bool or float32) onto [batch, heads, s_q, key_columns] with
// right-aligned (numpy) broadcasting: each of its leading dims is 1 (broadcast) or equal to the
// target dim. The last dim is never broadcast: it holds key columns 0..key_columns-1 and must
// not exceed `max_keys`; ONNX Attention pads a shorter mask with -inf / false, which the caller
// expresses by treating keys >= key_columns as invalid. `op` and `arg` name the operator and the
// input in error messages.
StatusOr<BroadcastMask> BroadcastOnnxMask(const char* op, const char* arg, const TensorRef& mask, int64_t batch,
                                          int64_t heads, int64_t s_q, int64_t max_keys);

}  // namespace tessera::onnx
