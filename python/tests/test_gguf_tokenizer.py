"""Tokenizers built from a GGUF's vocabulary (tessera._Tokenizer.from_vocab, C++ Tokenizer::FromVocab).

Two tiny checkpoints get a tokenizer and llama.cpp's convert_hf_to_gguf.py turns each into a GGUF:
- gemma3: tests/testdata/models/gemma3_text with a tokenizer.model with Gemma's options
  (tests/testdata/tokenizer/gemma_style.model) and the tokenizer_config.json a Gemma 3 release
  ships (its added_tokens_decoder decides the GGUF token types): a "llama" (SentencePiece) vocabulary;
- gemma4: tests/testdata/models/gemma4_text with a tokenizer.json shaped like Gemma 4's
  (tests/testdata/tokenizer/gemma4_style.json): a "gemma4" vocabulary, BPE with merges.
The GGUF's tokenizer.ggml.* metadata, read with the PyPI `gguf` package, builds our tokenizer, whose
ids must equal transformers' tokenizer of the checkpoint (and sentencepiece's for gemma3), and
llama.cpp's tokenization of the same GGUF (llama-cpp-python in bench/.peers/venv, vocab_only).
Needs bench/setup_peers.sh (the converter's sdist and the llama-cpp-python venv) and torch +
transformers (python/requirements-peers.txt): skipped with the reason when absent.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import texts as tokenizer_texts

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PEERS = os.path.join(ROOT, "bench", ".peers")
SDISTS = [os.path.join(PEERS, "llama-sdist", "vendor", "llama.cpp"),
          os.path.join(PEERS, "sdist-full", "llama_cpp_python-0.3.36", "vendor", "llama.cpp")]
PEERS_PYTHON = os.path.join(PEERS, "venv", "bin", "python")
MODELS = os.path.join(ROOT, "tests", "testdata", "models")
SPM_MODEL = os.path.join(ROOT, "tests", "testdata", "tokenizer", "gemma_style.model")
GEMMA4_JSON = os.path.join(ROOT, "tests", "testdata", "tokenizer", "gemma4_style.json")

tessera = pytest.importorskip("tessera")
gguf = pytest.importorskip("gguf", reason="the PyPI gguf package (python/requirements.txt)")

# Ids 0..12 of gemma_style.model; special ones as in Gemma 3's tokenizer_config (the converter makes
# them control tokens), the rest user-defined (whitespace runs, a plain word).
ADDED = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
         "<end_of_image>", "\n\n", "\t", "\u2581\u2581\u2581\u2581", "tessera"]
N_SPECIAL = 9

# The converter's GGUF keys and the from_vocab arguments they fill.
IDS = {"bos_id": "tokenizer.ggml.bos_token_id", "eos_id": "tokenizer.ggml.eos_token_id",
       "unk_id": "tokenizer.ggml.unknown_token_id", "pad_id": "tokenizer.ggml.padding_token_id"}
FLAGS = {"add_bos": "tokenizer.ggml.add_bos_token", "add_eos": "tokenizer.ggml.add_eos_token",
         "add_space_prefix": "tokenizer.ggml.add_space_prefix"}


def corpus():
    return tokenizer_texts.corpus()


def _sdist():
    for s in SDISTS:
        if os.path.isfile(os.path.join(s, "convert_hf_to_gguf.py")):
            return s
    pytest.skip("llama.cpp's convert_hf_to_gguf.py is absent (bash bench/setup_peers.sh)")


@pytest.fixture(scope="module", params=["gemma3", "gemma4"])
def checkpoint(request, tmp_path_factory):
    pytest.importorskip("torch", reason="the converter needs torch (python/requirements-peers.txt)")
    pytest.importorskip("transformers", reason="python/requirements-peers.txt")
    kind = request.param
    d = tmp_path_factory.mktemp(kind + "_tok")
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(MODELS, kind + "_text", f), d / f)
    config = {"tokenizer_class": "GemmaTokenizer", "add_bos_token": True, "add_eos_token": False,
              "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}
    if kind == "gemma3":
        shutil.copy(SPM_MODEL, d / "tokenizer.model")
        config["added_tokens_decoder"] = {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                     "special": i < N_SPECIAL} for i, t in enumerate(ADDED)}
    else:
        shutil.copy(GEMMA4_JSON, d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return kind, d


@pytest.fixture(scope="module")
def gguf_path(checkpoint):
    sdist = _sdist()
    kind, checkpoint = checkpoint
    out = checkpoint / "tiny.gguf"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(sdist, "gguf-py"), sdist]))
    r = subprocess.run([sys.executable, os.path.join(sdist, "convert_hf_to_gguf.py"), str(checkpoint),
                        "--outtype", "f32", "--outfile", str(out)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return kind, str(out)


def read_vocab(path):
    """The from_vocab arguments from a GGUF's tokenizer metadata (PyPI gguf's reader)."""
    fields = gguf.GGUFReader(path).fields

    def get(key, default=None):
        f = fields.get(key)
        return default if f is None else f.contents()

    v = {"model": get("tokenizer.ggml.model"), "tokens": get("tokenizer.ggml.tokens"),
         "scores": get("tokenizer.ggml.scores", []), "token_types": get("tokenizer.ggml.token_type", []),
         "merges": get("tokenizer.ggml.merges", [])}
    v.update({arg: int(get(key, -1)) for arg, key in IDS.items()})
    v.update({arg: bool(get(key, default)) for (arg, key), default in zip(FLAGS.items(), (True, False, False))})
    return v


@pytest.fixture(scope="module")
def ours(gguf_path):
    return tessera._tessera._Tokenizer.from_vocab(**read_vocab(gguf_path[1]), name=gguf_path[1])


def test_gguf_holds_the_vocabulary_gemmas_converter_writes(gguf_path):
    kind, path = gguf_path
    v = read_vocab(path)
    assert len(v["tokens"]) == 512
    assert (v["bos_id"], v["eos_id"], v["pad_id"], v["add_bos"], v["add_space_prefix"]) == (2, 1, 0, True, False)
    assert v["tokens"][13] == "<0x00>" and v["token_types"][13] == 6
    if kind == "gemma3":
        assert v["model"] == "llama" and not v["merges"]
        # Special entries of added_tokens_decoder become control tokens (<unk> included), the
        # others user-defined with U+2581 written as a space.
        assert v["token_types"][:13] == [3] * N_SPECIAL + [4] * 4
        assert v["tokens"][11] == "    "
    else:
        # Scores are all the same placeholder: merges rank the pairs. The named special tokens are
        # control; "<|channel>" is user-defined; whitespace runs are plain tokens.
        assert v["model"] == "gemma4" and len(v["merges"]) == 176 and set(v["scores"]) == {-1000.0}
        assert v["token_types"][:13] == [3] * 5 + [1] * 7 + [4]
        assert v["tokens"][11] == "\u2581" * 4 and v["tokens"][12] == "<|channel>"


def test_matches_transformers(checkpoint, ours):
    import transformers
    kind, path = checkpoint
    hf = transformers.AutoTokenizer.from_pretrained(str(path))
    sp = None
    if kind == "gemma3":
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=SPM_MODEL)
    for text in corpus():
        # Control tokens written in the text stay text (split_special_tokens), as in our Encode.
        want = hf(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert ours.encode(text, False) == want, repr(text)
        assert ours.encode(text, True) == [2] + want, repr(text)
        assert ours.decode(want) == text, repr(text)
        if sp is not None:
            assert want == sp.encode(text) and sp.decode(want) == text, repr(text)


def test_matches_llama_cpp(gguf_path, ours, tmp_path):
    gguf_path = gguf_path[1]
    if not os.access(PEERS_PYTHON, os.X_OK):
        pytest.skip(f"{PEERS_PYTHON} is absent (bash bench/setup_peers.sh)")
    texts = corpus()
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    script = ("import json, sys, llama_cpp\n"
              "m = llama_cpp.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)\n"
              "texts = json.load(open(sys.argv[2]))\n"
              "print(json.dumps([[m.tokenize(t.encode(), add_bos=b, special=False) for b in (False, True)]"
              " for t in texts]))\n")
    r = subprocess.run([PEERS_PYTHON, "-c", script, gguf_path, str(tmp_path / "texts.json")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    for text, (plain, with_bos) in zip(texts, theirs):
        assert ours.encode(text, False) == plain, repr(text)
        assert ours.encode(text, True) == with_bos, repr(text)


def test_pieces_stream_back_to_the_text(ours):
    for text in ("ok 🙂 東京", "a    b\n\nc", "tessera", "<|channel>x"):
        assert b"".join(ours.piece(i) for i in ours.encode(text, True)) == text.encode()
    assert ours.vocab_size == 512 and ours.bos_id == 2 and ours.eos_id == 1


def test_bad_vocabulary_names_the_field(gguf_path):
    kind, path = gguf_path
    v = read_vocab(path)
    cases = [(dict(scores=v["scores"][:-1]), "tokenizer.ggml.scores has 511 entries for 512"),
             (dict(bos_id=512), "tokenizer.ggml.bos_token_id 512"),
             (dict(token_types=[7] + v["token_types"][1:]), "tokenizer.ggml.token_type[0] is 7"),
             (dict(tokens=v["tokens"][:5] + [v["tokens"][4]] + v["tokens"][6:]), "tokenizer.ggml.tokens[5]"),
             (dict(model="rwkv"), "tokenizer.ggml.model 'rwkv'")]
    if kind == "gemma4":
        cases += [(dict(merges=[]), "tokenizer.ggml.merges is missing or empty"),
                  (dict(merges=v["merges"][:3] + ["nospace"]), "tokenizer.ggml.merges[3]")]
    for change, needle in cases:
        with pytest.raises(ValueError) as e:
            tessera._tessera._Tokenizer.from_vocab(**{**v, **change}, name="bad.gguf")
        assert needle in str(e.value) and "bad.gguf" in str(e.value)
