#include "tessera/kv/ring_store.h"

#include <algorithm>
#include <limits>
#include <string>

namespace tessera::kv {

namespace {
constexpr int32_t kNone = std::numeric_limits<int32_t>::min();
}

RingStore::RingStore(const KvGeometry& g, int64_t window, int64_t max_chunk)
    : window_(window),
      max_chunk_(max_chunk),
      buf_(g, Capacity(window, max_chunk)),
      written_(g.batch, 0),
      valid_(g.batch, 0),
      last_pos_(g.batch, kNone) {
  TESSERA_CHECK(window >= 1 && max_chunk >= 1, "RingStore needs window >= 1 and max_chunk >= 1");
}

Status RingStore::Append(const KvAppend& in) {
  TESSERA_RETURN_IF_ERROR(CheckAppend("RingStore", buf_.geometry(), in, last_pos_.data()));
  const int64_t B = in.k.batch, S = in.k.seq, C = capacity();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = in.count ? in.count[b] : S;
    if (n > max_chunk_)
      return OutOfRange("RingStore::Append: chunk of " + std::to_string(n) + " tokens exceeds max_chunk " +
                        std::to_string(max_chunk_) + " of this ring (window " + std::to_string(window_) + ")");
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = in.count ? in.count[b] : S, r = in.first_row + b;
    for (int64_t i = 0; i < n; ++i) buf_.Write(in, b, i, (written_[r] + i) % C);
    written_[r] += n;
    valid_[r] = static_cast<int32_t>(std::min(written_[r], C));
    if (n > 0) last_pos_[r] = in.pos[b * S + n - 1];
  }
  return Status::Ok();
}

void RingStore::Clear() {
  buf_.ClearAll();
  std::fill(written_.begin(), written_.end(), 0);
  std::fill(valid_.begin(), valid_.end(), 0);
  std::fill(last_pos_.begin(), last_pos_.end(), kNone);
}

Status RingStore::ClearRow(int64_t b) {
  if (b < 0 || b >= buf_.geometry().batch) return InvalidArgument("RingStore::ClearRow: row " + std::to_string(b) + " out of range");
  for (int64_t t = 0; t < valid_[b]; ++t) buf_.Clear(b, t);
  written_[b] = 0;
  valid_[b] = 0;
  last_pos_[b] = kNone;
  return Status::Ok();
}

Status RingStore::CanRewind(int64_t b, int64_t n) const {
  if (b < 0 || b >= buf_.geometry().batch) return InvalidArgument("RingStore::Rewind: row " + std::to_string(b) + " out of range");
  if (n < 0 || n > written_[b])
    return OutOfRange("RingStore::Rewind: row " + std::to_string(b) + " holds " + std::to_string(written_[b]) +
                      " tokens, cannot drop " + std::to_string(n));
  const int64_t C = capacity();
  const int64_t end = written_[b] - n;                          // new token count
  const int64_t oldest_kept = std::max<int64_t>(0, written_[b] - C);  // oldest token still in the ring
  // The window needs the W - 1 tokens before the new end; the row's newest position (to keep
  // positions increasing) needs at least the one token before it, even when W = 1.
  const int64_t oldest_needed = std::max<int64_t>(0, end - std::max<int64_t>(window_ - 1, 1));
  if (oldest_needed < oldest_kept)
    return OutOfRange("RingStore::Rewind: row " + std::to_string(b) + " cannot drop " + std::to_string(n) +
                      " tokens: token " + std::to_string(oldest_needed) + " needed by the window was overwritten (ring of " +
                      std::to_string(C) + " slots holds tokens " + std::to_string(oldest_kept) + ".." +
                      std::to_string(written_[b] - 1) + ")");
  return Status::Ok();
}

Status RingStore::Rewind(int64_t b, int64_t n) {
  TESSERA_RETURN_IF_ERROR(CanRewind(b, n));
  const int64_t C = capacity();
  const int64_t end = written_[b] - n;
  for (int64_t t = end; t < written_[b]; ++t) buf_.Clear(b, t % C);
  written_[b] = end;
  valid_[b] = static_cast<int32_t>(std::min(end, C));
  last_pos_[b] = end > 0 ? buf_.pos(b, (end - 1) % C) : kNone;
  return Status::Ok();
}

}  // namespace tessera::kv
