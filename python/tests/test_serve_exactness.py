"""Continuous batching does not change a request's tokens (issue 21): each of N concurrent requests
(arriving at different times, of different prompt lengths and max_tokens, greedy and seeded
sampling, streaming and not, completions and chat) gets exactly what it gets alone — alone meaning
through the server one at a time, and by tessera.Model.generate in this process. A returning
conversation reuses its slot's cached tokens and still gets the same tokens."""
from __future__ import annotations

import random
import threading
import time

import pytest

openai = pytest.importorskip("openai", reason="the openai package (python/requirements.txt)")

from helpers.serve_client import expected, metric, metrics, requires_serve, same_answer, send, wait_for_idle_slots
from helpers.serve_client import served as served_checkpoint

pytestmark = requires_serve

WORDS = ("the image model token gemma window block attention cache tessera engine fast layer prompt quantized "
         "weights vocabulary").split()
SLOTS = 4
CONTEXT = 512


def specs(vocab, n=12, seed=0):
    """n requests: text and token-id completions and chats of 2 ... ~150 prompt tokens, 1 ... 48 new
    tokens, every other one sampled with its own seed."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sampling = ({} if i % 2 == 0 else
                    {"temperature": rng.choice([0.7, 1.0, 1.3]), "top_p": rng.choice([0.8, 0.95, 1.0]),
                     "top_k": rng.choice([0, 20, 64]), "seed": rng.randrange(2 ** 32)})
        max_tokens = rng.choice([1, 3, 8, 17, 32, 48])
        kind = i % 3
        if kind == 0:
            spec = {"prompt": " ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 4, 20, 60])))}
        elif kind == 1:  # token ids, clear of the special and image ids (0 ... 15)
            spec = {"prompt": [2] + [rng.randrange(16, vocab) for _ in range(rng.choice([2, 30, 150]))]}
        else:
            turns = rng.choice([1, 3])
            msgs = [{"role": "user" if t % 2 == 0 else "assistant",
                     "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25)))} for t in range(turns)]
            spec = {"messages": msgs}
        spec.update(max_tokens=max_tokens, sampling=sampling)
        out.append(spec)
    return out


@pytest.fixture(scope="module", params=["text", "demo"])
def served(request, tmp_path_factory):
    with served_checkpoint(tmp_path_factory, request.param, "--slots", SLOTS, context=CONTEXT) as (s, ref):
        yield s, ref, openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0, timeout=300)


def vocab_of(ref):
    return ref.config.get("text_config", ref.config)["vocab_size"]


def run_concurrently(client, model, requests, delays, streams):
    """Each request on its own thread, started after its delay; returns the answers in order."""
    answers = [None] * len(requests)
    errors = []
    start = time.monotonic() + 0.05

    def one(i):
        try:
            time.sleep(max(0.0, start + delays[i] - time.monotonic()))
            answers[i] = send(client, model, requests[i], streams[i])
        except Exception as e:  # noqa: BLE001 -- collected and reported
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert all(a is not None for a in answers)
    return answers


def test_concurrent_requests_equal_alone(served):
    server, ref, client = served
    requests = specs(vocab_of(ref))
    want = [expected(ref, s) for s in requests]
    # Alone through the server, one at a time, equals tessera.Model.generate.
    alone = [send(client, ref.model_id, s, stream=i % 2 == 1) for i, s in enumerate(requests)]
    for i, (got, w) in enumerate(zip(alone, want)):
        try:
            same_answer(got, w)
        except AssertionError as e:
            raise AssertionError(f"alone, request {i} ({requests[i]}): {e}") from None
    rng = random.Random(1)
    for round_ in range(2):  # two arrival orders: more requests than slots, so some wait in the queue
        delays = [rng.uniform(0, 0.4) for _ in requests]
        streams = [rng.random() < 0.5 for _ in requests]
        answers = run_concurrently(client, ref.model_id, requests, delays, streams)
        for i, (got, w) in enumerate(zip(answers, alone)):
            try:
                same_answer(got, w)
            except AssertionError as e:
                raise AssertionError(f"round {round_}, request {i} ({requests[i]}): {e}") from None
    wait_for_idle_slots(server)


def test_same_seed_same_tokens_and_seeds_differ(served):
    server, ref, client = served
    spec = {"prompt": "the window", "max_tokens": 24, "sampling": {"temperature": 1.5, "seed": 11}}
    a = send(client, ref.model_id, spec, stream=False)
    assert send(client, ref.model_id, spec, stream=True) == a
    same_answer(a, expected(ref, spec))
    others = {send(client, ref.model_id, {**spec, "sampling": {"temperature": 1.5, "seed": s}}, False)[0]
              for s in range(12, 16)}
    assert len(others | {a[0]}) > 1, "different seeds all gave the same text"


def test_returning_conversation_reuses_the_cache_exactly(served):
    server, ref, client = served
    first = [{"role": "user", "content": " ".join(WORDS * 3)}]
    spec = {"messages": first, "max_tokens": 8, "sampling": {"temperature": 1.0, "seed": 8}}
    reply = send(client, ref.model_id, spec, stream=False)
    same_answer(reply, expected(ref, spec))
    reused = metric(wait_for_idle_slots(server), "tessera_prompt_tokens_reused_total")
    second = first + [{"role": "assistant", "content": reply[0] or "ok"}, {"role": "user", "content": "the layer"}]
    spec2 = {"messages": second, "max_tokens": 12, "sampling": {"temperature": 1.0, "seed": 9}}
    same_answer(send(client, ref.model_id, spec2, stream=True), expected(ref, spec2))
    assert metric(metrics(server), "tessera_prompt_tokens_reused_total") > reused
