"""`tessera serve` smoke test (issue 21): the server started on a free loopback port over a tiny
checkpoint (tests/testdata/models/gemma3_text with the Gemma-style tokenizer.model), every route
hit with urllib. Completions are checked against the same prompt run directly through
`tessera.Model.generate` (same tokens), with the `sentencepiece` package as the detokenizer of
reference. The openai-package, load and exactness suites are python/tests/test_serve_*.py."""
from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from helpers.models import BUILD_DIR, MODELS_DIR, REPO

TESSERA = os.path.join(BUILD_DIR, "tessera")
TOKENIZER = os.path.join(REPO, "tests", "testdata", "tokenizer", "gemma_style.model")
KEY = "smoke-test-key"
SLOTS = 2
CONTEXT = 128

pytestmark = pytest.mark.skipif(not os.access(TESSERA, os.X_OK), reason=f"{TESSERA} is not built")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """gemma3_text (vocab 512) with gemma_style.model (512 pieces, Gemma's special tokens)."""
    d = tmp_path_factory.mktemp("served") / "tiny-gemma3"
    d.mkdir()
    src = os.path.join(MODELS_DIR, "gemma3_text")
    shutil.copyfile(os.path.join(src, "config.json"), d / "config.json")
    os.symlink(os.path.join(src, "model.safetensors"), d / "model.safetensors")
    shutil.copyfile(TOKENIZER, d / "tokenizer.model")
    return str(d)


@pytest.fixture(scope="module")
def server(model_dir):
    proc = subprocess.Popen([TESSERA, "serve", "--model", model_dir, "--port", "0", "--slots", str(SLOTS),
                             "--max-context", str(CONTEXT), "--threads", "2", "--api-key", KEY],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # the one line the server prints once it listens
    if not line.startswith("tessera serve: listening on http://127.0.0.1:"):
        proc.kill()
        pytest.fail(f"no listening line: {line!r}, stderr: {proc.stderr.read()}")
    url = line.strip().rsplit(" ", 1)[1]
    yield url
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=15) == 0, proc.stderr.read()
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("tessera serve did not stop within 15 s of SIGTERM")


@pytest.fixture(scope="module")
def reference(model_dir):
    tessera = pytest.importorskip("tessera")
    spm = pytest.importorskip("sentencepiece")
    model = tessera.Model.load(model_dir, max_context=CONTEXT, num_threads=2)
    return model, spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))


