// SentencePieceTokenizer::FromVocab: rebuilds a SentencePiece ModelProto from a "llama" vocabulary
// (pieces with score and type, plus the fixed specs Gemma's tokenizer uses) and loads it through
// libsentencepiece, so GGUF text is tokenized by the same code as the checkpoint's tokenizer.model.
#include <cstring>
#include <unordered_map>

#include "tessera/tokenizer.h"
#include "tokenizer/vocab_check.h"

namespace tessera::tokenizer {
namespace {

constexpr const char* kWho = "SentencePieceTokenizer::FromVocab";
constexpr const char* kWordMarker = "\xe2\x96\x81";  // U+2581, SentencePiece's escaped space

// The protobuf wire format, only what ModelProto needs: varints, fixed32 floats, byte strings.
class ProtoWriter {
 public:
  void Varint(int field, uint64_t v) {
    Tag(field, 0);
    Raw(v);
  }
  void Int32(int field, int32_t v) { Varint(field, static_cast<uint64_t>(static_cast<int64_t>(v))); }
  void Float(int field, float v) {
    Tag(field, 5);
    char b[4];
    std::memcpy(b, &v, 4);  // little-endian, as the wire format is (x86/arm64 hosts)
    out_.append(b, 4);
  }
  void Bytes(int field, const std::string& s) {
    Tag(field, 2);
    Raw(s.size());
    out_ += s;
  }
  const std::string& str() const { return out_; }

 private:
  void Tag(int field, int wire_type) { Raw((static_cast<uint64_t>(field) << 3) | wire_type); }
  void Raw(uint64_t v) {
    for (; v >= 0x80; v >>= 7) out_ += static_cast<char>((v & 0x7f) | 0x80);
    out_ += static_cast<char>(v);
  }
  std::string out_;
};

// The piece text SentencePiece expects: the converter writes user-defined pieces with plain
// spaces where the model had U+2581; after normalization the text never holds a plain space.
std::string SpmPiece(const std::string& token) {
  std::string out;
  for (char c : token) c == ' ' ? out += kWordMarker : out += c;
  return out;
}

Status Bad(const std::string& name, const std::string& what) {
  return InvalidArgument(std::string(kWho) + ": '" + name + "': " + what);
}

// The piece index SentencePiece needs as its unknown piece (it refuses a model without one):
// tokenizer.ggml.unknown_token_id, else the one token of the unknown type, else a token "<unk>"
// (Gemma's converter marks it control), else id 0, llama.cpp's default. With byte fallback the
// unknown piece is never produced by Encode.
StatusOr<size_t> UnknownIndex(const TokenizerVocab& v, const std::string& name) {
  if (v.unk_id >= 0) {
    const int32_t t = TypeOf(v, static_cast<size_t>(v.unk_id));
    if (t == TokenizerVocab::kByte || t == TokenizerVocab::kUnused)
      return Bad(name, "tokenizer.ggml.unknown_token_id " + std::to_string(v.unk_id) + " names a token of type " +
                           std::to_string(t) + " (byte or unused)");
    return static_cast<size_t>(v.unk_id);
  }
  std::vector<size_t> unknown;
  size_t named = v.tokens.size();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (TypeOf(v, i) == TokenizerVocab::kUnknown) unknown.push_back(i);
    if (v.tokens[i] == "<unk>" && TypeOf(v, i) != TokenizerVocab::kByte) named = i;
  }
  if (unknown.size() > 1)
    return Bad(name, "tokens " + std::to_string(unknown[0]) + " and " + std::to_string(unknown[1]) +
                         " both have the unknown type (2); SentencePiece takes one");
  if (unknown.size() == 1) return unknown[0];
  if (named < v.tokens.size()) return named;
  if (TypeOf(v, 0) == TokenizerVocab::kByte || TypeOf(v, 0) == TokenizerVocab::kUnused)
    return Bad(name, "no unknown token: neither tokenizer.ggml.unknown_token_id, a token of type 2, '<unk>', "
                     "nor a usable token 0");
  return size_t{0};
}

// The piece types as SentencePiece will see them: one unknown piece, chosen as above.
StatusOr<std::vector<int32_t>> SpmTypes(const TokenizerVocab& v, const std::string& name) {
  StatusOr<size_t> unk = UnknownIndex(v, name);
  if (!unk.ok()) return unk.status();
  std::vector<int32_t> types(v.tokens.size());
  for (size_t i = 0; i < types.size(); ++i) {
    types[i] = TypeOf(v, i);
    if (types[i] == TokenizerVocab::kUnknown) types[i] = TokenizerVocab::kControl;  // a second one: inert
  }
  types[unk.value()] = TokenizerVocab::kUnknown;
  int bytes = 0;
  std::vector<bool> seen_byte(256, false);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != TokenizerVocab::kByte) continue;
    const int b = ByteTokenValue(v.tokens[i]);
    if (seen_byte[b]) return Bad(name, "byte token " + v.tokens[i] + " appears twice");
    seen_byte[b] = true;
    ++bytes;
  }
  if (bytes != 0 && bytes != 256)
    return Bad(name, "byte fallback needs all 256 byte tokens <0x00>..<0xFF>; found " + std::to_string(bytes));
  return types;
}

