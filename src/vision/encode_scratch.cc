#include "vision/encode_scratch.h"

#include <algorithm>
#include <limits>

namespace tessera::vision {

float* EncodeScratch::Floats(size_t count) {
  floats_.Reserve(count * sizeof(float));
  return floats_.as<float>();
}

int32_t* EncodeScratch::Ints(size_t count) {
  ints_.Reserve(count * sizeof(int32_t));
  return ints_.as<int32_t>();
}

void EncodeScratch::Poison() {
  std::fill_n(floats_.as<float>(), floats_.size() / sizeof(float), std::numeric_limits<float>::quiet_NaN());
  std::fill_n(ints_.as<int32_t>(), ints_.size() / sizeof(int32_t), -1);
  // The arena's bytes are private to attention; NaN there shows the same way.
  Arena& a = attention_;
  a.Reset();
  if (a.capacity() > 0) {
    float* p = a.Take<float>(a.capacity() / sizeof(float));
    std::fill_n(p, a.capacity() / sizeof(float), std::numeric_limits<float>::quiet_NaN());
    a.Reset();
  }
}

}  // namespace tessera::vision
