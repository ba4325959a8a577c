"""Tessera's chat-template renderer (tessera.ChatTemplate) against transformers'
apply_chat_template(..., tokenize=False), byte for byte: the real Gemma 3 and Gemma 4 templates
(tests/testdata/chat_templates/) on many conversations, and our own small templates, one per
Jinja feature (tests/testdata/chat_templates/features/), against transformers and, where they use
nothing transformers adds, against a plain jinja2 environment configured as transformers does."""
import json
import os
import random

import pytest

tessera = pytest.importorskip("tessera")
transformers = pytest.importorskip("transformers", reason="python/requirements-peers.txt")
jinja2 = pytest.importorskip("jinja2")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TEMPLATES = os.path.join(ROOT, "tests", "testdata", "chat_templates")
FEATURES = os.path.join(TEMPLATES, "features")
TOKENIZERS = os.path.join(ROOT, "tests", "testdata", "tokenizer")
GEMMA_TEMPLATES = ["gemma3.jinja", "gemma4.jinja", "gemma4-31b-interleaved.jinja"]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def tokenizer():
    """The tiny Gemma 4 tokenizer of the test checkpoints; its template is set per call."""
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(TOKENIZERS, "gemma4_style.json"),
                                               bos_token="<bos>", eos_token="<eos>")
    return tok


@pytest.fixture(scope="module")
def gemma3_tokenizer():
    return transformers.GemmaTokenizer(vocab_file=os.path.join(TOKENIZERS, "gemma_style.model"))


def reference(tok, template, messages, add_generation_prompt=True, **extra):
    tok.chat_template = template
    try:
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra)
    except Exception as e:  # noqa: BLE001 - the template's own error is the reference
        return ("error", str(e))


def ours(template, name, messages, tok, add_generation_prompt=True, **extra):
    t = tessera.ChatTemplate.from_source(template, name)
    try:
        return t.render(messages, add_generation_prompt=add_generation_prompt, bos_token=tok.bos_token,
                        eos_token=tok.eos_token, **extra)
    except ValueError as e:
        return ("error", str(e))


def assert_same(tok, template, name, messages, add_generation_prompt=True, **extra):
    want = reference(tok, template, messages, add_generation_prompt, **extra)
    got = ours(template, name, messages, tok, add_generation_prompt, **extra)
    if isinstance(want, tuple):  # both fail, and ours carries the template's message (raise_exception)
        assert isinstance(got, tuple), f"transformers failed ({want[1]}) but we rendered {got!r}"
        assert want[1] in got[1] or "raise_exception" not in template, (want, got)
        assert f"chat template '{name}' line " in got[1]
    else:
        assert got == want


# --- conversations -------------------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "nullable": True},
            "days": {"type": "integer"},
            "opts": {"type": "object", "required": ["detail"], "properties": {
                "detail": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}}}},
            "ids": {"type": ["array", "null"], "items": {"type": ["integer", "null"], "description": "an id"}}}},
        "response": {"type": "object", "description": "The forecast"}}},
    {"type": "function", "function": {"name": "noop", "description": "Does nothing",
                                      "parameters": {"type": "object", "properties": {}}}},
]

TEXTS = ["Hi", "  padded  ", "line one\nline two\n", "\u3000wide spaces\u00a0", "émoji 🙂 東京", "<start_of_turn>fake",
         "tabs\tand\r\nCRLF", "", "<|channel>secret<channel|>visible", "{{ not a tag }}", "quote ' and \" \\"]


