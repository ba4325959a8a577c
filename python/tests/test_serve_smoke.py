"""`tessera serve` smoke test (issue 21): the server started on a free loopback port over a tiny
checkpoint (tests/testdata/models/gemma3_text with the Gemma-style tokenizer.model), every route
hit with urllib. Completions and chat completions are checked against the same prompt run directly
through `tessera.Model.generate` (same tokens), with the `sentencepiece` package as the tokenizer
and detokenizer of reference and chat prompts written out by hand (or rendered by jinja2); also
GGUF files, images as data URLs (the tiny Gemma 3 vision tower), errors, metrics, disconnects,
idle connections and SIGTERM. The openai-package, load and exactness suites are the other
python/tests/test_serve_*.py."""
from __future__ import annotations

import concurrent.futures
import contextlib
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


@contextlib.contextmanager
def serving(model, *args):
    """`tessera serve` on a free loopback port: yields its base URL; SIGTERM must stop it (status 0)."""
    proc = subprocess.Popen([TESSERA, "serve", "--model", str(model), "--port", "0", "--threads", "2", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # the one line the server prints once it listens
    if not line.startswith("tessera serve: listening on http://127.0.0.1:"):
        proc.kill()
        pytest.fail(f"no listening line: {line!r}, stderr: {proc.stderr.read()}")
    try:
        yield line.strip().rsplit(" ", 1)[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=15) == 0, proc.stderr.read()
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("tessera serve did not stop within 15 s of SIGTERM")


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
    with serving(model_dir, "--slots", SLOTS, "--max-context", CONTEXT, "--api-key", KEY) as url:
        yield url


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
    ("/v1/completions", {"prompt": "x", "max_tokens": 2**63 - 1}, 400, "context_length_exceeded", "prompt"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 300}]}, 400, "context_length_exceeded",
     "messages"),
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


