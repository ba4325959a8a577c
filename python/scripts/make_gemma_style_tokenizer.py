"""Regenerates the test tokenizers of Tokenizer::FromVocab (tests/tokenizer_vocab_test.cc,
python/tests/test_gguf_tokenizer.py), 512 tokens each (the vocabulary size of the tiny checkpoints):

tests/testdata/tokenizer/gemma_style.model   a SentencePiece model with the options Gemma 3's
    tokenizer.model has (BPE, byte fallback, identity normalization, no dummy prefix, whitespace
    kept as is, digits split), control and user-defined pieces.
tests/testdata/tokenizer/gemma4_style.json   a tokenizer.json shaped like Gemma 4's: the same
    vocabulary as transformers converts it (BPE with merges, byte fallback, spaces replaced by
    U+2581), no pre-tokenizer, the control pieces as special added tokens, and one non-special
    added token "<|channel>" (the converter marks it user-defined) in place of "tessera".

Needs `sentencepiece` (python/requirements.txt) and transformers (python/requirements-peers.txt).
Usage: python python/scripts/make_gemma_style_tokenizer.py
"""
import io
import json
import os
import random
import tempfile

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "testdata", "tokenizer", "gemma_style.model")
OUT_JSON = os.path.join(ROOT, "tests", "testdata", "tokenizer", "gemma4_style.json")

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
    write_tokenizer_json()


def write_tokenizer_json():
    import transformers
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "tokenizer.model"), "wb") as f, open(OUT, "rb") as src:
            f.write(src.read())
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "GemmaTokenizer"}, f)
        transformers.AutoTokenizer.from_pretrained(d).save_pretrained(os.path.join(d, "out"))
        with open(os.path.join(d, "out", "tokenizer.json"), encoding="utf-8") as f:
            j = json.load(f)
    j["pre_tokenizer"] = None
    j["post_processor"] = None
    vocab = j["model"]["vocab"]
    channel = vocab.pop("tessera")
    vocab["<|channel>"] = channel
    j["added_tokens"] = [a for a in j["added_tokens"] if a["special"]]
    j["added_tokens"].append({"id": channel, "content": "<|channel>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": False})
    with open(OUT_JSON, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=1)
    print(OUT_JSON, len(vocab), "tokens,", len(j["model"]["merges"]), "merges")


if __name__ == "__main__":
    main()
