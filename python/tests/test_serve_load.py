"""A bounded load test of `tessera serve` on loopback (issue 21): 200 requests from 16 concurrent
clients (asyncio, one openai.AsyncOpenAI client each), half of them streamed, on the tiny text
checkpoint. Asserted: no errors, every answer equal to its request's answer alone (no lost,
duplicated or foreign tokens), the whole run within TIME_LIMIT, and the server's resident memory
flat: VmRSS after the run within RSS_BOUND of VmRSS after a warm-up burst. Printed (not asserted):
p50/p99 latency, time to first token of the streams, throughput and the memory figures."""
from __future__ import annotations

import asyncio
import random
import statistics
import time

import pytest

openai = pytest.importorskip("openai", reason="the openai package (python/requirements.txt)")

from helpers.serve_client import expected, requires_serve, same_answer, send, send_async, served, wait_for_idle_slots
from test_serve_exactness import specs

pytestmark = requires_serve

N_REQUESTS = 200
CLIENTS = 16
DISTINCT = 20
TIME_LIMIT = 120.0          # seconds for the 200 requests (they take a few on two cores)
RSS_BOUND = 16 * 1024       # KiB of resident growth allowed across the run


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def load(server, model, requests, plan):
    """plan: [(spec index, stream)]; CLIENTS workers take from it. Returns (answers, latencies, ttfts)."""
    todo = asyncio.Queue()
    for item in enumerate(plan):
        todo.put_nowait(item)
    answers, latency, ttft = [None] * len(plan), [], []

    async def worker():
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60) as c:
            while not todo.empty():
                k, (i, stream) = todo.get_nowait()
                t0 = time.perf_counter()
                first = (lambda: ttft.append(time.perf_counter() - t0)) if stream else None
                answers[k] = await send_async(c, model, requests[i], stream, on_first=first)
                latency.append(time.perf_counter() - t0)

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(CLIENTS))), TIME_LIMIT)
    return answers, latency, ttft


def test_200_requests_from_16_clients(tmp_path_factory):
    with served(tmp_path_factory, "text", "--slots", 8, "--max-queue", 64) as (server, ref):
        requests = [dict(s, max_tokens=min(s["max_tokens"], 32)) for s in specs(512, n=DISTINCT, seed=5)]
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
        alone = [send(client, ref.model_id, s, stream=False) for s in requests]
        for i in range(3):  # spot checks against the engine run directly (the exactness tests do them all)
            same_answer(alone[i], expected(ref, requests[i]))
        # Warm-up burst (threads, buffers and allocator pools reach their working size), then the baseline.
        rng = random.Random(3)
        asyncio.run(load(server, ref.model_id, requests, [(i % DISTINCT, i % 2 == 0) for i in range(2 * CLIENTS)]))
        wait_for_idle_slots(server)
        rss_before = server.status_kb("VmRSS")

        plan = [(rng.randrange(DISTINCT), rng.random() < 0.5) for _ in range(N_REQUESTS)]
        t0 = time.perf_counter()
        answers, latency, ttft = asyncio.run(load(server, ref.model_id, requests, plan))
        wall = time.perf_counter() - t0
        wait_for_idle_slots(server)
        rss_after, hwm = server.status_kb("VmRSS"), server.status_kb("VmHWM")

        for k, ((i, stream), got) in enumerate(zip(plan, answers)):
            try:
                same_answer(got, alone[i])
            except AssertionError as e:
                raise AssertionError(f"request {k} (spec {i}, stream={stream}): {e}") from None
        tokens = sum(len(alone[i][1] or []) for i, _ in plan)
        print(f"\nload: {N_REQUESTS} requests from {CLIENTS} clients in {wall:.2f} s "
              f"({N_REQUESTS / wall:.1f} req/s{f', {tokens / wall:.0f} generated tok/s' if tokens else ''}); "
              f"latency p50 {1e3 * statistics.median(latency):.1f} ms, p99 {1e3 * percentile(latency, 99):.1f} ms; "
              f"stream ttft p50 {1e3 * statistics.median(ttft):.1f} ms, p99 {1e3 * percentile(ttft, 99):.1f} ms; "
              f"VmRSS {rss_before / 1024:.1f} -> {rss_after / 1024:.1f} MiB (peak {hwm / 1024:.1f} MiB)")
        assert server.alive()
        assert rss_after - rss_before <= RSS_BOUND, f"VmRSS grew {rss_after - rss_before} KiB over the run"
