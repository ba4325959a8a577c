"""Scale-out with Ray Serve: N replicas, each running one `tessera serve` child on its node's loopback,
behind Ray Serve's HTTP proxy with the same routes (the OpenAI ones, streaming included, /health,
/metrics). A replica forwards each request as it came (method, path, body, Authorization) and streams
the answer back as it arrives, so the OpenAI shapes, error codes and SSE framing stay the server's
own; a client that goes away closes the forwarded connection, which cancels the request in the
server and frees its slot (docs/serving.md "Scale-out").

Routing: with `affinity=True` (the default) Ray's consistent-hash router sends every request carrying
the same session header (`x-session-id`, Ray's RAY_SERVE_SESSION_ID_HEADER_KEY) to the same replica,
so a returning conversation finds its prefix in that replica's slot cache; requests without the
header spread evenly. Each answer carries `x-tessera-replica` (the replica that served it).

    python -m tessera.serve_ray --model DIR --replicas 2 --port 8000 -- --slots 4 --threads 8

or from Python:  serve.run(tessera.serve_ray.app(DIR, replicas=2, serve_args=["--slots", "4"]))

Needs `ray[serve]` (python/requirements-ray.txt; scripts/setup.sh --ray) and the `tessera` binary on
every node (TESSERA_BIN, or this checkout's build)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from .serve_process import ServeProcess

__all__ = ["app", "main"]

SESSION_HEADER = "x-session-id"
REPLICA_HEADER = "x-tessera-replica"
_CONSISTENT_HASH = "ray.serve.experimental.consistent_hash_router.ConsistentHashRouter"
# Hop-by-hop and length headers are the proxy's to set for its own connection.
_DROP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "upgrade",
         "proxy-authorization", "proxy-connection", "trailer"}


def _deployment_class():
    """The replica class, made on first use so that `import tessera.serve_ray` needs no Ray."""
    from ray import serve
    from starlette.responses import Response, StreamingResponse

    class TesseraReplica:
        def __init__(self, model, serve_args=(), binary=None, start_timeout=600.0):
            self.server = ServeProcess(model, *serve_args, binary=binary, start_timeout=start_timeout).start()
            self.replica = serve.get_replica_context().replica_id.unique_id
            self.http = None  # an aiohttp session of the replica's event loop (made on first request)

        async def _session(self):
            if self.http is None:
                import aiohttp
                # No total timeout: a stream lasts as long as its generation does.
                self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
                                                  auto_decompress=False)
            return self.http

        async def __call__(self, request):
            http = await self._session()
            target = self.server.url + request.url.path + (("?" + request.url.query) if request.url.query else "")
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
            # Only the encodings the client accepts (aiohttp would otherwise ask for gzip, and the
            # compressed body would reach a client that never asked for it).
            headers.setdefault("accept-encoding", "identity")
            body = await request.body()
            upstream = await http.request(request.method, target, data=body or None, headers=headers,
                                          allow_redirects=False)
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROP}
            out_headers[REPLICA_HEADER] = self.replica
            if upstream.content_type != "text/event-stream":
                try:
                    data = await upstream.read()
                finally:
                    upstream.release()
                return Response(data, status_code=upstream.status, headers=out_headers)

            async def relay():
                # Ended early (the client left: Ray cancels this generator), close() drops the
                # connection to the server, which cancels the request there.
                try:
                    async for piece in upstream.content.iter_any():
                        yield piece
                finally:
                    upstream.close()

            return StreamingResponse(relay(), status_code=upstream.status, headers=out_headers,
                                     media_type="text/event-stream")

        def check_health(self):
            # Ray restarts a replica whose check fails: the server process must be alive.
            if not self.server.alive():
                raise RuntimeError(f"tessera serve exited ({self.server.proc.returncode}): "
                                   f"{self.server.stderr[-2000:]}")

        def __del__(self):
            server = getattr(self, "server", None)
            if server is not None:
                server.stop()

    return TesseraReplica


def app(model, replicas=2, serve_args=(), binary=None, affinity=True, num_cpus=1.0, max_ongoing_requests=64,
        name="tessera"):
    """A Ray Serve application of `replicas` Tessera replicas of `model` (pass it to serve.run).
    serve_args: `tessera serve` options for every replica (e.g. ["--slots", "4", "--threads", "8"]).
    num_cpus: the Ray CPUs each replica reserves (its server's threads run outside Ray's accounting)."""
    from ray import serve
    options = {"name": name, "num_replicas": int(replicas), "ray_actor_options": {"num_cpus": float(num_cpus)},
               "max_ongoing_requests": int(max_ongoing_requests), "health_check_period_s": 5}
    if affinity:
        from ray.serve.config import RequestRouterConfig
        options["request_router_config"] = RequestRouterConfig(request_router_class=_CONSISTENT_HASH)
    deployment = serve.deployment(**options)(_deployment_class())
    return deployment.bind(os.path.abspath(str(model)) if os.path.exists(str(model)) else str(model),
                           [str(a) for a in serve_args], binary)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    serve_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m tessera.serve_ray", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--host", default="127.0.0.1", help="the Ray HTTP proxy's address")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--address", default=None, help="an existing Ray cluster (default: start a local one)")
    ap.add_argument("--num-cpus", type=float, default=1.0, help="Ray CPUs reserved per replica")
    ap.add_argument("--no-affinity", action="store_true", help="Ray's default router instead of session hashing")
    ap.add_argument("--binary", default=None, help="the tessera binary on every node (default: TESSERA_BIN / build)")
    a = ap.parse_args(argv)
    import ray
    from ray import serve
    ray.init(address=a.address, include_dashboard=False)
    serve.start(http_options={"host": a.host, "port": a.port})
    serve.run(app(a.model, a.replicas, serve_args, a.binary, not a.no_affinity, a.num_cpus), name="tessera",
              route_prefix="/")
    print(f"tessera serve_ray: listening on http://{a.host}:{a.port} ({a.replicas} replicas)", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
