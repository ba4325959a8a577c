"""`tessera serve` through the official `openai` package (issue 21): a server started here on a
loopback port (`--port 0`) on the tiny text checkpoint and on the demo model (each given a tokenizer
and a chat template of the test's own, helpers/serve_models.py), its answers compared with the same
request run by `tessera.Model.generate` in this process on a prompt rendered by jinja2 and tokenized
by sentencepiece (helpers/serve_client.Reference): completions and chat, streaming and not, stop
strings, images as data URLs, the API's errors, a cancelled stream freeing its slot.
Exactness under concurrency: test_serve_exactness.py; the load test: test_serve_load.py."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="the openai package (python/requirements.txt)")

from helpers.serve_client import (assert_api_error, choice_token_ids, data_url, metric, metrics, raw, requires_serve,
                                  sampling_kwargs, wait_for_idle_slots)
from helpers.serve_client import served as served_checkpoint
from image_fixtures import photo

pytestmark = requires_serve

PROMPTS = ["the image model", "tessera engine is fast, the window block cache"]
# Greedy decoding of the tiny random checkpoints soon repeats one token whatever the prompt; seeded
# sampling at temperature 1 follows the logits, so it tells a wrong prompt or cache apart.
SAMPLED = {"temperature": 1.0, "seed": 5}


@pytest.fixture(scope="module", params=["text", "demo"])
def served(request, tmp_path_factory):
    """A server and its reference on the tiny text checkpoint and on the demo model."""
    with served_checkpoint(tmp_path_factory, request.param, "--slots", 3) as s:
        yield s


def client_of(server, **kw):
    return openai.OpenAI(base_url=server.base_url, api_key=kw.pop("api_key", "unused"), max_retries=0,
                         timeout=kw.pop("timeout", 120), **kw)


def complete(client, model, stream, chat=False, **kw):
    """(text, token ids or None, finish_reason, usage) of one completion or chat request."""
    api = client.chat.completions if chat else client.completions
    if not stream:
        r = api.create(model=model, **kw)
        c = r.choices[0]
        assert len(r.choices) == 1 and c.index == 0
        text = c.message.content if chat else c.text
        if chat:
            assert c.message.role == "assistant"
        return text, choice_token_ids(r), c.finish_reason, r.usage
    parts, ids, finish, usage = [], [], None, None
    for chunk in api.create(model=model, stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            assert chunk.choices == []  # the usage chunk comes last, without choices
            usage = chunk.usage
            continue
        assert finish is None, "a chunk after the one with finish_reason"
        c = chunk.choices[0]
        piece = (c.delta.content if chat else c.text) or ""
        parts.append(piece)
        got = choice_token_ids(chunk)
        ids = None if ids is None or got is None else ids + got
        finish = c.finish_reason
    return "".join(parts), ids, finish, usage


def check_answer(ref, answer, want_ids, want_reason, prompt_len):
    text, ids, finish, usage = answer
    assert ids == want_ids  # vLLM's return_token_ids extension (sampling_kwargs asks for it)
    assert text == ref.text(want_ids)
    assert finish == want_reason
    assert usage.prompt_tokens == prompt_len
    # The stop token (eos, turn end) is generated and counted, but not returned (docs/serving.md).
    assert usage.completion_tokens == len(want_ids) + (want_reason == "stop")
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


# --- routes -----------------------------------------------------------------------------------------------


def test_models_and_health(served):
    server, ref = served
    assert [m.id for m in client_of(server).models.list().data] == [ref.model_id]
    status, _, body = raw(server.url + "/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.9, "top_p": 0.9, "top_k": 40, "seed": 7}],
                         ids=["greedy", "seeded"])
def test_completion_equals_model_generate(served, stream, sampling):
    server, ref = served
    client = client_of(server)
    for prompt in PROMPTS:
        ids = ref.completion_ids(prompt)
        want, reason = ref.generate(ids, 20, **sampling)
        got = complete(client, ref.model_id, stream, prompt=prompt, max_tokens=20, **sampling_kwargs(sampling))
        check_answer(ref, got, want, reason, len(ids))


def test_completion_of_token_ids(served):
    server, ref = served
    prompt = ref.completion_ids(PROMPTS[1])
    want, reason = ref.generate(prompt, 12, **SAMPLED)
    got = complete(client_of(server), ref.model_id, False, prompt=prompt, max_tokens=12, **sampling_kwargs(SAMPLED))
    check_answer(ref, got, want, reason, len(prompt))


CONVERSATIONS = [
    [{"role": "user", "content": "the image model"}],
    [{"role": "system", "content": "be fast"},
     {"role": "user", "content": [{"type": "text", "text": "tessera engine"}, {"type": "text", "text": " block"}]},
     {"role": "assistant", "content": "cache window"},
     {"role": "user", "content": "the layer prompt"}],
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("sampling", [{}, {"temperature": 1.1, "seed": 123}], ids=["greedy", "seeded"])
def test_chat_equals_model_generate(served, stream, sampling):
    server, ref = served
    client = client_of(server)
    for messages in CONVERSATIONS:
        ids = ref.chat_ids(messages)
        want, reason = ref.generate(ids, 24, chat=True, **sampling)
        got = complete(client, ref.model_id, stream, chat=True, messages=messages, max_tokens=24,
                       **sampling_kwargs(sampling))
        check_answer(ref, got, want, reason, len(ids))


def test_max_completion_tokens_and_default_length(served):
    server, ref = served
    client = client_of(server)
    messages = CONVERSATIONS[0]
    want, reason = ref.generate(ref.chat_ids(messages), 5, chat=True)
    r = client.chat.completions.create(model=ref.model_id, messages=messages, max_completion_tokens=5,
                                       temperature=0)
    assert r.choices[0].message.content == ref.text(want)
    assert r.usage.completion_tokens == len(want) + (reason == "stop")


# --- stop strings ------------------------------------------------------------------------------------------


def token_texts(ref, ids):
    """The text after each token (prefix decodes): where each token's text starts in the whole."""
    return [ref.text(ids[:i]) for i in range(len(ids) + 1)]


