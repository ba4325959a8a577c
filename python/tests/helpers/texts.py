"""Texts the tokenizer tests encode: scripts, emoji, whitespace and newline runs, control tokens and
look-alikes, then random strings of atoms. Each test file adds its own texts and atoms."""
from __future__ import annotations

import random

TEXTS = ["", " ", "  ", "    ", "     x", "\n", "\n\n", "\n\n\n", "\t", "a", "the image model",
         "  leading and trailing  ", "Hello, World! 123 4567 3.14159", "München café naïve résumé",
         "Москва привет мир", "東京 日本語 こんにちは 안녕하세요", "مرحبا שלום", "emoji 🙂🚀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
         "tab\tseparated\tvalues", "line one\nline two\n\nparagraph", "tessera engine, tesseract",
         "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<bos><eos><pad><unk> as text",
         "zero\u200bwidth and \u00a0nbsp", "\x01\x02 control bytes \x7f", "ＦＵＬＬ width ｶﾀｶﾅ", "ﬁ ①②",
         "<|channel>thought<channel|>", "a<|channel><|channel>b", "\r\n windows \r\n\r\n"]
ATOMS = ["the", " ", "  ", "\n", "é", "東", "🙂", "42", "<start_of_turn>", "model", "\t", "ça", "x", "-",
         "\n\n", "ß", "tessera", "    ", "<|channel>", "\n\n\n"]


def corpus(texts=(), atoms=(), seed=3, count=200, max_atoms=12):
    """TEXTS and `texts`, then `count` strings of up to max_atoms - 1 atoms from ATOMS and `atoms`."""
    rng = random.Random(seed)
    pool = ATOMS + list(atoms)
    return TEXTS + list(texts) + ["".join(rng.choice(pool) for _ in range(rng.randrange(max_atoms)))
                                  for _ in range(count)]
