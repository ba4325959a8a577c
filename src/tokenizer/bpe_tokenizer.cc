#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include "tokenizer/vocab_check.h"

namespace tessera::tokenizer {
namespace {

constexpr const char* kWho = "BpeTokenizer::FromVocab";
constexpr std::string_view kWordMarker = "\xe2\x96\x81";  // U+2581: how the vocabulary writes a space
constexpr size_t kMaxMerges = size_t{1} << 23;

Status Bad(const std::string& name, const std::string& what) {
  return InvalidArgument(std::string(kWho) + ": '" + name + "': " + what);
}

std::string PairKey(std::string_view left, std::string_view right) {
  std::string key(left);
  key += '\0';
  key += right;
  return key;
}

// Bytes of the UTF-8 character starting with `lead`; a stray continuation byte counts as one.
size_t Utf8Length(unsigned char lead) {
  if (lead < 0xc0) return 1;
  if (lead < 0xe0) return 2;
  return lead < 0xf0 ? 3 : 4;
}

std::string Unescape(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token.compare(i, kWordMarker.size(), kWordMarker) == 0) {
      out += ' ';
      i += kWordMarker.size() - 1;
    } else {
      out += token[i];
    }
  }
  return out;
}

// A stretch of the input: raw text still to tokenize (token -1), or a token found in it.
using Fragment = AddedTokenMatcher::Piece;

}  // namespace

StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromVocab(const TokenizerVocab& v, const std::string& name) {
  if (v.model != "gemma4")
    return Bad(name, "tokenizer.ggml.model is '" + v.model + "', not 'gemma4' (a merges-ranked BPE vocabulary)");
  Status s = CheckVocab(v, kWho, name);
  if (!s.ok()) return s;
  if (v.merges.empty()) return Bad(name, "tokenizer.ggml.merges is missing or empty");
  if (v.merges.size() > kMaxMerges)
    return Bad(name, "tokenizer.ggml.merges has " + std::to_string(v.merges.size()) + " entries, more than " +
                         std::to_string(kMaxMerges));
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->name_ = name;
  t->tokens_ = v.tokens;
  t->ids_.reserve(v.tokens.size());
  std::fill(std::begin(t->byte_ids_), std::end(t->byte_ids_), -1);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    t->types_.push_back(TypeOf(v, i));
    auto [it, fresh] = t->ids_.emplace(v.tokens[i], id);
    if (!fresh)
      return Bad(name, "tokenizer.ggml.tokens[" + std::to_string(i) + "] '" + v.tokens[i] + "' repeats token " +
                           std::to_string(it->second));
    if (t->types_[i] == TokenizerVocab::kUserDefined) t->user_defined_.push_back(id);
    if (t->types_[i] == TokenizerVocab::kUserDefined || t->types_[i] == TokenizerVocab::kControl ||
        t->types_[i] == TokenizerVocab::kUnknown)
      t->added_.Add(v.tokens[i], id, /*special=*/false);
    if (t->types_[i] == TokenizerVocab::kByte) t->byte_ids_[ByteTokenValue(v.tokens[i])] = id;
  }
  // Longest first, as llama.cpp splits them out (ties: lower id first).
  std::stable_sort(t->user_defined_.begin(), t->user_defined_.end(),
                   [&](int32_t a, int32_t b) { return v.tokens[a].size() > v.tokens[b].size(); });
  t->ranks_.reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 == m.size() || m.find('\0') != std::string::npos || !IsValidUtf8(m))
      return Bad(name, "tokenizer.ggml.merges[" + std::to_string(i) + "] is not two UTF-8 parts 'left right'");
    t->ranks_.emplace(PairKey(std::string_view(m).substr(0, space), std::string_view(m).substr(space + 1)),
                      static_cast<int32_t>(i));  // a repeated pair keeps its first rank
  }
  t->bos_id_ = v.bos_id, t->eos_id_ = v.eos_id, t->unk_id_ = v.unk_id;
  t->model_size_ = static_cast<int32_t>(v.tokens.size());
  return t;
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::FromHfModel(TokenizerVocab v, int32_t model_size,
                                                        const std::vector<std::pair<std::string, std::string>>& merges,
                                                        const std::string& name) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->name_ = name;
  t->tokens_ = std::move(v.tokens);
  t->types_ = std::move(v.token_types);
  t->model_size_ = model_size;
  t->ids_.reserve(t->tokens_.size());
  std::fill(std::begin(t->byte_ids_), std::end(t->byte_ids_), -1);
  for (size_t i = 0; i < t->tokens_.size(); ++i) {
    t->ids_.emplace(t->tokens_[i], static_cast<int32_t>(i));
    // The library looks byte tokens up by name in the model's vocabulary, whatever their kind.
    const int b = ByteTokenValue(t->tokens_[i]);
    if (b >= 0 && static_cast<int32_t>(i) < model_size) t->byte_ids_[b] = static_cast<int32_t>(i);
  }
  t->ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i)
    t->ranks_.insert_or_assign(PairKey(merges[i].first, merges[i].second), static_cast<int32_t>(i));
  t->bos_id_ = v.bos_id, t->eos_id_ = v.eos_id, t->unk_id_ = v.unk_id;
  return t;
}

