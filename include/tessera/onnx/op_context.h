// What an ONNX adapter call needs besides its tensors: the kernel context and an arena for the
// index arrays it derives from the node's inputs (positions, valid key counts).
#pragma once

#include "tessera/aligned_buffer.h"
#include "tessera/attention.h"

namespace tessera::onnx {

struct OpContext {
  AttentionContext attention;      // threads + kernel scratch, passed through to tessera::Attention
  Arena* index_scratch = nullptr;  // required: O(B * (S_q + S_kv)) int32 (and GQA's rotated rows), grown on first use for a shape
  AttentionKernel kernel = AttentionKernel::kAuto;  // a fixed kernel, for testing each against the peers
};

}  // namespace tessera::onnx
