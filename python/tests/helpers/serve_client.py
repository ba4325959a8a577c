"""What the server tests share: raw HTTP for what the openai client cannot send, /metrics read with
prometheus_client's parser, images as data URLs, and the reference every served request is compared
with: the same request run by `tessera.Model.generate` in this process (the prompt rendered and
tokenized by helpers.serve_models' independent references)."""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from helpers.serve_models import CHECKPOINTS, TEMPLATES, TURN_END, Tokenizer, render
from tessera.serve_process import ServeProcess, default_binary


def _serve_built():
    binary = default_binary()
    if not os.access(binary, os.X_OK):
        return f"{binary} is not built"
    r = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=60)
    return None if r.returncode == 0 else f"{binary} has no serve command"


_WHY_NOT = _serve_built()
requires_serve = pytest.mark.skipif(_WHY_NOT is not None, reason=_WHY_NOT or "")


def serve(checkpoint, *args, threads=2):
    """`tessera serve` on `checkpoint` (a context manager): loopback, a free port, `threads` threads."""
    return ServeProcess(checkpoint, "--threads", str(threads), *args)


@contextlib.contextmanager
def served(tmp_path_factory, name, *args, context=512):
    """(server, Reference) on one of helpers.serve_models.CHECKPOINTS, made in a fresh directory:
    `tessera serve --max-context context ARGS` and the same checkpoint loaded in this process."""
    make, family = CHECKPOINTS[name]
    ckpt = make(tmp_path_factory.mktemp("serve-" + name) / name)
    with serve(ckpt, "--max-context", str(context), *map(str, args)) as server:
        yield server, Reference(ckpt, family, max_context=context)


def raw(url, body=None, headers=None, method=None, timeout=60):
    """(status, headers, body bytes) of one request; HTTP errors are answers, not exceptions."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def assert_api_error(status, body, want_status, param=None, code=None):
    """The OpenAI error shape: {"error": {"message", "type", "param", "code"}}."""
    assert status == want_status, body[:500]
    err = json.loads(body)["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def metrics(server, headers=None):
    """{(name, frozenset(labels.items())): value} of GET /metrics, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families
    status, _, body = raw(server.url + "/metrics", headers=headers)
    assert status == 200, body[:300]
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric(values, name, **labels):
    return values[(name, frozenset(labels.items()))]


def wait_for_idle_slots(server, timeout=20.0, headers=None):
    """Polls /metrics until no slot is busy and nothing is queued; returns the last reading."""
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(server, headers)
        if metric(m, "tessera_slots_busy") == 0 and metric(m, "tessera_queue_depth") == 0:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"slots still busy after {timeout} s: "
                                 f"{metric(m, 'tessera_slots_busy')} busy, {metric(m, 'tessera_queue_depth')} queued")
        time.sleep(0.05)


