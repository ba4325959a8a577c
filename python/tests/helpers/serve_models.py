"""Checkpoints for the server tests (`tessera serve` needs a tokenizer, the tiny checkpoints have
none) and the independent references a served request is compared with: the chat template rendered
by jinja2 as transformers renders it, the text tokenized by sentencepiece split on control pieces as
transformers' tokenizers split on special tokens, images laid out as the processors lay them out.

- text:   tests/testdata/models/gemma3_text + tests/testdata/tokenizer/gemma_style.model (512 pieces,
          the checkpoint's vocabulary size; Gemma's ids and turn markers).
- gemma3: the tiny multimodal Gemma 3 with the same tokenizer; its config's image ids moved onto
          that tokenizer's pieces (boi <start_of_image> 7, eoi <end_of_image> 8, soft token <mask> 4),
          so a rendered "<start_of_image>" is the model's image marker.
- demo:   models/demo-gemma4-unified (vocab 2048) + a 2048-piece SentencePiece model trained here whose
          control pieces sit on the demo's ids (<|image> 3, <image|> 4, <|image|> 5, ...).
Each gets a chat_template.jinja of the test's own (TEMPLATES) unless asked not to."""
from __future__ import annotations

import io
import json
import os
import random
import shutil

from helpers.models import MODELS_DIR, REPO

TOKENIZERS = os.path.join(REPO, "tests", "testdata", "tokenizer")
DEMO_DIR = os.path.join(REPO, "models", "demo-gemma4-unified")

# Our own small templates in each family's turn format (what the checkpoint's template would do for
# plain conversations): a system turn of its own, image parts as the family's image marker.
TEMPLATES = {
    "gemma3": r"""{{ bos_token }}
{%- for m in messages -%}
{%- if m['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = m['role'] -%}{%- endif -%}
{{ '<start_of_turn>' + role + '\n' }}
{%- if m['content'] is string -%}
{{ m['content'] | trim }}
{%- else -%}
{%- for p in m['content'] -%}
{%- if p['type'] == 'image' -%}{{ '<start_of_image>' }}{%- elif p['type'] == 'text' -%}{{ p['text'] | trim }}{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}
""",
    "gemma4": r"""{{ bos_token }}
{%- for m in messages -%}
{%- if m['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = m['role'] -%}{%- endif -%}
{{ '<|turn>' + role + '\n' }}
{%- if m['content'] is string -%}
{{ m['content'] | trim }}
{%- else -%}
{%- for p in m['content'] -%}
{%- if p['type'] == 'image' -%}{{ '\n\n<|image|>\n\n' }}{%- elif p['type'] == 'text' -%}{{ p['text'] | trim }}{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{ '<turn|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<|turn>model\n' }}{%- endif -%}
""",
}
TURN_END = {"gemma3": "<end_of_turn>", "gemma4": "<turn|>"}

# The tiny towers' processors (as python/tests/test_image_conformance.py sets them).
GEMMA3_PROCESSOR = {"image_processor_type": "Gemma3ImageProcessor", "size": {"height": 12, "width": 12},
                    "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True}

DEMO_CONTROL = ["<|image>", "<image|>", "<|image|>", "<|video|>", "<|audio|>", "<|audio>", "<audio|>",
                "<|turn>", "<turn|>", "<mask>"]


def _copy(src, dst, files=("config.json", "model.safetensors")):
    os.makedirs(dst, exist_ok=True)
    for f in files:
        shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))