// ModelProto field numbers from sentencepiece_model.proto.
StatusOr<std::string> SerializeModelProto(const TokenizerVocab& v, const std::vector<int32_t>& types,
                                          const std::string& name) {
  ProtoWriter model;
  std::unordered_map<std::string, size_t> ids;
  ids.reserve(v.tokens.size());
  bool byte_fallback = false;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string piece = types[i] == TokenizerVocab::kByte ? v.tokens[i] : SpmPiece(v.tokens[i]);
    auto [it, fresh] = ids.emplace(piece, i);
    if (!fresh)
      return Bad(name, "tokenizer.ggml.tokens[" + std::to_string(i) + "] '" + v.tokens[i] + "' repeats token " +
                           std::to_string(it->second) + " (spaces count as U+2581)");
    byte_fallback |= types[i] == TokenizerVocab::kByte;
    ProtoWriter p;
    p.Bytes(1, piece);
    p.Float(2, v.scores.empty() ? 0.0f : v.scores[i]);
    p.Varint(3, static_cast<uint64_t>(types[i]));  // the GGUF numbering is SentencePiece's
    model.Bytes(1, p.str());
  }
  ProtoWriter trainer;
  trainer.Varint(3, 2);  // model_type: BPE
  trainer.Int32(4, static_cast<int32_t>(v.tokens.size()));
  trainer.Varint(35, byte_fallback ? 1 : 0);
  int32_t unk = 0;
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i] == TokenizerVocab::kUnknown) unk = static_cast<int32_t>(i);
  const int32_t special[] = {unk, v.bos_id, v.eos_id, v.pad_id};  // unk_id=40 .. pad_id=43
  for (int k = 0; k < 4; ++k) {
    trainer.Int32(40 + k, special[k]);
    if (special[k] >= 0) trainer.Bytes(45 + k, SpmPiece(v.tokens[static_cast<size_t>(special[k])]));
  }
  model.Bytes(2, trainer.str());
  ProtoWriter normalizer;  // identity: no charsmap; spaces escaped; nothing trimmed
  normalizer.Bytes(1, "identity");
  normalizer.Varint(3, v.add_space_prefix ? 1 : 0);
  normalizer.Varint(4, 0);
  normalizer.Varint(5, 1);
  model.Bytes(3, normalizer.str());
  return model.str();
}

}  // namespace

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::FromVocab(const TokenizerVocab& v,
                                                                                    const std::string& name) {
  if (v.model != "llama")
    return Bad(name, "tokenizer.ggml.model is '" + v.model + "', not 'llama' (a SentencePiece vocabulary)");
  Status s = CheckVocab(v, kWho, name);
  if (!s.ok()) return s;
  StatusOr<std::vector<int32_t>> types = SpmTypes(v, name);
  if (!types.ok()) return types.status();
  StatusOr<std::string> proto = SerializeModelProto(v, types.value(), name);
  if (!proto.ok()) return proto.status();
  StatusOr<std::unique_ptr<SentencePieceTokenizer>> t = FromSerializedModel(proto.value(), name);
  if (!t.ok()) return t.status();
  t.value()->bos_id_ = v.bos_id;
  t.value()->eos_id_ = v.eos_id;
  return t;
}

}  // namespace tessera::tokenizer
