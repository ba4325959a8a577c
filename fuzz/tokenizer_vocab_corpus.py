"""Writes the seed inputs of fuzz/tokenizer_vocab_fuzzer.cc (its header gives the layout) into
fuzz/corpus/tokenizer_vocab/: small "llama" and "gemma4" vocabularies that load, and a few that
must be refused. Run from the repository root: python3 fuzz/tokenizer_vocab_corpus.py
"""
import os
import struct

OUT = os.path.join("fuzz", "corpus", "tokenizer_vocab")
SPACE = "\u2581"


def seed(model, flags, ids, tokens, types=None, scores=None, merges=(), text=""):
    b = bytes([model, flags]) + struct.pack("4b", *ids) + bytes([len(tokens)])
    for t in tokens:
        t = t.encode()
        b += bytes([len(t)]) + t
    if types is not None:
        b += bytes(types)
    if scores is not None:
        b += struct.pack(f"{len(scores)}b", *scores)
    b += bytes([len(merges)])
    for m in merges:
        m = m.encode()
        b += bytes([len(m)]) + m
    return b + text.encode()


def main():
    os.makedirs(OUT, exist_ok=True)
    words = ["<pad>", "<eos>", "<bos>", "<unk>", "\n\n", "h", "e", "l", "o", SPACE, "w", "r", "d", "he", "ll",
             "hell", "hello", SPACE + "w", "or", SPACE + "wor", SPACE + "world"]
    types = [3, 3, 3, 2, 4] + [1] * (len(words) - 5)
    scores = [0, 0, 0, 0, 0] + [-40 - i for i in range(len(words) - 5)]
    scores[-8:] = [-2, -3, -4, -5, -6, -7, -8, -9]
    merges = ["h e", "l l", "he ll", "hell o", SPACE + " w", "o r", SPACE + "w or", SPACE + "wor l", "l d"]
    seeds = {
        "llama_bytes": seed(0, 2 | 4 | 8, (2, 1, 3, 0), words, types, scores, text="hello world\n\n\u00e9"),
        "llama_prefix_nobytes": seed(0, 1 | 2 | 4, (2, 1, -1, 0), words, types, scores, text="hello  world"),
        "gemma4_bytes": seed(1, 4 | 8, (2, 1, 3, 0), words, types, merges=merges, text="hello world\n\n\n"),
        "gemma4_nobytes": seed(1, 4, (2, 1, -1, -1), words, types, merges=merges, text="hello\u00e9"),
        "llama_dup": seed(0, 4, (2, 1, 3, 0), words + ["he"], types + [1], text="he"),
        "gemma4_bad_merge": seed(1, 4, (2, 1, 3, 0), words, types, merges=["hello"]),
        "other_model": seed(2, 0, (-1, -1, -1, -1), ["a"]),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {OUT}")


if __name__ == "__main__":
    main()