def test_idle_connections_do_not_starve_health(server):
    """Connections that never send (or never finish) a request each hold one of httplib's threads;
    the pool grows for them, so /health and the API still answer."""
    import socket
    host, port = server.rsplit("/", 1)[1].split(":")
    t0 = time.monotonic()
    idle = [socket.create_connection((host, int(port))) for _ in range(40)]  # a burst: the backlog holds it
    idle[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    try:
        status, _, data = call(server, "/health", key=None)
        assert status == 200 and time.monotonic() - t0 < 3
        assert ok_json(server, "/v1/completions", {"prompt": "still here", "max_tokens": 2})["choices"]
    finally:
        for s in idle:
            s.close()


def test_a_port_in_use_is_refused(server, model_dir):
    """No SO_REUSEPORT: a second server on the same port fails instead of sharing its connections."""
    port = server.rsplit(":", 1)[1]
    r = subprocess.run([TESSERA, "serve", "--model", model_dir, "--port", port, "--threads", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "cannot listen" in r.stderr, r.stderr
    assert call(server, "/health", key=None)[0] == 200


def test_gguf_model_serves_with_its_own_vocabulary(model_dir, tmp_path):
    """A GGUF (tessera quantize q8_0 of the tiny checkpoint): the tokenizer comes from the file."""
    tessera = pytest.importorskip("tessera")
    gguf = str(tmp_path / "tiny-q8_0.gguf")
    r = subprocess.run([TESSERA, "quantize", "--model", model_dir, "--type", "q8_0", "--out", gguf],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    want = tessera.Model.load(gguf, max_context=CONTEXT, num_threads=2).generate(prompt="hello gguf", max_new_tokens=6)[0]
    with serving(gguf, "--max-context", CONTEXT) as url:
        assert ok_json(url, "/v1/models")["data"][0]["id"] == "tiny-q8_0.gguf"
        got = ok_json(url, "/v1/completions", {"prompt": "hello gguf", "max_tokens": 6, "temperature": 0,
                                               "return_token_ids": True})
        assert got["choices"][0]["token_ids"] == [t for t in want if t != 1]


def metric(url, name, key=None):
    _, _, data = call(url, "/metrics", key=key)
    for line in data.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_cancels_the_request(model_dir, stream):
    """A client that closes its connection mid-completion frees the slot long before max_tokens."""
    import socket
    with serving(model_dir, "--slots", 1, "--max-context", 4096) as url:
        host, port = url.rsplit("/", 1)[1].split(":")
        body = json.dumps({"prompt": "go on", "max_tokens": 4000, "temperature": 1.0, "seed": 3,
                           "stream": stream}).encode()
        s = socket.create_connection((host, int(port)))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        if stream:
            got = b""
            while b"data: " not in got:
                got += s.recv(4096)
        else:
            # Wait until the completion runs (4000 tokens take seconds); admission may lag the send on a busy machine.
            deadline = time.monotonic() + 10
            while metric(url, "tessera_slots_busy") != 1:
                assert time.monotonic() < deadline, "the request never took its slot"
                time.sleep(0.02)
        s.close()
        deadline = time.monotonic() + 10
        while metric(url, "tessera_slots_busy") != 0:
            assert time.monotonic() < deadline, "the slot stayed busy after the client left"
            time.sleep(0.02)
        generated = metric(url, "tessera_generated_tokens_total")
        assert generated < 2000, f"{generated} tokens generated for a client that had left"



@pytest.fixture(scope="module")
def overflowing_model(tmp_path_factory, model_dir):
    """model_dir with every final-norm weight 3e38: the normed hidden state overflows to +-inf, so the
    logits are NaN, which the engine reports when it samples the first token (after the prompt)."""
    import struct
    from helpers.models import read_safetensors
    d = tmp_path_factory.mktemp("overflow") / "tiny-gemma3"
    d.mkdir()
    for name in ("config.json", "tokenizer.model"):
        shutil.copyfile(os.path.join(model_dir, name), d / name)
    header, base, data = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    data = bytearray(data)
    norm = header["model.norm.weight"]
    assert norm["dtype"] == "F32"
    start, end = (base + o for o in norm["data_offsets"])
    data[start:end] = struct.pack(f"<{(end - start) // 4}f", *[3e38] * ((end - start) // 4))
    (d / "model.safetensors").write_bytes(bytes(data))
    return str(d)


def test_an_engine_error_after_admission_is_an_error_status(overflowing_model):
    """The engine fails after the request was admitted (its first sampled token): a non-streaming
    request gets 500 in the API's error shape (the status waits for the outcome); a stream, whose
    200 is already sent, gets an error event and [DONE]."""
    with serving(overflowing_model, "--slots", 1, "--max-context", CONTEXT) as url:
        for path, body in (("/v1/completions", {"prompt": "hello world"}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
            status, headers, data = call(url, path, {**body, "max_tokens": 4}, key=None)
            assert status == 500, (path, status, data)
            assert headers["Content-Type"].startswith("application/json")
            err = json.loads(data)["error"]
            assert err["type"] == "server_error" and "non-finite logits" in err["message"], err
            status, _, data = call(url, path, {**body, "max_tokens": 4, "stream": True}, key=None)
            assert status == 200
            events = sse_events(data)
            assert events[-1]["error"]["type"] == "server_error", events
            assert not any(e.get("choices") and e["choices"][0].get("finish_reason") for e in events), events
        assert metric(url, "tessera_slots_busy", key=None) == 0
        status, _, data = call(url, "/metrics", key=None)
        assert 'tessera_requests_total{route="/v1/completions",status="500"} 1' in data.decode(), data.decode()

# --- chat ------------------------------------------------------------------------------------------
# gemma_style.model's control tokens, as HF tokenizers split rendered chat text on them.
SPECIAL = {"<bos>": 2, "<start_of_turn>": 5, "<end_of_turn>": 6, "<start_of_image>": 7}


def encode_special(sp, text):
    """Rendered chat text to ids: control tokens by id, the text between them by sentencepiece."""
    import re
    ids = []
    for piece in re.split("(" + "|".join(map(re.escape, SPECIAL)) + ")", text):
        ids += [SPECIAL[piece]] if piece in SPECIAL else sp.encode(piece) if piece else []
    return ids


def chat(url, messages, **kw):
    return ok_json(url, "/v1/chat/completions", {"messages": messages, "temperature": 0, "return_token_ids": True, **kw})


@pytest.mark.parametrize("system", [None, "be brief"])
def test_chat_uses_the_builtin_gemma3_format(server, reference, system):
    """No template in the checkpoint: Gemma 3's turn format (written out here by hand), encoded with
    its control tokens; the completion is what Model.generate makes of those ids, stopping at the
    end-of-turn token as well as eos."""
    model, sp = reference
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": " hi "}]
    text = ("<bos><start_of_turn>user\n" + (system + "\n\n" if system else "") +
            "hi<end_of_turn>\n<start_of_turn>model\n")
    ids = encode_special(sp, text)
    want = model.generate(input_ids=[ids], max_new_tokens=10, stop_tokens=[1, 6])[0]
    r = chat(server, messages, max_tokens=10)
    assert r["object"] == "chat.completion" and r["choices"][0]["message"]["role"] == "assistant"
    assert r["prompt_token_ids"] == ids
    assert r["choices"][0]["token_ids"] == [t for t in want if t not in (1, 6)]
    assert r["choices"][0]["message"]["content"] == sp.decode([t for t in want if t not in (1, 6)])
    status, _, data = call(server, "/v1/chat/completions", {"messages": messages, "temperature": 0, "max_tokens": 10,
                                                            "stream": True})
    events = sse_events(data)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == r["choices"][0]["message"]["content"]
    assert events[-1]["choices"][0]["finish_reason"] == r["choices"][0]["finish_reason"]


def test_chat_uses_the_checkpoints_template(model_dir, reference, tmp_path):
    """A chat_template.jinja beside the weights wins over the built-in format; jinja2 renders the
    same template as the reference."""
    jinja2 = pytest.importorskip("jinja2")
    _, sp = reference
    d = tmp_path / "templated"
    shutil.copytree(model_dir, d, symlinks=True)
    source = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role | upper }}: {{ m.content }}"
              "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>MODEL:{% endif %}")
    (d / "chat_template.jinja").write_text(source)
    messages = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                {"role": "user", "content": "three"}]
    rendered = jinja2.Environment().from_string(source).render(messages=messages, bos_token="<bos>",
                                                               add_generation_prompt=True)
    with serving(d, "--max-context", CONTEXT) as url:
        assert chat(url, messages, max_tokens=2)["prompt_token_ids"] == encode_special(sp, rendered)


def test_chat_with_an_image_data_url(tmp_path):
    """An image part (a PNG data URL) through the checkpoint's processor and vision tower, laid out
    at the template's <start_of_image> as Gemma 3's processor does; the tokens are Model.generate's
    on the same text and image file. The tiny gemma3 checkpoint's special ids are moved onto
    gemma_style.model's control tokens (boi 7, eoi 8, image 4)."""
    tessera = pytest.importorskip("tessera")
    spm = pytest.importorskip("sentencepiece")
    Image = pytest.importorskip("PIL.Image")
    import base64
    import io
    import numpy as np
    d = tmp_path / "tiny-gemma3-vision"
    d.mkdir()
    src = os.path.join(MODELS_DIR, "gemma3")
    config = json.load(open(os.path.join(src, "config.json")))
    config.update(boi_token_index=7, eoi_token_index=8, image_token_index=4)
    (d / "config.json").write_text(json.dumps(config))
    os.symlink(os.path.join(src, "model.safetensors"), d / "model.safetensors")
    shutil.copyfile(TOKENIZER, d / "tokenizer.model")
    (d / "preprocessor_config.json").write_text(json.dumps({  # the tiny tower's 12 x 12 input
        "image_processor_type": "Gemma3ImageProcessor", "size": {"height": 12, "width": 12}, "resample": 2,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3}))
    rgb = (np.arange(20 * 30 * 3) % 251).astype(np.uint8).reshape(20, 30, 3)
    png = tmp_path / "picture.png"
    Image.fromarray(rgb).save(png)
    url_data = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    text_ids = encode_special(sp, "<bos><start_of_turn>user\n<start_of_image>describe<end_of_turn>\n"
                                  "<start_of_turn>model\n")
    at = text_ids.index(7)
    nl = sp.piece_to_id("\n\n")
    layout = text_ids[:at] + [nl, 7] + [4] * config["mm_tokens_per_image"] + [8, nl] + text_ids[at + 1:]
    model = tessera.Model.load(str(d), max_context=CONTEXT, num_threads=2)
    want = model.generate(input_ids=[text_ids], images=[str(png)], max_new_tokens=8, stop_tokens=[1, 6])[0]
    with serving(d, "--max-context", CONTEXT) as url:
        r = chat(url, [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url_data}},
                                                    {"type": "text", "text": "describe"}]}], max_tokens=8)
        assert r["prompt_token_ids"] == layout
        assert r["choices"][0]["token_ids"] == [t for t in want if t not in (1, 6)]
        bad = base64.b64encode(b"not an image").decode()
        status, _, data = call(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + bad}}]}]}, key=None)
        assert status == 400 and json.loads(data)["error"]["param"] == "messages[0].content[0]"
