// Added tokens (control and user-defined pieces) written in text, found as Hugging Face tokenizers
// finds them: at the leftmost position where any token starts, the longest token that starts there.
// Shared by every tokenizer's EncodeWithSpecialTokens and by tokenizer.json's Encode.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::tokenizer {

class AddedTokenMatcher {
 public:
  // A stretch of the text: a token found in it, or the text between tokens (token -1).
  struct Piece {
    size_t offset, length;
    int32_t token;
  };

  // `content` (non-empty) stands for `id`; `special` tokens can be left as text by Split. A
  // content added twice keeps its first id.
  void Add(std::string_view content, int32_t id, bool special);
  bool empty() const { return nodes_.size() == 1; }

  // `text` cut at the tokens in it. With `keep_special` false a special token found in the text
  // still ends the match there but stays text, as tokenizers' encode_special_tokens does (so a
  // shorter token inside it is not found either). Adjacent text pieces are joined.
  std::vector<Piece> Split(std::string_view text, bool keep_special) const;

 private:
  struct Node {
    int32_t token = -1;  // the token whose content ends here, or -1
    bool special = false;
  };
  // The child of `node` on `byte`, or -1.
  int32_t Child(int32_t node, unsigned char byte) const;

  std::vector<Node> nodes_ = {Node{}};              // a byte trie; node 0 is the root
  std::unordered_map<uint64_t, int32_t> children_;  // key: node << 8 | byte
};

}  // namespace tessera::tokenizer