def data_url(path, size=None, fmt="PNG"):
    """An image file as a base64 data URL (re-encoded with PIL; `size` crops it to a centred square)."""
    from PIL import Image
    with Image.open(path) as im:
        im = im.convert("RGB")
        if size:
            w, h = im.size
            s = min(w, h, size)
            im = im.crop(((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s))
        buf = io.BytesIO()
        im.save(buf, format=fmt)
        arr = np.asarray(im)
    mime = "image/png" if fmt == "PNG" else "image/jpeg"
    return f"data:{mime};base64," + base64.b64encode(buf.getvalue()).decode(), arr


# --- the reference ----------------------------------------------------------------------------------------


class Reference:
    """One checkpoint in this process: each served request's tokens computed by tessera.Model.generate
    from the prompt the references make (no server code involved)."""

    def __init__(self, checkpoint, family, max_context=512):
        import tessera
        self.path = str(checkpoint)
        self.family = family
        self.tok = Tokenizer(self.path)
        self.model = tessera.Model.load(self.path, max_batch=1, max_context=max_context)
        self.eos = list(self.model._impl.eos_token_ids)
        self.turn_end = self.tok.piece_id(TURN_END[family])
        with open(os.path.join(self.path, "config.json"), encoding="utf-8") as f:
            self.config = json.load(f)

    @property
    def model_id(self):
        return os.path.basename(self.path.rstrip("/"))

    def completion_ids(self, prompt):
        return prompt if isinstance(prompt, list) else self.tok.encode(prompt, add_bos=True)

    def chat_ids(self, messages):
        return self.tok.encode(render(TEMPLATES[self.family], messages))

    def generate(self, ids, max_tokens, chat=False, temperature=0.0, top_p=1.0, top_k=0, seed=0, **images):
        """(token ids, finish_reason) of one request; stops on eos (and the turn end for chat)."""
        stop = self.eos + ([self.turn_end] if chat else [])
        rows, reasons = self.model.generate(np.asarray([ids]), max_tokens, temperature=temperature, top_p=top_p,
                                            top_k=top_k, seed=seed, stop_tokens=stop, return_finish_reasons=True,
                                            **images)
        out = rows[0]
        if reasons[0] == "stop":
            out = out[:-1]  # the stop token is not part of the completion
        return out, reasons[0]

    def text(self, ids):
        return self.tok.decode(ids)


def sampling_kwargs(s):
    """A request's sampling fields as the openai client takes them (top_k is an extension), with
    vLLM's `return_token_ids` extension asked for (servers without it ignore unknown fields)."""
    kw = {"temperature": s.get("temperature", 0.0), "extra_body": {"return_token_ids": True}}
    if "top_p" in s:
        kw["top_p"] = s["top_p"]
    if "seed" in s:
        kw["seed"] = s["seed"]
    if "top_k" in s:
        kw["extra_body"]["top_k"] = s["top_k"]
    return kw


def choice_token_ids(obj, choice=None):
    """The vLLM-style `token_ids` extension of a response choice, or None when the server has none."""
    c = choice if choice is not None else obj.choices[0]
    ids = getattr(c, "token_ids", None)
    if ids is None and getattr(c, "model_extra", None):
        ids = c.model_extra.get("token_ids")
    return None if ids is None else list(ids)


# --- request specs: one request's fields, sent through the openai client or run by the reference ---------------


def spec_kwargs(spec):
    kw = {"max_tokens": spec["max_tokens"], **sampling_kwargs(spec.get("sampling", {}))}
    if "messages" in spec:
        kw["messages"] = spec["messages"]
    else:
        kw["prompt"] = spec["prompt"]
    return kw


def expected(ref, spec):
    """(text, token ids, finish_reason) the reference gives for a spec."""
    chat = "messages" in spec
    ids = ref.chat_ids(spec["messages"]) if chat else ref.completion_ids(spec["prompt"])
    out, reason = ref.generate(ids, spec["max_tokens"], chat=chat, **spec.get("sampling", {}))
    return ref.text(out), out, reason


def _unpack(chat, r):
    c = r.choices[0]
    return (c.message.content if chat else c.text), choice_token_ids(r), c.finish_reason


def send(client, model, spec, stream):
    """(text, token ids or None, finish_reason) of a spec sent through a sync openai client."""
    chat = "messages" in spec
    api = client.chat.completions if chat else client.completions
    if not stream:
        return _unpack(chat, api.create(model=model, **spec_kwargs(spec)))
    acc = _Chunks(chat)
    for chunk in api.create(model=model, stream=True, **spec_kwargs(spec)):
        acc.add(chunk)
    return acc.result()


async def send_async(client, model, spec, stream, on_first=None):
    """The same through an openai.AsyncOpenAI client; on_first() is called at a stream's first text."""
    chat = "messages" in spec
    api = client.chat.completions if chat else client.completions
    if not stream:
        return _unpack(chat, await api.create(model=model, **spec_kwargs(spec)))
    acc = _Chunks(chat)
    async for chunk in await api.create(model=model, stream=True, **spec_kwargs(spec)):
        acc.add(chunk)
        if on_first is not None and any(acc.parts):
            on_first()
            on_first = None
    return acc.result()


class _Chunks:
    """A stream's chunks joined: the text, the token ids (None unless every chunk has them), the finish."""

    def __init__(self, chat):
        self.chat, self.parts, self.ids, self.finish = chat, [], [], None

    def add(self, chunk):
        if not chunk.choices:
            return
        c = chunk.choices[0]
        self.parts.append((c.delta.content if self.chat else c.text) or "")
        got = choice_token_ids(chunk)
        self.ids = None if self.ids is None or got is None else self.ids + got
        if c.finish_reason is not None:
            self.finish = c.finish_reason

    def result(self):
        return "".join(self.parts), self.ids, self.finish


def same_answer(got, want):
    """Two (text, ids, finish) answers are the same request's: ids when both have them, text, finish."""
    if got[1] is not None and want[1] is not None:
        assert got[1] == want[1]
    assert got[0] == want[0]
    assert got[2] == want[2]