const std::string& BpeTokenizer::Token(int32_t id) const {
  static const std::string kNone;
  return id < 0 || id >= vocab_size() ? kNone : tokens_[static_cast<size_t>(id)];
}

int32_t BpeTokenizer::Rank(std::string_view left, std::string_view right) const {
  const auto it = ranks_.find(PairKey(left, right));
  return it == ranks_.end() ? -1 : it->second;
}

Status BpeTokenizer::Fallback(std::string_view symbol, std::vector<int32_t>* out) const {
  bool all_bytes = true;
  for (char c : symbol) all_bytes &= byte_ids_[static_cast<unsigned char>(c)] >= 0;
  if (all_bytes) {
    for (char c : symbol) out->push_back(byte_ids_[static_cast<unsigned char>(c)]);
  } else if (unk_id_ >= 0) {
    out->push_back(unk_id_);  // one per symbol, as transformers does without its byte tokens
  } else {
    return InvalidArgument("BpeTokenizer::Encode: '" + name_ + "': '" + std::string(symbol) +
                           "' is not a token, and neither its <0xXX> byte tokens nor an unknown token exist");
  }
  return Status::Ok();
}

std::vector<std::string_view> BpeTokenizer::Merge(std::string_view text, const std::vector<size_t>& lengths) const {
  struct Symbol {
    size_t begin, length;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (size_t i = 0, begin = 0; i < lengths.size(); begin += lengths[i++])
    sym.push_back({begin, lengths[i], static_cast<int>(i) - 1, i + 1 < lengths.size() ? static_cast<int>(i + 1) : -1});
  // Lowest rank first, then leftmost; an entry is stale once either side has changed.
  struct Pair {
    int32_t rank;
    int left, right;
    size_t length;
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> queue;
  auto push = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const int32_t rank = Rank(text.substr(sym[l].begin, sym[l].length), text.substr(sym[r].begin, sym[r].length));
    if (rank >= 0) queue.push({rank, l, r, sym[l].length + sym[r].length});
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) push(static_cast<int>(i), static_cast<int>(i + 1));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol &l = sym[p.left], &r = sym[p.right];
    if (l.length == 0 || r.length == 0 || l.next != p.right || l.length + r.length != p.length) continue;
    l.length += r.length;
    r.length = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    push(l.prev, p.left);
    push(p.left, l.next);
  }
  std::vector<std::string_view> out;
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) out.push_back(text.substr(sym[i].begin, sym[i].length));
  return out;
}

Status BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  std::vector<size_t> lengths;
  for (size_t i = 0; i < word.size(); i += lengths.back())
    lengths.push_back(std::min(word.size() - i, Utf8Length(static_cast<unsigned char>(word[i]))));
  for (std::string_view s : Merge(word, lengths)) {
    const auto it = ids_.find(std::string(s));
    if (it != ids_.end()) {
      out->push_back(it->second);
    } else {
      Status st = Fallback(s, out);
      if (!st.ok()) return st;
    }
  }
  return Status::Ok();
}

int32_t BpeTokenizer::ModelId(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() || it->second >= model_size_ ? -1 : it->second;
}

