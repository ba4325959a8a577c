#include "server/text_stream.h"

#include <algorithm>

namespace tessera::server {
namespace {

// Bytes a UTF-8 sequence starting with `lead` has (1 for a stray continuation or invalid byte,
// which is then passed on as it is and replaced by the JSON writer).
size_t SequenceLength(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

}  // namespace

TextStream::TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {
  stop_.erase(std::remove_if(stop_.begin(), stop_.end(), [](const std::string& s) { return s.empty(); }), stop_.end());
}

size_t TextStream::CompleteEnd() const {
  // Only the last (at most 3) bytes can belong to an unfinished sequence.
  const size_t n = buf_.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(buf_[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for its lead
    return SequenceLength(c) > back ? n - back : n;
  }
  return n;
}

size_t TextStream::HeldPrefix(size_t end) const {
  size_t held = 0;
  const std::string_view pending = std::string_view(buf_).substr(sent_, end - sent_);
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, pending.size()); k > held; --k) {
      if (pending.substr(pending.size() - k) == std::string_view(s).substr(0, k)) {
        held = k;
        break;
      }
    }
  }
  return held;
}

std::string_view TextStream::Release(size_t end, bool hold) {
  // The earliest stop string that ends by `end`. None can start before sent_: a possible start is
  // always held back.
  size_t hit = std::string::npos;
  const std::string_view upto = std::string_view(buf_).substr(0, end);
  for (const std::string& s : stop_) {
    const size_t at = upto.find(s, sent_);
    if (at != std::string_view::npos && at < hit) {
      hit = at;
      matched_ = s;
    }
  }
  const size_t from = sent_;
  if (hit != std::string::npos) {
    stopped_ = true;
    buf_.resize(hit);
    sent_ = hit;
    return std::string_view(buf_).substr(from);
  }
  sent_ = hold ? end - HeldPrefix(end) : end;
  return std::string_view(buf_).substr(from, sent_ - from);
}

std::string_view TextStream::Append(std::string_view piece) {
  if (stopped_) return {};
  buf_.append(piece);
  return Release(CompleteEnd(), /*hold=*/true);
}

std::string_view TextStream::Finish() {
  if (stopped_) return {};
  return Release(buf_.size(), /*hold=*/false);
}

}  // namespace tessera::server