def clean_span(full, lo, width):
    """The first i >= lo where full[i:i+width] holds no replacement character and first occurs at i."""
    for i in range(lo, len(full) - width):
        s = full[i:i + width]
        if "\ufffd" not in s and full.find(s) == i:
            return i
    return None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_stop_strings(served, stream):
    server, ref = served
    client = client_of(server)
    prompt = PROMPTS[0]
    ids = ref.completion_ids(prompt)
    want, reason = ref.generate(ids, 40, **SAMPLED)
    full = ref.text(want)
    prefixes = token_texts(ref, want)
    # A stop string across a token boundary (its first character ends one token's text): the server
    # must hold that text back until it knows the stop string is not there.
    boundary = next((len(p) - 1 for p in prefixes[2:-2] if len(p) > 1 and clean_span(full, len(p) - 1, 2) == len(p) - 1),
                    None)
    starts = [i for i in (boundary, clean_span(full, len(full) // 3, 2), clean_span(full, 1, 1)) if i is not None]
    if not starts:
        pytest.skip(f"the greedy text {full!r} has no usable stop string")
    for i in starts:
        stop = full[i:i + 2]
        got = complete(client, ref.model_id, stream, prompt=prompt, max_tokens=40, stop=stop, **sampling_kwargs(SAMPLED))
        assert got[0] == full[:i], f"stop {stop!r}"
        assert got[2] == "stop"
    # Several stop strings: the earliest match wins; one that never appears changes nothing.
    i = starts[-1]
    stops = ["\u2603never", full[i:i + 1], full[i:i + 3] if i + 3 <= len(full) else full[i:]]
    got = complete(client, ref.model_id, stream, prompt=prompt, max_tokens=40, stop=stops, **sampling_kwargs(SAMPLED))
    assert got[0] == full[:full.find(full[i:i + 1])] and got[2] == "stop"
    got = complete(client, ref.model_id, stream, prompt=prompt, max_tokens=40, stop=["\u2603never"],
                   **sampling_kwargs(SAMPLED))
    assert got[0] == full and got[2] == reason


# --- images ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["gemma3", "demo"])
def vision(request, tmp_path_factory):
    pytest.importorskip("PIL")
    with served_checkpoint(tmp_path_factory, request.param, "--slots", 2) as s:
        yield s


def image_layout(ref, ids, images):
    """The prompt the processors make of a rendered prompt: each marker (Gemma 3: <start_of_image>, framed
    by "\\n\\n" as its processor does; Gemma 4: <|image|>) becomes begin, one soft token per image
    row, end; token types 1 on the soft tokens. Returns generate()'s image keyword arguments."""
    cfg = ref.config
    g3 = ref.family == "gemma3"
    boi = cfg["boi_token_index"] if g3 else cfg["boi_token_id"]
    eoi = cfg["eoi_token_index"] if g3 else cfg["eoi_token_id"]
    soft = cfg["image_token_index"] if g3 else cfg["image_token_id"]
    marker = boi if g3 else soft
    rows = ref.model.encode_images(images)
    out, k = [], 0
    for t in ids:
        if t != marker:
            out.append(t)
            continue
        block = [boi] + [soft] * len(rows[k]) + [eoi]
        out += [ref.tok.piece_id("\n\n")] + block + [ref.tok.piece_id("\n\n")] if g3 else block
        k += 1
    assert k == len(images)
    types = np.asarray([[1 if t == soft else 0 for t in out]])
    kw = {"token_type_ids" if g3 else "mm_token_type_ids": types, "image_embeds": np.concatenate(rows)}
    return out, kw


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_images_as_data_urls(vision, stream):
    server, ref = vision
    url0, img0 = data_url(photo("astronaut.png"), size=96)
    url1, img1 = data_url(photo("coffee.png"), size=64)
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "the image"}, {"type": "image_url", "image_url": {"url": url0}},
        {"type": "text", "text": "and this"}, {"type": "image_url", "image_url": {"url": url1, "detail": "auto"}},
        {"type": "text", "text": "model"}]}]
    prompt, kw = image_layout(ref, ref.chat_ids(messages), [img0, img1])
    want, reason = ref.generate(prompt, 16, chat=True, **kw, **SAMPLED)
    got = complete(client_of(server), ref.model_id, stream, chat=True, messages=messages, max_tokens=16,
                   **sampling_kwargs(SAMPLED))
    check_answer(ref, got, want, reason, len(prompt))


