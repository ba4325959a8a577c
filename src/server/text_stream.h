// Generated tokens' text as it may be sent: never a split UTF-8 character (a byte-fallback token
// carries one byte of one), never text that may be the start of a stop string, and nothing from a
// completed stop string on (the API does not return the stop string). Streaming and non-streaming
// responses both take their text from here, so the two always agree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::server {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop = {});

  // Adds one token's bytes (Tokenizer::Piece). Returns the text that became safe to send (a view
  // valid until the next call). Once a stop string completes, stopped() is true and the returned
  // text ends just before it; later calls return nothing.
  std::string_view Append(std::string_view piece);
  // Generation ended without a stop string: the text held back so far (an incomplete UTF-8 tail
  // included; the JSON writer replaces it with U+FFFD).
  std::string_view Finish();

  bool stopped() const { return stopped_; }
  const std::string& stop_matched() const { return matched_; }
  // Everything returned so far.
  std::string_view text() const { return std::string_view(buf_).substr(0, sent_); }

 private:
  // Bytes of buf_ up to the end of its last complete UTF-8 character.
  size_t CompleteEnd() const;
  // Sends buf_[sent_, end) up to the first stop string, keeping back (when `hold`) what may start one.
  std::string_view Release(size_t end, bool hold);
  // Length of the longest suffix of buf_[sent_, end) that is a proper prefix of a stop string.
  size_t HeldPrefix(size_t end) const;

  std::vector<std::string> stop_;
  std::string buf_;  // all text so far: [0, sent_) sent, the rest held back
  size_t sent_ = 0;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace tessera::server