def random_conversation(rng, with_tools):
    """Alternating user/assistant turns, maybe a system turn, text or image parts, tool traffic."""
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": rng.choice(["system", "system", "developer"]),
                     "content": rng.choice(TEXTS) if rng.random() < 0.8 else [{"type": "text", "text": rng.choice(TEXTS)}]})
    for turn in range(rng.randrange(1, 6)):
        if turn % 2 == 0:
            if rng.random() < 0.4:
                parts = [{"type": "image"} if rng.random() < 0.5 else {"type": "text", "text": rng.choice(TEXTS)}
                         for _ in range(rng.randrange(1, 4))]
                msgs.append({"role": "user", "content": parts})
            else:
                msgs.append({"role": "user", "content": rng.choice(TEXTS)})
            continue
        m = {"role": "assistant", "content": rng.choice(TEXTS)}
        if with_tools and rng.random() < 0.5:
            args = rng.choice([{"city": "Paris", "days": 3, "opts": {"detail": True, "tags": ["a", "b"]}},
                               '{"city": "Rome"}', {"ratio": 0.25, "none": None, "flag": False}])
            m["tool_calls"] = [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": args}}]
            if rng.random() < 0.5:
                m["content"] = None
            if rng.random() < 0.5:
                m["reasoning_content"] = "thinking about " + rng.choice(TEXTS)
            msgs.append(m)
            msgs.append({"role": "assistant", "tool_responses": [
                {"name": "get_weather", "response": rng.choice([{"temp": 21, "sky": "clear", "list": [1, 2.5, True]},
                                                               "sunny", 42])}]})
            continue
        msgs.append(m)
    return msgs


CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "system", "content": [{"type": "text", "text": "Sys parts"}]}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is this? "}]},
     {"role": "assistant", "content": "A cat."}, {"role": "user", "content": [{"type": "text", "text": "Sure?"},
                                                                              {"type": "image"}]}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # Gemma 3 refuses: roles must alternate
    [{"role": "user", "content": 42}],  # Gemma 3 refuses: invalid content type
    [{"role": "user", "content": "Weather?"},
     {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "noop", "arguments": {}}}]},
     {"role": "tool", "content": '{"ok": true}'}, {"role": "assistant", "content": "Done."}],
]


@pytest.mark.parametrize("name", GEMMA_TEMPLATES)
def test_gemma_templates_fixed_conversations(name, tokenizer, gemma3_tokenizer):
    template = read(os.path.join(TEMPLATES, name))
    tok = gemma3_tokenizer if name.startswith("gemma3") else tokenizer
    for messages in CONVERSATIONS:
        for agp in (True, False):
            assert_same(tok, template, name, messages, add_generation_prompt=agp)
            assert_same(tok, template, name, messages, add_generation_prompt=agp, enable_thinking=True)


@pytest.mark.parametrize("name", GEMMA_TEMPLATES)
def test_gemma_templates_random_conversations(name, tokenizer, gemma3_tokenizer):
    template = read(os.path.join(TEMPLATES, name))
    tok = gemma3_tokenizer if name.startswith("gemma3") else tokenizer
    rng = random.Random(name)
    gemma4 = name.startswith("gemma4")
    for _ in range(150):
        messages = random_conversation(rng, with_tools=gemma4)
        extra = {}
        if gemma4 and rng.random() < 0.5:
            extra["tools"] = TOOLS[: rng.randrange(1, 3)]
        if rng.random() < 0.4:
            extra["enable_thinking"] = rng.random() < 0.5
        assert_same(tok, template, name, messages, add_generation_prompt=rng.random() < 0.7, **extra)


def test_gemma4_tool_rendering_is_not_trivial(tokenizer):
    """The tool declaration and call syntax really come out (a guard against both sides failing alike)."""
    template = read(os.path.join(TEMPLATES, "gemma4.jinja"))
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "assistant", "tool_responses": [{"name": "get_weather", "response": {"temp": 21}}]}]
    text = ours(template, "gemma4", messages, tokenizer, tools=TOOLS)
    assert text == reference(tokenizer, template, messages, tools=TOOLS)
    assert '<|tool>declaration:get_weather{description:<|"|>Weather for a city.<|"|>' in text
    assert '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>' in text
    assert "<|tool_response>response:get_weather{temp:21}<tool_response|>" in text


# --- feature templates ---------------------------------------------------------------------------

FEATURE_FILES = sorted(f for f in os.listdir(FEATURES) if f.endswith(".jinja"))
FEATURE_CONVERSATIONS = [
    [{"role": "system", "content": "Sys  "}, {"role": "user", "content": " Hi there "},
     {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": [{"type": "image"},
                                                                              {"type": "text", "text": "What?"}]}],
    [{"role": "user", "content": "only one"}],
]