def test_model_generate_lays_out_images_as_the_processor(vision):
    """tessera.Model.generate(images=...) on the rendered prompt gives the same tokens as the explicit
    layout above (for Gemma 3 that needs the "\\n\\n" framing, whose id comes from the tokenizer)."""
    server, ref = vision
    _, img = data_url(photo("astronaut.png"), size=96)
    ids = ref.chat_ids([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ""}},
                                                     {"type": "text", "text": "the image"}]}])
    prompt, kw = image_layout(ref, ids, [img])
    want = ref.model.generate(np.asarray([prompt]), 8, stop_tokens=[], **kw, **SAMPLED)
    assert ref.model.generate(np.asarray([ids]), 8, stop_tokens=[], images=[img], **SAMPLED) == want


def test_image_errors(vision):
    server, ref = vision
    client = client_of(server)

    def chat_with(url):
        return client.chat.completions.create(model=ref.model_id, max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}])

    for url in ("https://example.com/cat.png", "file:///etc/passwd", "/etc/passwd", "data:image/png,notbase64",
                "data:image/png;base64,@@@@", "data:image/png;base64," + "QUJD" * 10):
        with pytest.raises(openai.BadRequestError) as e:
            chat_with(url)
        assert e.value.status_code == 400 and "messages[0].content[0]" in str(e.value.body)
    # An image of more pixels than the limit: refused before decoding it (a PNG of one colour is small).
    from PIL import Image
    import base64
    import io
    buf = io.BytesIO()
    Image.new("RGB", (6000, 6000)).save(buf, format="PNG")
    with pytest.raises(openai.BadRequestError) as e:
        chat_with("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode())
    assert "pixel" in str(e.value.body).lower()
    assert server.alive()


# --- errors ------------------------------------------------------------------------------------------------


def test_api_errors(served):
    server, ref = served
    client = client_of(server)
    url = server.base_url
    headers = {"Content-Type": "application/json"}
    status, _, body = raw(url + "/chat/completions", "{\"model\": ", headers)
    assert_api_error(status, body, 400)
    status, _, body = raw(url + "/completions", "[1, 2]", headers)
    assert_api_error(status, body, 400)
    status, _, body = raw(url + "/no/such/route", "{}", headers)
    assert_api_error(status, body, 404)

    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=CONVERSATIONS[0], max_tokens=2)
    assert e.value.body["code"] == "model_not_found"
    # Context overflow: prompt + max_tokens beyond --max-context 512, named with its numbers.
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=ref.model_id, prompt=PROMPTS[0], max_tokens=600)
    assert "512" in e.value.body["message"] and "600" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=ref.model_id, prompt=[20] * 520, max_tokens=1)
    assert "512" in e.value.body["message"]
    for bad, param in [({"n": 2}, "n"), ({"temperature": -1}, "temperature"), ({"top_p": 1.5}, "top_p"),
                       ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"max_tokens": -3}, "max_tokens")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=ref.model_id, messages=CONVERSATIONS[0], **bad)
        assert e.value.body["param"] == param, e.value.body
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=ref.model_id, messages=[{"role": "user"}])
    assert "messages[0]" in e.value.body["param"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=ref.model_id, prompt=[ref.config.get("vocab_size", 10 ** 6) + 10 ** 6])
    # Body too large (the server's limit is 32 MiB): 413 before parsing.
    status, _, body = raw(url + "/completions", b"{\"prompt\": \"" + b"a" * (33 << 20) + b"\"}", headers)
    assert_api_error(status, body, 413)
    # Still serving.
    assert complete(client, ref.model_id, False, prompt=PROMPTS[0], max_tokens=2, temperature=0)[2] == "length"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    with served_checkpoint(tmp_path_factory, "text", "--slots", 1, "--api-key", "sekrit-key", context=128) as s:
        yield s


