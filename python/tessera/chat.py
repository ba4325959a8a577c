"""Chat messages to prompt text with a model's chat template, rendered by Tessera's own interpreter
of the Jinja subset chat templates use (docs/chat-templates.md). The output equals transformers'
``tokenizer.apply_chat_template(messages, tokenize=False, ...)`` for the same template.

    t = tessera.ChatTemplate.from_model_path("~/models/gemma-3-4b-it")   # or from_source / builtin
    text = t.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True, bos_token="<bos>")
"""
from __future__ import annotations

import json
import os

from . import _tessera


class ChatTemplate:
    """A parsed chat template. Errors (syntax, rendering) raise ValueError naming the template and
    line; ``from_model_path`` raises LookupError when the model has no template."""

    def __init__(self, impl):
        self._impl = impl

    @classmethod
    def from_source(cls, source: str, name: str = "template") -> "ChatTemplate":
        return cls(_tessera._ChatTemplate.from_source(source, name))

    @classmethod
    def from_model_path(cls, path) -> "ChatTemplate":
        return cls(_tessera._ChatTemplate.from_model_path(os.path.expanduser(os.fspath(path))))

    @classmethod
    def builtin(cls, model_type: str) -> "ChatTemplate":
        """The turn format of a model family (gemma3, gemma3_text, gemma4, ...) for models without a template."""
        return cls(_tessera._ChatTemplate.builtin(model_type))

    @property
    def name(self) -> str:
        return self._impl.name

    @property
    def source(self) -> str:
        return self._impl.source

    def render(self, messages, add_generation_prompt: bool = True, bos_token: str = "<bos>",
               eos_token: str = "<eos>", **extra) -> str:
        """Renders `messages` (a list of {"role", "content", ...} dicts); `extra` become template
        variables (tools=[...], enable_thinking=True, ...)."""
        messages_json = json.dumps(messages, ensure_ascii=False)
        extra_json = json.dumps(extra, ensure_ascii=False) if extra else ""
        out = self._impl.render(messages_json, bool(add_generation_prompt), bos_token, eos_token, extra_json)
        return out.decode("utf-8")
