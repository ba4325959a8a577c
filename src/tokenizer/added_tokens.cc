#include "tokenizer/added_tokens.h"

namespace tessera::tokenizer {

int32_t AddedTokenMatcher::Child(int32_t node, unsigned char byte) const {
  const auto it = children_.find(static_cast<uint64_t>(node) << 8 | byte);
  return it == children_.end() ? -1 : it->second;
}

void AddedTokenMatcher::Add(std::string_view content, int32_t id, bool special) {
  if (content.empty()) return;
  int32_t node = 0;
  for (char c : content) {
    const uint64_t key = static_cast<uint64_t>(node) << 8 | static_cast<unsigned char>(c);
    const auto [it, fresh] = children_.emplace(key, static_cast<int32_t>(nodes_.size()));
    if (fresh) nodes_.emplace_back();
    node = it->second;
  }
  if (nodes_[node].token < 0) nodes_[node] = Node{id, special};
}

std::vector<AddedTokenMatcher::Piece> AddedTokenMatcher::Split(std::string_view text, bool keep_special) const {
  std::vector<Piece> out;
  auto add_text = [&](size_t offset, size_t length) {
    if (length == 0) return;
    if (!out.empty() && out.back().token < 0 && out.back().offset + out.back().length == offset)
      out.back().length += length;
    else
      out.push_back({offset, length, -1});
  };
  size_t text_start = 0;
  for (size_t i = 0; i < text.size();) {
    // The longest token starting at i: walk the trie as far as the text allows.
    int32_t node = 0, best = -1;
    size_t best_length = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = Child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      if (nodes_[node].token >= 0) best = node, best_length = j + 1 - i;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    if (nodes_[best].special && !keep_special) {
      i += best_length;  // matched, but stays text
      continue;
    }
    add_text(text_start, i - text_start);
    out.push_back({i, best_length, nodes_[best].token});
    i += best_length;
    text_start = i;
  }
  add_text(text_start, text.size() - text_start);
  return out;
}

}  // namespace tessera::tokenizer
