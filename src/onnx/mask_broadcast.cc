#include "onnx/mask_broadcast.h"

#include <string>

namespace tessera::onnx {

StatusOr<BroadcastMask> BroadcastOnnxMask(const char* op, const char* arg, const TensorRef& mask, int64_t batch,
                                          int64_t heads, int64_t s_q, int64_t max_keys) {
  const std::string where = std::string(op) + ": " + arg + " ";
  if (mask.type != ElemType::kBool && mask.type != ElemType::kFloat32)
    return InvalidArgument(where + "must be bool or float32, got " + ElemTypeName(mask.type));
  const int64_t rank = mask.rank();
  if (rank < 1 || rank > 4)
    return InvalidArgument(where + "must have rank 1 to 4, got shape " + ShapeString(mask.shape));
  for (int64_t d : mask.shape)
    if (d < 0) return InvalidArgument(where + "has a negative dim in shape " + ShapeString(mask.shape));

  BroadcastMask out;
  out.key_columns = mask.dim(rank - 1);
  if (out.key_columns > max_keys)
    return InvalidArgument(where + "has " + std::to_string(out.key_columns) +
                           " key columns, more than total_sequence_length " + std::to_string(max_keys) +
                           " (shape " + ShapeString(mask.shape) + ")");
  if (mask.data == nullptr && NumElements(mask.shape) > 0) return InvalidArgument(where + "has no data");

  // Target dims and the element strides of the (contiguous) mask, right-aligned.
  const int64_t target[3] = {batch, heads, s_q};
  const char* names[3] = {"batch_size", "q_num_heads", "q_sequence_length"};
  int64_t strides[3] = {0, 0, 0};
  int64_t stride = out.key_columns;
  for (int64_t t = 2; t >= 0; --t) {
    const int64_t axis = rank - 1 - (3 - t);  // mask axis aligned with target dim t, < 0 if absent
    if (axis < 0) continue;
    const int64_t d = mask.dim(axis);
    if (d != 1 && d != target[t])
      return InvalidArgument(where + "of shape " + ShapeString(mask.shape) + " does not broadcast to [" +
                             std::to_string(batch) + ", " + std::to_string(heads) + ", " + std::to_string(s_q) +
                             ", " + std::to_string(out.key_columns) + "]: dim " + std::to_string(axis) + " is " +
                             std::to_string(d) + ", " + names[t] + " is " + std::to_string(target[t]));
    strides[t] = d == 1 ? 0 : stride;
    stride *= d;
  }
  out.dense.kind = mask.type == ElemType::kBool ? DenseMask::Kind::kBool : DenseMask::Kind::kAdditive;
  out.dense.data = mask.data;
  out.dense.stride_batch = strides[0];
  out.dense.stride_head = strides[1];
  out.dense.stride_q = strides[2];
  out.dense.stride_k = 1;
  return out;
}

}  // namespace tessera::onnx