Status BpeTokenizer::EncodeHfWord(std::string_view word, std::vector<int32_t>* out) const {
  // The initial symbols written out as the tokens they are, so that Merge (which compares text)
  // sees byte and unknown symbols as the tokens they stand for, as the library's id merges do.
  std::string text;
  std::vector<size_t> lengths;
  bool unknown = false;  // an unknown token waiting: neighbours fuse into it
  auto append = [&](std::string_view token) {
    text += token;
    lengths.push_back(token.size());
  };
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(word.size() - i, Utf8Length(static_cast<unsigned char>(word[i])));
    const std::string_view c = word.substr(i, n);
    i += n;
    if (ModelId(c) >= 0) {
      if (unknown) append(tokens_[static_cast<size_t>(unk_id_)]), unknown = false;
      append(c);
      continue;
    }
    bool all_bytes = true;
    for (char b : c) all_bytes &= byte_ids_[static_cast<unsigned char>(b)] >= 0;
    if (all_bytes) {  // the library adds these before a waiting unknown token
      for (char b : c) append(tokens_[static_cast<size_t>(byte_ids_[static_cast<unsigned char>(b)])]);
    } else if (unk_id_ >= 0) {
      unknown = true;
    } else {
      return InvalidArgument("BpeTokenizer::Encode: '" + name_ + "': '" + std::string(c) +
                             "' is not a token, and neither its <0xXX> byte tokens nor an unknown token exist");
    }
  }
  if (unknown) append(tokens_[static_cast<size_t>(unk_id_)]);
  for (std::string_view s : Merge(text, lengths)) {
    const int32_t id = ModelId(s);
    if (id < 0)
      return Status(StatusCode::kInternal,
                    "BpeTokenizer::Encode: '" + name_ + "': merged '" + std::string(s) + "' is not a token");
    out->push_back(id);
  }
  return Status::Ok();
}

Status BpeTokenizer::EncodeRun(std::string_view raw, std::vector<int32_t>* out) const {
  std::string text;
  for (char c : raw) c == ' ' ? text += kWordMarker : text += c;
  // Runs of newlines apart from the rest (merges never cross them); a whole run of newlines
  // that is a token is taken as one, as llama.cpp does.
  for (size_t i = 0; i < text.size();) {
    const bool newline = text[i] == '\n';
    size_t j = i;
    while (j < text.size() && (text[j] == '\n') == newline) ++j;
    const std::string_view word = std::string_view(text).substr(i, j - i);
    const auto it = newline ? ids_.find(std::string(word)) : ids_.end();
    if (it != ids_.end()) {
      out->push_back(it->second);
    } else {
      Status s = EncodeWord(word, out);
      if (!s.ok()) return s;
    }
    i = j;
  }
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(const std::string& text, bool add_bos) const {
  // User-defined tokens are cut out of the raw text first, longest token first.
  std::vector<Fragment> frags = {{0, text.size(), -1}}, next;
  for (int32_t id : user_defined_) {
    const std::string& tok = tokens_[static_cast<size_t>(id)];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t at = f.offset;
      const std::string_view window = std::string_view(text).substr(0, f.offset + f.length);
      for (size_t m = window.find(tok, at); m != std::string_view::npos; m = window.find(tok, at)) {
        if (m > at) next.push_back({at, m - at, -1});
        next.push_back({m, tok.size(), id});
        at = m + tok.size();
      }
      if (at < f.offset + f.length) next.push_back({at, f.offset + f.length - at, -1});
    }
    frags.swap(next);
  }
  std::vector<int32_t> out;
  if (add_bos && bos_id_ >= 0) out.push_back(bos_id_);
  TESSERA_RETURN_IF_ERROR(EncodeFragments(text, frags, &out));
  return out;
}

StatusOr<std::vector<int32_t>> BpeTokenizer::EncodeWithSpecialTokens(const std::string& text) const {
  std::vector<int32_t> out;
  // No token starts inside the text between the matches, so no user-defined token is left to cut.
  TESSERA_RETURN_IF_ERROR(EncodeFragments(text, added_.Split(text, /*keep_special=*/true), &out));
  return out;
}

Status BpeTokenizer::EncodeFragments(std::string_view text, const std::vector<AddedTokenMatcher::Piece>& pieces,
                                     std::vector<int32_t>* out) const {
  for (const AddedTokenMatcher::Piece& p : pieces) {
    if (p.token >= 0)
      out->push_back(p.token);
    else
      TESSERA_RETURN_IF_ERROR(EncodeRun(text.substr(p.offset, p.length), out));
  }
  return Status::Ok();
}

StatusOr<std::string> BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      return OutOfRange("BpeTokenizer::Decode: id " + std::to_string(id) + " is outside [0, " +
                        std::to_string(vocab_size()) + ")");
    text += Piece(id);
  }
  return text;
}

std::string BpeTokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  const auto i = static_cast<size_t>(id);
  if (types_[i] == TokenizerVocab::kControl) return "";
  if (types_[i] == TokenizerVocab::kByte) return std::string(1, static_cast<char>(ByteTokenValue(tokens_[i])));
  return Unescape(tokens_[i]);
}

}  // namespace tessera::tokenizer