def call(url, path, body=None, key=KEY, method=None, raw=None):
    """(status, headers, body bytes) of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url + path, data=data, method=method or ("POST" if data is not None else "GET"))
    req.add_header("Content-Type", "application/json")
    if key is not None:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def ok_json(url, path, body=None):
    status, _, data = call(url, path, body)
    assert status == 200, data
    return json.loads(data)


def expected(reference, prompt=None, ids=None, max_new=8, stop_ids=(1,)):
    """The reference tokens (tessera.Model.generate, greedy) and their text (sentencepiece)."""
    model, sp = reference
    tokens = model.generate(input_ids=[ids] if ids is not None else None, prompt=prompt, max_new_tokens=max_new)[0]
    text_ids = [t for t in tokens if t not in stop_ids]
    return tokens, sp.decode(text_ids)


def sse_events(data):
    events = [e for e in data.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events
    assert events[-1] == "data: [DONE]"
    return [json.loads(e[len("data: "):]) for e in events[:-1]]


def test_health_needs_no_key_and_models_lists_the_model(server, model_dir):
    status, _, data = call(server, "/health", key=None)
    assert status == 200 and json.loads(data) == {"status": "ok"}
    models = ok_json(server, "/v1/models")
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [os.path.basename(model_dir)]
    assert ok_json(server, "/v1/models/" + os.path.basename(model_dir))["object"] == "model"


def test_completion_text_prompt_matches_generate(server, reference):
    tokens, text = expected(reference, prompt="hello world", max_new=8)
    r = ok_json(server, "/v1/completions", {"prompt": "hello world", "max_tokens": 8, "temperature": 0})
    assert r["object"] == "text_completion"
    assert r["choices"][0]["text"] == text
    assert r["choices"][0]["finish_reason"] == ("stop" if tokens[-1] == 1 else "length")
    _, sp = reference
    assert r["usage"] == {"prompt_tokens": 1 + len(sp.encode("hello world")), "completion_tokens": len(tokens),
                          "total_tokens": 1 + len(sp.encode("hello world")) + len(tokens)}


def test_completion_token_ids_matches_generate(server, reference):
    ids = [2, 40, 41, 42, 43, 44]
    tokens, text = expected(reference, ids=ids, max_new=10)
    r = ok_json(server, "/v1/completions", {"prompt": ids, "max_tokens": 10, "temperature": 0})
    assert r["choices"][0]["text"] == text
    assert r["usage"]["prompt_tokens"] == len(ids) and r["usage"]["completion_tokens"] == len(tokens)


def test_streaming_gives_the_same_text_in_chunks(server, reference):
    _, text = expected(reference, prompt="the stream", max_new=12)
    status, headers, data = call(server, "/v1/completions", {
        "prompt": "the stream", "max_tokens": 12, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(data)
    assert all(e["object"] == "text_completion" for e in events)
    assert "".join(c["text"] for e in events for c in e["choices"]) == text
    assert events[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] >= 1
    assert all(e["usage"] is None for e in events[:-1])


def test_stop_string_cuts_the_text(server, reference):
    _, text = expected(reference, prompt="hello world", max_new=8)
    stop = text[3:6]  # a stop string the greedy text is known to contain
    want = text[:text.index(stop)]
    for stream in (False, True):
        status, _, data = call(server, "/v1/completions", {"prompt": "hello world", "max_tokens": 8, "temperature": 0,
                                                           "stop": [stop], "stream": stream})
        assert status == 200, data
        if stream:
            events = sse_events(data)
            got = "".join(c["text"] for e in events for c in e["choices"])
            finish = events[-1]["choices"][0]["finish_reason"]
        else:
            choice = json.loads(data)["choices"][0]
            got, finish = choice["text"], choice["finish_reason"]
        assert (got, finish) == (want, "stop")


def test_concurrent_requests_each_match_alone(server, reference):
    prompts = ["one", "two three", "four five six", "seven eight nine ten"]  # more than the slots
    want = [expected(reference, prompt=p, max_new=6 + i)[1] for i, p in enumerate(prompts)]

    def run(i):
        r = ok_json(server, "/v1/completions", {"prompt": prompts[i], "max_tokens": 6 + i, "temperature": 0})
        return r["choices"][0]["text"]

    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        assert list(pool.map(run, range(len(prompts)))) == want


@pytest.mark.parametrize("path, body, status, code, param", [
    ("/v1/completions", {"prompt": "x", "model": "no-such-model"}, 404, "model_not_found", "model"),
    ("/v1/completions", {"prompt": "x", "max_tokens": CONTEXT}, 400, "context_length_exceeded", "prompt"),
    ("/v1/completions", {"prompt": "x", "n": 3}, 400, None, "n"),
    ("/v1/completions", {"prompt": [1, 100000]}, 400, None, "prompt[1]"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}]},
     400, None, "messages[0].content[0].image_url.url"),
])
def test_errors_in_the_api_shape(server, path, body, status, code, param):
    got, headers, data = call(server, path, body)
    assert got == status, data
    assert headers["Content-Type"] == "application/json"
    err = json.loads(data)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code and err["param"] == param and err["message"]


def test_context_overflow_names_the_numbers(server):
    _, _, data = call(server, "/v1/completions", {"prompt": "x", "max_tokens": 500})
    message = json.loads(data)["error"]["message"]
    assert str(CONTEXT) in message and "500" in message


def test_bad_json_bad_key_unknown_route_too_large(server):
    status, _, data = call(server, "/v1/chat/completions", raw=b"{not json")
    assert status == 400 and json.loads(data)["error"]["type"] == "invalid_request_error"
    for key in (None, "wrong-key", KEY + "x", KEY[:-1]):
        status, headers, data = call(server, "/v1/completions", {"prompt": "x"}, key=key)
        assert status == 401 and json.loads(data)["error"]["code"] == "invalid_api_key", key
    assert call(server, "/metrics", key=None)[0] == 401
    status, _, data = call(server, "/v1/nothing-here")
    assert status == 404 and "error" in json.loads(data)
    status, _, data = call(server, "/v1/completions", raw=b"x" * (33 << 20))  # over the 32 MiB default
    assert status == 413 and json.loads(data)["error"]["code"] == "request_too_large"


def test_metrics_count_requests_tokens_and_slots(server):
    ok_json(server, "/v1/completions", {"prompt": "count me", "max_tokens": 3, "temperature": 0})
    status, headers, data = call(server, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    values = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    assert values['tessera_requests_total{route="/v1/completions",status="200"}'] >= 1
    assert values["tessera_slots_total"] == SLOTS
    assert values["tessera_generated_tokens_total"] >= 3 and values["tessera_prompt_tokens_total"] >= 3
    assert values["tessera_kv_cache_bytes"] > 0
    for name in ("tessera_queue_depth", "tessera_slots_busy", "tessera_prefill_tokens_per_second",
                 "tessera_decode_tokens_per_second"):
        assert name in values


def test_cli_refuses_bad_options(model_dir):
    for args, word in ((["--port", "70000"], "--port"), (["--slots", "0"], "--slots"), (["--bogus", "1"], "--bogus"),
                       (["--api-key", ""], "--api-key")):
        r = subprocess.run([TESSERA, "serve", "--model", model_dir, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and word in r.stderr, r.stderr
    r = subprocess.run([TESSERA, "serve", "--help"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and "usage: tessera serve" in r.stdout


def test_return_token_ids_extension(server, reference):
    _, sp = reference
    tokens, _ = expected(reference, prompt="ids please", max_new=9)
    generated = [t for t in tokens if t != 1]
    prompt_ids = [2] + sp.encode("ids please")
    body = {"prompt": "ids please", "max_tokens": 9, "temperature": 0, "return_token_ids": True}
    r = ok_json(server, "/v1/completions", body)
    assert r["prompt_token_ids"] == prompt_ids
    assert r["choices"][0]["token_ids"] == generated
    status, _, data = call(server, "/v1/completions", {**body, "stream": True})
    events = sse_events(data)
    assert events[0]["prompt_token_ids"] == prompt_ids
    assert all("prompt_token_ids" not in e for e in events[1:])
    assert [t for e in events for c in e["choices"] for t in c["token_ids"]] == generated
    status, _, data = call(server, "/v1/completions", {**body, "return_token_ids": "yes"})
    assert status == 400 and json.loads(data)["error"]["param"] == "return_token_ids"