def test_api_key(keyed):
    server, ref = keyed
    ok = client_of(server, api_key="sekrit-key")
    assert [m.id for m in ok.models.list().data] == [ref.model_id]
    assert complete(ok, ref.model_id, False, prompt=PROMPTS[0], max_tokens=3, temperature=0)[2] == "length"
    for key in ("wrong", "sekrit-ke", "sekrit-keyy", "Sekrit-key"):
        with pytest.raises(openai.AuthenticationError) as e:
            client_of(server, api_key=key).completions.create(model=ref.model_id, prompt="x", max_tokens=1)
        assert e.value.status_code == 401
    body = json.dumps({"model": ref.model_id, "prompt": "x", "max_tokens": 1})
    for headers in ({}, {"Authorization": "sekrit-key"}, {"Authorization": "Basic sekrit-key"}):
        status, _, text = raw(server.base_url + "/completions", body, {"Content-Type": "application/json", **headers})
        assert_api_error(status, text, 401)
    status, _, text = raw(server.url + "/metrics")
    assert status == 401
    assert raw(server.url + "/health")[0] == 200  # open: the orchestrator's probe has no key
    metrics(server, {"Authorization": "Bearer sekrit-key"})


# --- queueing and cancellation -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory):
    with served_checkpoint(tmp_path_factory, "text", "--slots", 1, "--max-queue", 1, context=4096) as s:
        yield s


def running_stream(client, ref, chunks=1):
    """A long streaming completion that has started (its first chunks read): it holds a slot."""
    stream = client.completions.create(model=ref.model_id, prompt=PROMPTS[0], max_tokens=4000, temperature=0,
                                       stream=True)
    it = iter(stream)
    for _ in range(chunks):
        next(it)
    return stream


def test_queue_full_is_503_with_retry_after(one_slot):
    server, ref = one_slot
    client = client_of(server)
    first = running_stream(client, ref)
    queued = {}

    def second():
        try:
            queued["r"] = client.completions.create(model=ref.model_id, prompt=PROMPTS[1], max_tokens=4,
                                                    temperature=0)
        except Exception as e:  # noqa: BLE001 -- reported below
            queued["r"] = e

    t = threading.Thread(target=second)
    t.start()
    try:
        deadline = time.monotonic() + 20
        while metric(metrics(server), "tessera_queue_depth") < 1:
            assert time.monotonic() < deadline, "the second request never queued"
            time.sleep(0.02)
        status, headers, body = raw(server.base_url + "/completions",
                                    json.dumps({"model": ref.model_id, "prompt": "x", "max_tokens": 1}),
                                    {"Content-Type": "application/json"})
        assert_api_error(status, body, 503)
        assert int(headers["Retry-After"]) >= 1
    finally:
        first.close()  # frees the slot: the queued request runs
        t.join(60)
    want, _ = ref.generate(ref.completion_ids(PROMPTS[1]), 4)
    assert not isinstance(queued["r"], Exception), queued["r"]  # (greedy: the request above asks for it)
    assert queued["r"].choices[0].text == ref.text(want)


def test_closing_a_stream_cancels_it_and_frees_the_slot(one_slot):
    server, ref = one_slot
    client = client_of(server)
    before = metric(wait_for_idle_slots(server), "tessera_generated_tokens_total")
    running_stream(client, ref, chunks=3).close()
    m = wait_for_idle_slots(server)
    assert metric(m, "tessera_slots_total") == 1
    # The request stopped early: far fewer than its 4000 tokens were generated.
    assert metric(m, "tessera_generated_tokens_total") - before < 3000
    # The slot serves the next request, with the tokens it would give anyway.
    ids = ref.chat_ids(CONVERSATIONS[1])
    want, reason = ref.generate(ids, 10, chat=True, **SAMPLED)
    got = complete(client, ref.model_id, True, chat=True, messages=CONVERSATIONS[1], max_tokens=10,
                   **sampling_kwargs(SAMPLED))
    check_answer(ref, got, want, reason, len(ids))
    assert metric(wait_for_idle_slots(server), "tessera_slots_busy") == 0


def test_health_answers_beside_idle_connections_and_busy_slots(one_slot):
    """The orchestrator's probe (/health) and the scraper (/metrics) get answers while the slot runs a
    stream, a request waits in the queue, and clients hold connections open without sending a request
    (a slow or idle client must not starve the probe: a failed liveness probe restarts the server)."""
    import socket
    server, ref = one_slot
    first = running_stream(client_of(server), ref)
    idle = []
    try:
        host, port = server.url.split("//")[1].split(":")
        for _ in range(32):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        idle[-1].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # a request that never ends its headers
        t0 = time.monotonic()
        status, _, body = raw(server.url + "/health", timeout=5)
        assert status == 200 and time.monotonic() - t0 < 5
        assert metric(metrics(server), "tessera_slots_busy") == 1
    finally:
        for s in idle:
            s.close()
        first.close()
    wait_for_idle_slots(server)