def jinja2_render(template, messages, add_generation_prompt, **extra):
    """A plain jinja2 sandbox set up as transformers sets it up (without transformers' additions)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["namespace"] = jinja2.utils.Namespace
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            tools=None, documents=None, bos_token="<bos>", eos_token="<eos>", **extra)


@pytest.mark.parametrize("name", FEATURE_FILES)
def test_feature_templates_match_transformers(name, tokenizer):
    template = read(os.path.join(FEATURES, name))
    for messages in FEATURE_CONVERSATIONS:
        for extra in ({}, {"extra_var": "EV"}):
            for agp in (True, False):
                assert_same(tokenizer, template, name, messages, add_generation_prompt=agp, **extra)


@pytest.mark.parametrize("name", [f for f in FEATURE_FILES if f != "transformers_only.jinja"])
def test_feature_templates_match_jinja2(name, tokenizer):
    template = read(os.path.join(FEATURES, name))
    if "tojson" in template:
        template = "\n".join(line for line in template.split("\n") if "tojson" not in line)  # jinja2's tojson escapes HTML
    for messages in FEATURE_CONVERSATIONS:
        want = jinja2_render(template, messages, True, extra_var="EV")
        assert ours(template, name, messages, tokenizer, True, extra_var="EV") == want


def test_transformers_only_features(tokenizer):
    template = read(os.path.join(FEATURES, "transformers_only.jinja"))
    messages = FEATURE_CONVERSATIONS[0]
    err = ours(template, "t", messages, tokenizer)
    assert err == ("error", "chat template 't' line 2: too many messages: 4")
    assert ours(template, "t", messages[:3], tokenizer) == reference(tokenizer, template, messages[:3])


# --- the API around rendering --------------------------------------------------------------------

def test_builtin_formats_match_the_published_templates_on_plain_chats(tokenizer, gemma3_tokenizer):
    for model_type, file, tok in [("gemma3", "gemma3.jinja", gemma3_tokenizer), ("gemma4", "gemma4.jinja", tokenizer),
                                  ("gemma4_unified", "gemma4.jinja", tokenizer)]:
        builtin = tessera.ChatTemplate.builtin(model_type)
        template = read(os.path.join(TEMPLATES, file))
        rng = random.Random(model_type)
        for _ in range(60):
            messages = random_conversation(rng, with_tools=False)
            if messages[0]["role"] == "developer" and model_type == "gemma3":
                messages[0]["role"] = "system"
            if messages[0]["role"] != "user" and model_type != "gemma3" and not isinstance(messages[0]["content"], str):
                # Gemma 4's template prints a system turn's parts list as Python text; ours joins the text parts.
                messages[0]["content"] = messages[0]["content"][0]["text"]
            for agp in (True, False):
                extra = {"enable_thinking": True} if model_type != "gemma3" and rng.random() < 0.3 else {}
                want = reference(tok, template, messages, agp, **extra)
                got = builtin.render(messages, add_generation_prompt=agp, bos_token=tok.bos_token, **extra)
                assert got == want, messages


def test_from_model_path(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ bos_token }}cfg"}))
    t = tessera.ChatTemplate.from_model_path(tmp_path)
    assert t.render([{"role": "user", "content": "x"}]) == "<bos>cfg"
    assert t.name.endswith("tokenizer_config.json:chat_template")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LookupError, match="has no chat template"):
        tessera.ChatTemplate.from_model_path(tmp_path / "empty")


def test_errors_are_value_errors_naming_the_template():
    with pytest.raises(ValueError, match=r"chat template 'mine' line 2: unknown tag 'bogus'"):
        tessera.ChatTemplate.from_source("ok\n{% bogus %}", "mine")
    t = tessera.ChatTemplate.from_source("{% for m in messages %}{{ m.content.missing.deeper }}{% endfor %}", "mine")
    with pytest.raises(ValueError, match=r"chat template 'mine' line 1: 'str object' has no attribute 'missing'"):
        t.render([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="messages: the conversation is empty"):
        t.render([])
