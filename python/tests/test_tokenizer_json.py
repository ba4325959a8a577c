"""Checkpoint tokenizers and control tokens in text (C++ Tokenizer::FromCheckpointDir, HfTokenizer,
EncodeWithSpecialTokens) against the Hugging Face `tokenizers` package and transformers.

tokenizer.json files come from tests/testdata/tokenizer/gemma_style.model (a SentencePiece model with
Gemma's options, python/scripts/make_gemma_style_tokenizer.py):
- gemma3: transformers' conversion of the model (GemmaTokenizer from tokenizer.model), as a Gemma 3
  checkpoint's tokenizer.json is made; its post processor puts <bos> first;
- gemma4: transformers' GemmaTokenizer built from that vocabulary and its merges, as Gemma 4 ships
  it, with Gemma 4's markers renamed into the vocabulary, special tokens outside it (<|image|>) and
  non-special ones that the class marks normalized;
- gemma4_style: the committed tests/testdata/tokenizer/gemma4_style.json (no pre-tokenizer, no post
  processor).
Our Encode must equal the library with encode_special_tokens (special tokens in the text stay
text), EncodeWithSpecialTokens `tokenizer(text, add_special_tokens=False)`, Decode its decode.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess

import pytest

from helpers import texts as tokenizer_texts
from helpers.models import BUILD_DIR, MODELS_DIR

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZERS = os.path.join(ROOT, "tests", "testdata", "tokenizer")
SPM_MODEL = os.path.join(TOKENIZERS, "gemma_style.model")

tessera = pytest.importorskip("tessera")
tokenizers = pytest.importorskip("tokenizers", reason="python/requirements-peers.txt")
transformers = pytest.importorskip("transformers", reason="python/requirements-peers.txt")

# Gemma 4's names for control pieces of gemma_style.model that no merge touches.
GEMMA4_NAMES = {"<start_of_turn>": "<|turn>", "<end_of_turn>": "<turn|>", "<start_of_image>": "<|image>",
                "<end_of_image>": "<image|>", "tessera": "<|channel>"}
KINDS = ["gemma3", "gemma4", "gemma4_style"]


def corpus():
    return tokenizer_texts.corpus(
        texts=["emoji 🧪🫠", "<bos><|turn>user\nwho are you?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>",
               "<|image|><|image><image|> <|\"|>quoted<|\"|> <|tool_call>call:f{}<tool_call|>", "\x00 NUL",
               "<start_of_turn", "<start_of_turn >", "< bos>", "<<bos>>", "<bos", "bos>", "<unused0>", "<html><b>x</b>",
               "<|turn", "<turn|", "<|", "|>", "<0x41> <0xFF> literally", "\u2581 \u2581\u2581 literal marks",
               "a b", "a  b", "<mask> <end_of_image>", "tessera<end_of_turn>tessera", "x" * 300, " " * 33,
               "\n" * 7 + "end"],
        atoms=["<end_of_turn>", "<channel|>", "<|turn>", "<turn|>", "<bos>", "<eos>", "<unk>", "<|image|>", "<", ">",
               "|", "a b", "\u2581", "\U0001f9ea", "\x00"],
        seed=5, count=300, max_atoms=16)


def _spm_dir(tmp):
    d = tmp / "spm"
    d.mkdir()
    shutil.copy(SPM_MODEL, d / "tokenizer.model")
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GemmaTokenizer", "add_bos_token": True, "add_eos_token": False}))
    return d


def _gemma4_from(converted, out):
    """GemmaTokenizer (the class Gemma 4 checkpoints name) built from a converted vocabulary."""
    model = json.loads((converted / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    vocab, merges = model["vocab"], [tuple(m) for m in model["merges"]]
    in_merges = {p for m in merges for p in (m[0], m[1], m[0] + m[1])}
    for old, new in GEMMA4_NAMES.items():
        assert old not in in_merges, old
        vocab[new] = vocab.pop(old)
    tok = transformers.models.gemma.GemmaTokenizer(vocab=vocab, merges=merges)
    tok.add_special_tokens({"additional_special_tokens": ["<|turn>", "<turn|>", "<|image>", "<image|>", "<|image|>"]})
    tok.add_tokens(["<|channel>", "<channel|>", "<|\"|>", "<|tool_call>", "<tool_call|>", "a b"])
    tok.save_pretrained(str(out))


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """kind -> a checkpoint directory holding a tokenizer.json and no tokenizer.model."""
    tmp = tmp_path_factory.mktemp("tokjson")
    spm = _spm_dir(tmp)
    out = {"spm": spm}
    transformers.AutoTokenizer.from_pretrained(str(spm)).save_pretrained(str(tmp / "gemma3"))
    _gemma4_from(tmp / "gemma3", tmp / "gemma4")
    (tmp / "gemma4_style").mkdir()
    shutil.copy(os.path.join(TOKENIZERS, "gemma4_style.json"), tmp / "gemma4_style" / "tokenizer.json")
    for kind in KINDS:
        d = tmp / kind
        for f in os.listdir(d):
            if f != "tokenizer.json":
                os.remove(d / f)
        out[kind] = d
    return out


def reference(d, keep_special):
    t = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    t.encode_special_tokens = not keep_special
    return t


@pytest.fixture(scope="module", params=KINDS)
def pair(request, dirs):
    d = dirs[request.param]
    return request.param, d, tessera._tessera._Tokenizer.from_checkpoint_dir(str(d))


def test_the_files_have_the_shapes_we_mean(dirs):
    g3 = json.loads((dirs["gemma3"] / "tokenizer.json").read_text(encoding="utf-8"))
    assert g3["post_processor"]["single"][0] == {"SpecialToken": {"id": "<bos>", "type_id": 0}}
    g4 = json.loads((dirs["gemma4"] / "tokenizer.json").read_text(encoding="utf-8"))
    added = {a["content"]: a for a in g4["added_tokens"]}
    assert added["<|image|>"]["id"] >= len(g4["model"]["vocab"]) and added["<|image|>"]["special"]
    assert added["<|channel>"]["normalized"] and not added["<|channel>"]["special"]
    assert g4["pre_tokenizer"]["type"] == "Split" and g3["normalizer"]["type"] == "Replace"


def test_encode_matches_tokenizers(pair):
    kind, d, ours = pair
    plain, special = reference(d, keep_special=False), reference(d, keep_special=True)
    for text in corpus():
        assert ours.encode(text, False) == plain.encode(text, add_special_tokens=False).ids, (kind, text)
        assert ours.encode_with_special_tokens(text) == special.encode(text, add_special_tokens=False).ids, (kind, text)


def test_encode_with_bos(pair):
    kind, d, ours = pair
    plain = reference(d, keep_special=False)
    assert ours.bos_id == 2 and ours.eos_id == 1
    for text in corpus()[:60]:
        want = plain.encode(text, add_special_tokens=kind == "gemma3").ids
        assert ours.encode(text, True) == ([] if kind == "gemma3" else [2]) + want, (kind, text)


def test_encode_with_special_tokens_matches_transformers(pair):
    kind, d, ours = pair
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"))
    for text in corpus():
        assert ours.encode_with_special_tokens(text) == hf(text, add_special_tokens=False).input_ids, (kind, text)


def test_decode_matches_tokenizers(pair):
    kind, d, ours = pair
    ref = reference(d, keep_special=True)
    rng = random.Random(11)
    n = ours.vocab_size
    assert n == ref.get_vocab_size(with_added_tokens=True)
    cases = [ref.encode(t, add_special_tokens=False).ids for t in corpus()]
    cases += [[rng.randrange(n) for _ in range(rng.randrange(1, 12))] for _ in range(300)]
    byte_ids = [ref.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    cases += [[rng.choice(byte_ids) for _ in range(rng.randrange(1, 6))] for _ in range(300)]
    for ids in cases:
        assert ours.decode(ids) == ref.decode(ids), (kind, ids)


def test_spm_encode_with_special_tokens_matches_transformers(dirs):
    """tokenizer.model: its control, user-defined and unknown pieces as transformers converts them."""
    ours = tessera._tessera._Tokenizer.from_checkpoint_dir(str(dirs["spm"]))
    hf = transformers.AutoTokenizer.from_pretrained(str(dirs["spm"]))
    converted = reference(dirs["gemma3"], keep_special=True)
    for text in corpus():
        want = hf(text, add_special_tokens=False).input_ids
        assert ours.encode_with_special_tokens(text) == want, text
        assert converted.encode(text, add_special_tokens=False).ids == want, text


def test_gguf_bpe_vocabulary_encodes_special_tokens_as_tokenizers(dirs):
    """A "gemma4" GGUF vocabulary (Tokenizer::FromVocab) made from gemma4_style.json as llama.cpp's
    converter types it: special added tokens control, the others user-defined, <0xXX> byte."""
    d = dirs["gemma4_style"]
    j = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    tokens = sorted(j["model"]["vocab"], key=j["model"]["vocab"].get)
    types = [6 if re.fullmatch(r"<0x[0-9A-F]{2}>", t) else 1 for t in tokens]
    for a in j["added_tokens"]:
        types[a["id"]] = 3 if a["special"] else 4
    ours = tessera._tessera._Tokenizer.from_vocab(
        model="gemma4", tokens=tokens, token_types=types, merges=[" ".join(m) for m in j["model"]["merges"]],
        bos_id=2, eos_id=1, pad_id=0, name="gemma4_style.gguf")
    special = reference(d, keep_special=True)
    for text in corpus():
        assert ours.encode_with_special_tokens(text) == special.encode(text, add_special_tokens=False).ids, text


def test_tokenizer_model_comes_first(dirs, tmp_path):
    shutil.copy(dirs["gemma4"] / "tokenizer.json", tmp_path / "tokenizer.json")
    assert tessera._tessera._Tokenizer.from_checkpoint_dir(str(tmp_path)).vocab_size == 518
    shutil.copy(os.path.join(TOKENIZERS, "tiny.model"), tmp_path / "tokenizer.model")
    assert tessera._tessera._Tokenizer.from_checkpoint_dir(str(tmp_path)).vocab_size == 64


@pytest.mark.parametrize("change, needle", [
    (lambda j: j["added_tokens"][0].update(lstrip=True), "added_tokens[0].lstrip is true"),
    (lambda j: j.update(normalizer={"type": "NFKC"}), "normalizer is {\"type\":\"NFKC\"}"),
    (lambda j: j["model"].update(type="WordPiece"), "model.type is \"WordPiece\""),
    (lambda j: j["model"]["merges"].append(["<pad>", "<eos>"]), "\"<pad><eos>\" is not in model.vocab"),
])
def test_bad_file_names_the_field(dirs, tmp_path, change, needle):
    j = json.loads((dirs["gemma4"] / "tokenizer.json").read_text(encoding="utf-8"))
    change(j)
    (tmp_path / "tokenizer.json").write_text(json.dumps(j), encoding="utf-8")
    with pytest.raises(ValueError) as e:
        tessera._tessera._Tokenizer.from_checkpoint_dir(str(tmp_path))
    assert needle in str(e.value) and str(tmp_path / "tokenizer.json") in str(e.value)


def test_run_prompt_with_only_tokenizer_json(dirs, tmp_path):
    """`tessera run --prompt` on a checkpoint whose tokenizer is a tokenizer.json: the prompt's ids
    are the library's (with <bos>), and the text it prints is, token by token, what the library
    makes of the ids the same model generates for those ids given as --ids."""
    binary = os.path.join(BUILD_DIR, "tessera")
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} is not built")
    d = tmp_path / "gemma4_text"
    d.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(MODELS_DIR, "gemma4_text", f), d / f)
    shutil.copy(dirs["gemma4"] / "tokenizer.json", d / "tokenizer.json")
    ref = reference(dirs["gemma4"], keep_special=False)
    prompt = "the image model 東京 🙂"
    ids = [2] + ref.encode(prompt, add_special_tokens=False).ids
    common = ["--max-new-tokens", "6", "--no-stop", "--threads", "1"]
    by_prompt = subprocess.run([binary, "run", "--model", str(d), "--prompt", prompt, *common],
                               capture_output=True, timeout=120)
    assert by_prompt.returncode == 0, by_prompt.stderr.decode(errors="replace")
    assert f"prefill {len(ids)} tokens".encode() in by_prompt.stderr
    by_ids = subprocess.run([binary, "run", "--model", str(d), "--ids", ",".join(map(str, ids)), *common],
                            capture_output=True, text=True, timeout=120)
    assert by_ids.returncode == 0, by_ids.stderr
    generated = [int(t) for t in by_ids.stdout.split()]
    assert len(generated) == 6

    def piece(i):  # a byte token streams its byte; anything else its decoded text
        m = re.fullmatch(r"<0x([0-9A-F]{2})>", ref.id_to_token(i))
        return bytes([int(m.group(1), 16)]) if m else ref.decode([i]).encode()

    assert by_prompt.stdout == b"".join(piece(i) for i in generated) + b"\n"
    assert tessera.Model.load(str(d), max_context=64).tokenizer.encode(prompt, True) == ids
