"""Scale-out under Ray Serve (issue 21): a local Ray cluster on loopback, two Tessera replicas of the
tiny text checkpoint behind Ray's HTTP proxy (tessera.serve_ray). Through the proxy, with the openai
package: the same routes and answers as one server (streaming too, the reference of the other server
tests), the API's errors unchanged, every request of one session (x-session-id) on one replica while
sessions spread over both, and a stream closed at the client cancelling its request in the replica.
Skipped when ray[serve] is not installed (python/requirements-ray.txt, scripts/setup.sh --ray)."""
from __future__ import annotations

import json
import socket
import time

import pytest

openai = pytest.importorskip("openai", reason="the openai package (python/requirements.txt)")
ray = pytest.importorskip("ray", reason="ray[serve] is not installed (python/requirements-ray.txt; "
                                        "scripts/setup.sh --ray)")
pytest.importorskip("ray.serve", reason="ray is installed without its serve extra (ray[serve])")

from helpers.serve_client import (Reference, assert_api_error, expected, metric, metrics, raw, requires_serve,
                                  same_answer, send)
from helpers.serve_models import text_checkpoint

pytestmark = requires_serve

CONTEXT = 4096
SAMPLED = {"temperature": 1.0, "seed": 21}


class Proxy:
    """The Ray HTTP proxy's address, looking like a ServeProcess to the helpers."""

    def __init__(self, url):
        self.url = url
        self.base_url = url + "/v1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from ray import serve

    import tessera.serve_ray as serve_ray
    ckpt = text_checkpoint(tmp_path_factory.mktemp("serve-ray") / "tiny-text")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(serve_ray.app(ckpt, replicas=2, num_cpus=0.5,
                                serve_args=["--slots", "2", "--max-context", str(CONTEXT), "--threads", "1"]),
                  name="tessera", route_prefix="/")
        yield Proxy(f"http://127.0.0.1:{port}"), Reference(ckpt, "gemma3", max_context=CONTEXT)
    finally:
        serve.shutdown()
        ray.shutdown()


def client(proxy, session=None):
    headers = {"x-session-id": session} if session else None
    return openai.OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0, timeout=120,
                         default_headers=headers)


def test_routes_and_answers_through_the_proxy(cluster):
    proxy, ref = cluster
    status, _, body = raw(proxy.url + "/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    assert [m.id for m in client(proxy).models.list().data] == [ref.model_id]
    requests = [{"prompt": "the image model", "max_tokens": 16, "sampling": SAMPLED},
                {"prompt": [2, 40, 41, 300, 17], "max_tokens": 9, "sampling": {}},
                {"messages": [{"role": "user", "content": "tessera engine"}], "max_tokens": 12, "sampling": SAMPLED}]
    for spec in requests:
        want = expected(ref, spec)
        for stream in (False, True):
            same_answer(send(client(proxy), ref.model_id, spec, stream), want)


def test_bodies_come_in_the_encoding_asked_for(cluster):
    """A client that names no Accept-Encoding (curl) gets plain JSON, whatever the replica's own
    HTTP client would accept from the server."""
    import http.client
    proxy, ref = cluster
    host, port = proxy.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.putrequest("GET", "/v1/models", skip_accept_encoding=True)
    conn.endheaders()
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Encoding") in (None, "identity")
    assert json.loads(r.read())["data"][0]["id"] == ref.model_id


def test_errors_keep_their_shape(cluster):
    proxy, ref = cluster
    with pytest.raises(openai.NotFoundError) as e:
        client(proxy).completions.create(model="no-such-model", prompt="x", max_tokens=1)
    assert e.value.body["code"] == "model_not_found"
    status, _, body = raw(proxy.base_url + "/completions", "{\"prompt\": ", {"Content-Type": "application/json"})
    assert_api_error(status, body, 400)


def replica_of(proxy, ref, session):
    body = json.dumps({"model": ref.model_id, "prompt": "the", "max_tokens": 1})
    status, headers, text = raw(proxy.base_url + "/completions", body,
                                {"Content-Type": "application/json", "x-session-id": session})
    assert status == 200, text
    return headers["x-tessera-replica"]


def test_a_session_stays_on_one_replica(cluster):
    proxy, ref = cluster
    seen = {}
    for round_ in range(3):
        for k in range(12):
            seen.setdefault(f"conversation-{k}", set()).add(replica_of(proxy, ref, f"conversation-{k}"))
    assert all(len(r) == 1 for r in seen.values()), seen
    assert len(set().union(*seen.values())) == 2, "every session went to one replica"


def test_closed_stream_cancels_in_the_replica(cluster):
    proxy, ref = cluster
    session = "cancel-me"
    # /metrics with the session header reaches the replica that runs the session's requests.
    headers = {"x-session-id": session}
    replica = replica_of(proxy, ref, session)
    before = metric(metrics(proxy, headers), "tessera_generated_tokens_total")
    stream = client(proxy, session).completions.create(model=ref.model_id, prompt="the window", max_tokens=4000,
                                                       temperature=0, stream=True)
    chunks = iter(stream)
    for _ in range(3):
        next(chunks)
    stream.close()
    deadline = time.monotonic() + 30
    while True:
        m = metrics(proxy, headers)
        if metric(m, "tessera_slots_busy") == 0:
            break
        assert time.monotonic() < deadline, "the replica's slot stayed busy after the client left"
        time.sleep(0.1)
    assert metric(m, "tessera_generated_tokens_total") - before < 3000
    assert replica_of(proxy, ref, session) == replica
