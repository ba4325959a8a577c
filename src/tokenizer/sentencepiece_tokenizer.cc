#include "tessera/tokenizer.h"

#include <sentencepiece_processor.h>

#include <exception>

#include "io/input_file.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/spm_piece_types.h"
#include "tokenizer/vocab_check.h"

namespace tessera::tokenizer {
namespace {

constexpr uint64_t kMaxModelBytes = uint64_t{1} << 30;  // far above any SentencePiece model

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer() : added_(std::make_unique<AddedTokenMatcher>()) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(const std::string& path) {
  // Read here, not by SentencePiece: it would block on a FIFO and throw on a directory.
  StatusOr<std::string> bytes = io::ReadInputFile(path, "tokenizer model", kMaxModelBytes);
  if (!bytes.ok()) return Status(bytes.status().code(), "SentencePieceTokenizer: " + bytes.status().message());
  return FromSerializedModel(bytes.value(), path);
}

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromSerializedModel(
    const std::string& bytes, const std::string& name) {
  try {
    std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
    t->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto st = t->sp_->LoadFromSerializedProto(bytes);
    if (!st.ok()) return InvalidArgument("SentencePieceTokenizer: cannot load '" + name + "': " + st.ToString());
    t->bos_id_ = t->sp_->bos_id();
    t->eos_id_ = t->sp_->eos_id();
    // The pieces transformers' conversion turns into added tokens (control and user-defined), and
    // the unknown piece, which its Gemma tokenizer adds as a special token.
    const std::vector<int32_t> types = SentencePieceTypes(bytes);
    for (int id = 0; id < t->sp_->GetPieceSize(); ++id) {
      const bool user_defined = static_cast<size_t>(id) < types.size() && types[id] == TokenizerVocab::kUserDefined;
      if (user_defined || t->sp_->IsControl(id) || t->sp_->IsUnknown(id))
        t->added_->Add(t->sp_->IdToPiece(id), id, /*special=*/false);
    }
    return t;
  } catch (const std::exception& e) {  // e.g. its trie builder throws on an empty piece
    return InvalidArgument("SentencePieceTokenizer: cannot load '" + name + "': " + e.what());
  }
}

StatusOr<std::vector<int32_t>> SentencePieceTokenizer::Encode(const std::string& text, bool add_bos) const {
  std::vector<int> ids;
  const auto st = sp_->Encode(text, &ids);
  if (!st.ok()) return InvalidArgument("SentencePieceTokenizer::Encode: " + st.ToString());
  std::vector<int32_t> out;
  if (add_bos && bos_id_ >= 0) out.push_back(bos_id_);
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

StatusOr<std::vector<int32_t>> SentencePieceTokenizer::EncodeWithSpecialTokens(const std::string& text) const {
  std::vector<int32_t> out;
  for (const AddedTokenMatcher::Piece& p : added_->Split(text, /*keep_special=*/true)) {
    if (p.token >= 0) {
      out.push_back(p.token);
      continue;
    }
    StatusOr<std::vector<int32_t>> ids = Encode(text.substr(p.offset, p.length), /*add_bos=*/false);
    if (!ids.ok()) return ids.status();
    out.insert(out.end(), ids.value().begin(), ids.value().end());
  }
  return out;
}

StatusOr<std::string> SentencePieceTokenizer::Decode(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= sp_->GetPieceSize())
      return OutOfRange("SentencePieceTokenizer::Decode: id " + std::to_string(id) + " is outside [0, " +
                        std::to_string(sp_->GetPieceSize()) + ")");
  std::string text;
  const auto st = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!st.ok()) return InvalidArgument("SentencePieceTokenizer::Decode: " + st.ToString());
  return text;
}

std::string SentencePieceTokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize() || sp_->IsControl(id)) return "";
  // A byte-fallback piece <0xXX> stands for that one byte (part of a UTF-8 sequence).
  if (sp_->IsByte(id)) {
    const int b = ByteTokenValue(sp_->IdToPiece(id));
    if (b >= 0) return std::string(1, static_cast<char>(b));
  }
  // The piece text with SentencePiece's word marker U+2581 shown as a space.
  std::string piece = sp_->IdToPiece(id), out;
  for (size_t i = 0; i < piece.size(); ++i) {
    if (piece.compare(i, 3, "\xe2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += piece[i];
    }
  }
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

int32_t SentencePieceTokenizer::bos_id() const { return bos_id_; }

int32_t SentencePieceTokenizer::eos_id() const { return eos_id_; }


}  // namespace tessera::tokenizer
