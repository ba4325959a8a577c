#include "tokenizer/spm_piece_types.h"

namespace tessera::tokenizer {
namespace {

// Protobuf wire format, reading only: varints, fixed 32/64-bit values, length-delimited bytes.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ == data_.size(); }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(data_[pos_++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // The next field: its number, wire type, and for a varint its value, for bytes their span.
  bool Field(uint64_t* number, int* wire, uint64_t* value, std::string_view* bytes) {
    uint64_t tag;
    if (!Varint(&tag)) return false;
    *number = tag >> 3;
    *wire = static_cast<int>(tag & 7);
    switch (*wire) {
      case 0:
        return Varint(value);
      case 1:
        return Skip(8);
      case 5:
        return Skip(4);
      case 2: {
        uint64_t n;
        if (!Varint(&n) || n > data_.size() - pos_) return false;
        *bytes = data_.substr(pos_, n);
        pos_ += n;
        return true;
      }
      default:
        return false;  // groups (3, 4) are not in sentencepiece_model.proto
    }
  }

 private:
  bool Skip(size_t n) {
    if (n > data_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
};

// SentencePiece message: field 3 is the type.
bool PieceType(std::string_view message, int32_t* type) {
  ProtoReader r(message);
  *type = 1;
  while (!r.done()) {
    uint64_t number, value = 0;
    int wire;
    std::string_view bytes;
    if (!r.Field(&number, &wire, &value, &bytes)) return false;
    if (number == 3 && wire == 0) *type = static_cast<int32_t>(value);
  }
  return true;
}

}  // namespace

std::vector<int32_t> SentencePieceTypes(std::string_view model) {
  std::vector<int32_t> types;
  ProtoReader r(model);
  while (!r.done()) {
    uint64_t number, value;
    int wire;
    std::string_view bytes;
    if (!r.Field(&number, &wire, &value, &bytes)) return {};
    if (number != 1 || wire != 2) continue;  // ModelProto field 1: the pieces
    int32_t type;
    if (!PieceType(bytes, &type)) return {};
    types.push_back(type);
  }
  return types;
}

}  // namespace tessera::tokenizer