def _finish(dst, family, template):
    if template:
        with open(os.path.join(dst, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(TEMPLATES[family])
    return str(dst)


def text_checkpoint(dst, template=True):
    _copy(os.path.join(MODELS_DIR, "gemma3_text"), dst)
    shutil.copyfile(os.path.join(TOKENIZERS, "gemma_style.model"), os.path.join(dst, "tokenizer.model"))
    return _finish(dst, "gemma3", template)


def gemma3_vision_checkpoint(dst, template=True):
    src = os.path.join(MODELS_DIR, "gemma3")
    _copy(src, dst, ("model.safetensors",))
    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg.update(boi_token_index=7, eoi_token_index=8, image_token_index=4)
    with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(dst, "preprocessor_config.json"), "w", encoding="utf-8") as f:
        json.dump(GEMMA3_PROCESSOR, f)
    shutil.copyfile(os.path.join(TOKENIZERS, "gemma_style.model"), os.path.join(dst, "tokenizer.model"))
    return _finish(dst, "gemma3", template)


def demo_checkpoint(dst, template=True):
    _copy(DEMO_DIR, dst, ("config.json", "model.safetensors", "preprocessor_config.json"))
    with open(os.path.join(dst, "tokenizer.model"), "wb") as f:
        f.write(train_demo_tokenizer())
    return _finish(dst, "gemma4", template)


def train_demo_tokenizer(vocab=2048):
    """A BPE SentencePiece model of exactly `vocab` pieces with Gemma's options (byte fallback, no
    dummy prefix, whitespace and text as given), Gemma 4's control pieces on the demo checkpoint's
    ids. Deterministic (fixed corpus, one thread)."""
    import sentencepiece as spm
    rng = random.Random(2048)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("éèàçöüßñ")
    wide = [chr(0x4E00 + i) for i in range(400)]  # enough distinct pieces to reach `vocab`
    lines = []
    for _ in range(6000):
        words = ["".join(rng.choice(letters) if rng.random() < 0.8 else rng.choice(wide)
                         for _ in range(rng.randint(1, 7))) for _ in range(rng.randint(3, 12))]
        lines.append(rng.choice([" ", "  ", ", ", "\n"]).join(words))
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, model_type="bpe", vocab_size=vocab,
        character_coverage=1.0, byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        add_dummy_prefix=False, remove_extra_whitespaces=False, normalization_rule_name="identity",
        pad_id=0, eos_id=1, bos_id=2, unk_id=13,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        control_symbols=DEMO_CONTROL, user_defined_symbols=["\n\n"], num_threads=1, minloglevel=2)
    return out.getvalue()


# name -> (maker, chat family) of the server tests' checkpoints
CHECKPOINTS = {"text": (text_checkpoint, "gemma3"), "gemma3": (gemma3_vision_checkpoint, "gemma3"),
               "demo": (demo_checkpoint, "gemma4")}


# --- references ---------------------------------------------------------------------------------------


def render(template, messages, add_generation_prompt=True, bos_token="<bos>", eos_token="<eos>"):
    """The template as transformers' apply_chat_template renders it (jinja2 sandbox, trim_blocks,
    lstrip_blocks). OpenAI content parts: image_url parts become {"type": "image"}."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    msgs = []
    for m in messages:
        c = m["content"]
        if not isinstance(c, str):
            c = [{"type": "image"} if p["type"] == "image_url" else p for p in c]
        msgs.append({"role": m["role"], "content": c})
    return env.from_string(template).render(messages=msgs, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos_token, eos_token=eos_token)


class Tokenizer:
    """sentencepiece on the checkpoint's tokenizer.model; control pieces written in the text are
    their ids (longest first), the text between them encoded as is (transformers' special-token
    split, then the model)."""

    def __init__(self, checkpoint):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=os.path.join(checkpoint, "tokenizer.model"))
        self.control = sorted((self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())
                               if self.sp.is_control(i)), key=len, reverse=True)

    def piece_id(self, piece):
        return self.sp.piece_to_id(piece)

    def encode(self, text, add_bos=False):
        ids = [self.sp.bos_id()] if add_bos else []
        start = i = 0
        while i < len(text):
            hit = next((c for c in self.control if text.startswith(c, i)), None)
            if hit is None:
                i += 1
                continue
            if i > start:
                ids += self.sp.encode(text[start:i])
            ids.append(self.sp.piece_to_id(hit))
            i += len(hit)
            start = i
        if start < len(text):
            ids += self.sp.encode(text[start:])
        return ids

    def decode(self, ids):
        return self.sp.decode(list(ids))
