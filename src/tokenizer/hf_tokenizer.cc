#include "tokenizer/hf_tokenizer.h"

#include "io/input_file.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/vocab_check.h"

namespace tessera::tokenizer {
namespace {

constexpr std::string_view kWordMarker = "\xe2\x96\x81";  // U+2581

// The file's normalizer: every space becomes U+2581.
std::string Normalize(std::string_view text) {
  std::string out;
  for (char c : text) c == ' ' ? out += kWordMarker : out += c;
  return out;
}

// The byte a token names as the ByteFallback decoder reads it: "<0x" two hex digits (either case) ">".
int DecoderByte(const std::string& token) {
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  const int hi = hex(token[3]), lo = hex(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& path) {
  StatusOr<std::string> text = io::ReadInputFile(path, "tokenizer.json", kMaxTokenizerJsonBytes);
  if (!text.ok()) return Status(text.status().code(), "HfTokenizer: " + text.status().message());
  return FromText(text.value(), path);
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromText(std::string_view text, const std::string& name) {
  StatusOr<TokenizerJson> parsed = ParseTokenizerJson(text, name);
  if (!parsed.ok()) return parsed.status();
  TokenizerJson& j = parsed.value();
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  t->bpe_ = BpeTokenizer::FromHfModel(std::move(j.vocab), j.model_size, j.merges, name);
  for (const TokenizerJson::AddedToken& a : j.added) {
    if (a.normalized)
      t->normalized_.Add(Normalize(a.content), a.id, a.special);
    else
      t->raw_.Add(a.content, a.id, a.special);
  }
  return t;
}

Status HfTokenizer::EncodeText(const std::string& text, bool keep_special, std::vector<int32_t>* out) const {
  for (const AddedTokenMatcher::Piece& p : raw_.Split(text, keep_special)) {
    if (p.token >= 0) {
      out->push_back(p.token);
      continue;
    }
    const std::string normalized = Normalize(std::string_view(text).substr(p.offset, p.length));
    // The pre-tokenizer splits at spaces, which normalization has removed: one word per piece.
    for (const AddedTokenMatcher::Piece& q : normalized_.Split(normalized, keep_special)) {
      if (q.token >= 0) {
        out->push_back(q.token);
        continue;
      }
      TESSERA_RETURN_IF_ERROR(bpe_->EncodeHfWord(std::string_view(normalized).substr(q.offset, q.length), out));
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> HfTokenizer::Encode(const std::string& text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  TESSERA_RETURN_IF_ERROR(EncodeText(text, /*keep_special=*/false, &out));
  return out;
}

StatusOr<std::vector<int32_t>> HfTokenizer::EncodeWithSpecialTokens(const std::string& text) const {
  std::vector<int32_t> out;
  TESSERA_RETURN_IF_ERROR(EncodeText(text, /*keep_special=*/true, &out));
  return out;
}

StatusOr<std::string> HfTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text, bytes;
  auto flush = [&] {
    if (IsValidUtf8(bytes)) {
      text += bytes;
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) text += "\xef\xbf\xbd";  // U+FFFD
    }
    bytes.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      return OutOfRange("HfTokenizer::Decode: id " + std::to_string(id) + " is outside [0, " +
                        std::to_string(vocab_size()) + ")");
    if (bpe_->type(id) == TokenizerVocab::kControl) continue;  // special
    const std::string& token = bpe_->Token(id);
    const int b = DecoderByte(token);
    if (b >= 0) {
      bytes += static_cast<char>(b);
      continue;
    }
    flush();
    text += bpe_->Piece(id);  // the token with U+2581 as a space
  }
  flush();
  return text;
}

}  // namespace tessera::tokenizer
