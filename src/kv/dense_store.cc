#include "tessera/kv/dense_store.h"

#include <algorithm>
#include <limits>
#include <string>

namespace tessera::kv {

namespace {
constexpr int32_t kNone = std::numeric_limits<int32_t>::min();
}

DenseStore::DenseStore(const KvGeometry& g, int64_t capacity)
    : buf_(g, capacity), valid_(g.batch, 0), last_pos_(g.batch, kNone) {}

Status DenseStore::Append(const KvAppend& in) {
  TESSERA_RETURN_IF_ERROR(CheckAppend("DenseStore", buf_.geometry(), in, last_pos_.data()));
  const int64_t B = in.k.batch, S = in.k.seq, r0 = in.first_row;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = in.count ? in.count[b] : S;
    if (valid_[r0 + b] + n > capacity())
      return OutOfRange("DenseStore::Append: row " + std::to_string(r0 + b) + " holds " +
                        std::to_string(valid_[r0 + b]) + " tokens; appending " + std::to_string(n) +
                        " exceeds capacity " + std::to_string(capacity()));
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = in.count ? in.count[b] : S;
    int32_t& valid = valid_[r0 + b];
    for (int64_t i = 0; i < n; ++i) buf_.Write(in, b, i, valid + i);
    valid += static_cast<int32_t>(n);
    if (n > 0) last_pos_[r0 + b] = in.pos[b * S + n - 1];
  }
  return Status::Ok();
}

void DenseStore::Clear() {
  buf_.ClearAll();
  std::fill(valid_.begin(), valid_.end(), 0);
  std::fill(last_pos_.begin(), last_pos_.end(), kNone);
}

Status DenseStore::ClearRow(int64_t b) {
  if (b < 0 || b >= buf_.geometry().batch) return InvalidArgument("DenseStore::ClearRow: row " + std::to_string(b) + " out of range");
  return Rewind(b, valid_[b]);  // a dense row can always drop all it holds
}

Status DenseStore::CanRewind(int64_t b, int64_t n) const {
  if (b < 0 || b >= buf_.geometry().batch) return InvalidArgument("DenseStore::Rewind: row " + std::to_string(b) + " out of range");
  if (n < 0 || n > valid_[b])
    return OutOfRange("DenseStore::Rewind: row " + std::to_string(b) + " holds " + std::to_string(valid_[b]) +
                      " tokens, cannot drop " + std::to_string(n));
  return Status::Ok();
}

Status DenseStore::Rewind(int64_t b, int64_t n) {
  TESSERA_RETURN_IF_ERROR(CanRewind(b, n));
  for (int64_t t = valid_[b] - n; t < valid_[b]; ++t) buf_.Clear(b, t);
  valid_[b] -= static_cast<int32_t>(n);
  last_pos_[b] = valid_[b] > 0 ? buf_.pos(b, valid_[b] - 1) : kNone;
  return Status::Ok();
}

}  // namespace tessera::kv
