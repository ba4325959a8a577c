// The piece types of a serialized SentencePiece ModelProto. libsentencepiece's API tells control,
// unknown, unused and byte pieces apart but not user-defined ones from normal ones, and Debian
// ships no protobuf header for the model, so the few fields needed are read from the wire format.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace tessera::tokenizer {

// ModelProto.pieces[i].type for every piece in order (1 normal .. 6 byte; 1 where absent), or
// an empty vector when `model` is not a well-formed message.
std::vector<int32_t> SentencePieceTypes(std::string_view model);

}  // namespace tessera::tokenizer
