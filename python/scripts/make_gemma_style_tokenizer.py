"""Regenerates tests/testdata/tokenizer/gemma_style.model: a small SentencePiece model with the
options Gemma's tokenizer.model has (BPE, byte fallback, identity normalization, no dummy prefix,
whitespace kept as is, digits split), control and user-defined pieces, for the tests of
Tokenizer::FromVocab (tests/tokenizer_vocab_test.cc, python/tests/test_gguf_tokenizer.py).

512 pieces, the vocabulary size of tests/testdata/models/gemma3_text. Needs the `sentencepiece`
package (python/requirements.txt). Usage: python python/scripts/make_gemma_style_tokenizer.py
"""
import io
import os
import random

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "testdata", "tokenizer", "gemma_style.model")

# Ids as in Gemma: pad 0, eos 1, bos 2, unk 3, then control and user-defined pieces.
# The turn markers are control pieces, as a GGUF of Gemma holds them (special tokens).
CONTROL = ["<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"]
USER_DEFINED = ["\n\n", "\t", "\u2581\u2581\u2581\u2581", "tessera"]


def corpus():
    rng = random.Random(7)
    words = ("the image model token gemma window block attention cache tessera engine fast layer prompt "
             "quantized weights vocabulary merges score byte fallback sentence piece Tokyo München café "
             "naïve résumé Москва привет 東京 日本語 こんにちは 안녕하세요 مرحبا שלום 42 2026 3.14").split()
    lines = []
    for _ in range(3000):
        n = rng.randint(3, 14)
        sep = [" ", " ", " ", "  ", ", ", ". ", "\n"]
        lines.append("".join(rng.choice(words) + rng.choice(sep) for _ in range(n)).strip())
    return lines


def main():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=model, model_type="bpe", vocab_size=512,
        character_coverage=1.0, byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        add_dummy_prefix=False, remove_extra_whitespaces=False, normalization_rule_name="identity",
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", control_symbols=CONTROL, user_defined_symbols=USER_DEFINED,
        num_threads=1, minloglevel=2)
    with open(OUT, "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    print(OUT, sp.vocab_size(), "pieces")


if __name__ == "__main__":
    main()
