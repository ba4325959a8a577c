// The tokenizer vocabulary of a GGUF (tokenizer.ggml.* metadata) as tokenizer::TokenizerVocab, for
// Tokenizer::FromVocab: what `--prompt` needs when the model is a GGUF file alone.
#pragma once

#include "tessera/gguf.h"
#include "tessera/status.h"
#include "tessera/tokenizer_vocab.h"

namespace tessera::model {

// Fails naming the key when a field has the wrong type or an id lies outside the token list;
// kNotFound-style InvalidArgument when the file has no tokenizer.ggml.tokens.
StatusOr<tokenizer::TokenizerVocab> ReadGgufVocab(const io::GgufFile& file);

}  // namespace tessera::model
