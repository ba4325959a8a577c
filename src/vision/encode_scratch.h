// The scratch memory of vision encode calls, kept from one call to the next. An encoder carves
// every activation of a call from Floats / Ints and gives attention the Arena; each grows to the
// largest call seen and never shrinks. So a second image of a size seen before is encoded without
// an allocation, on pages already faulted in: fresh pages cost a first touch (the kernel zeroes
// them), a visible share of an encode's profile (bench/results/vision.md).
//
// One call at a time per scratch, and nothing in it outlives a call. Model keeps one per encoder
// and lets it hold its largest call's memory for the model's life (docs/images.md); a call that
// finds it busy gets a fresh one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/aligned_buffer.h"

namespace tessera::vision {

class EncodeScratch {
 public:
  // At least `count` values, 64-byte aligned; contents unspecified (an earlier call's values).
  // Throws std::bad_alloc when growing fails.
  float* Floats(size_t count);
  int32_t* Ints(size_t count);
  // Attention's per-thread scratch; the attention call sizes and resets it.
  Arena& attention() { return attention_; }
  // Bytes held now.
  size_t bytes() const { return floats_.size() + ints_.size() + attention_.capacity(); }
  // Fills everything held with NaN (the ints with -1): a test's way to show that no encoder reads
  // scratch it did not write in the same call.
  void Poison();

 private:
  AlignedBuffer floats_, ints_;
  Arena attention_;
};

}  // namespace tessera::vision
