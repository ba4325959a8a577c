"""Writes the seed inputs of fuzz/tokenizer_json_fuzzer.cc into fuzz/corpus/tokenizer_json/: small
tokenizer.json files of the shape transformers writes for Gemma (they load) and a few with one
field the loader refuses. Run from the repository root: python3 fuzz/tokenizer_json_corpus.py
"""
import copy
import json
import os

OUT = os.path.join("fuzz", "corpus", "tokenizer_json")
SPACE = "\u2581"


def tiny():
    words = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "h", "e", "l", "o", SPACE, "w", "r", "d", "he",
             "ll", "hell", "hello", SPACE + "w", "or", SPACE + "wor", SPACE + "world", "\n", "\n\n", "<|channel>",
             "<0x0A>", "<0xC3>", "<0xA9>", "<0xF0>"]
    merges = [["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o"], [SPACE, "w"], ["o", "r"], [SPACE + "w", "or"],
              ["\n", "\n"]]
    added = [{"id": i, "content": w, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, w in enumerate(words[:5])]
    added.append({"id": 23, "content": "<|channel>", "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": True, "special": False})
    added.append({"id": len(words), "content": "<|image|>", "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True})
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {w: i for i, w in enumerate(words)}, "merges": merges},
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    base = tiny()
    plain = copy.deepcopy(base)
    plain["pre_tokenizer"] = plain["post_processor"] = None
    plain["model"]["merges"] = [" ".join(m) for m in plain["model"]["merges"]]  # the older string form
    plain["added_tokens"] = plain["added_tokens"][:5]
    lstrip = copy.deepcopy(base)
    lstrip["added_tokens"][4]["lstrip"] = True
    lowercase = copy.deepcopy(base)
    lowercase["normalizer"] = {"type": "Lowercase"}
    seeds = {"gemma_shape": base, "no_post_processor": plain, "lstrip": lstrip, "lowercase": lowercase}
    for name, j in seeds.items():
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
