"""Serving throughput (issue 21): `tessera serve` under 1, 4, 8 and 16 concurrent streams, and
llama.cpp's `llama-server` on the same GGUF with as many slots.

  python3 bench/serve_throughput.py [--quick] [--streams 1,4,8,16] [--repeat 3] [--threads 2]
                                    [--models f32,q4_0] [--prompt-tokens 64] [--decode-tokens 128]
                                    [--stagger 0] [--llama-server PATH] [--out bench/results/serve.md]

Models (bench/e2e/checkpoint.py, cached under bench/.work/ as bench/e2e_peers.py names them): the
Gemma-3-1B-shaped random checkpoint (f32, its synthetic tokenizer), the same shape written in bf16
(bf16: served with --dtype bf16, bf16 KV and attention), and GGUFs that `tessera quantize` writes from
the f32 one (q8_0, q4_0, q4_k_m); --quick: 2 layers, vocab 8192. llama-server (bench/setup_peers.sh
--llama-server builds it from the llama.cpp the other benches use; or --llama-server PATH) runs the
GGUF cells only. Each (engine, model, N) is its own server process with N slots (`--slots N` /
`-np N`), the same threads, context per slot prompt + decode + 16, warmed up by one request. The
engines take turns at each N (Tessera N, llama-server N, Tessera next N, ...), so a change in the
machine's other load falls on both sides of a pair rather than on one engine's whole series.

One run of a cell: N streaming completions sent at once from N client threads (raw HTTP, SSE), or
with --stagger T stream i sent i * T seconds after the first (prompts then join while others decode),
each a different prompt of random ids (fresh per run, so no prefix cache helps), greedy,
`max_tokens` = decode tokens (llama-server also gets ignore_eos; on these random models Tessera's
streams reached max_tokens anyway, and the tokens counted are the ones that came). Per run:
- aggregate decode tok/s: tokens that arrived while every stream was decoding (from the last first
  token to the first last token), per second of that window: the steady rate of N streams;
- overall tok/s: every generated token / (last token - send);
- time to first token per stream, inter-token gaps pooled over streams: p50 / p99 / max (the max is
  the longest stall a decoding stream saw, e.g. while prompts joined);
- other load: cores the rest of the machine kept busy meanwhile (machine busy time minus the
  server's and this client's).
The table gives the medians over --repeat runs, and each N's aggregate rate over N = 1's.
Measurements hold /tmp/tessera-cpu.lock (bench/e2e/engines.py cpu_lock) like the other benches."""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from e2e import checkpoint, engines  # noqa: E402

def _serve_process():
    """tessera/serve_process.py by its path: it needs nothing of the package, whose __init__ loads
    the compiled module (not built in a checkout that only builds the binary)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("tessera_serve_process",
                                                  os.path.join(ROOT, "python", "tessera", "serve_process.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ServeProcess


ServeProcess = _serve_process()

T0 = time.time()
QUANT = ("q8_0", "q4_0", "q4_k_m")
LLAMA_DEFAULT = os.path.join(ROOT, "bench", ".peers", "llama-server", "bin", "llama-server")


def log(msg):
    print(f"[{time.time() - T0:7.0f} s] {msg}", flush=True)


# --- servers ---------------------------------------------------------------------------------------------


def proc_cpu_seconds(pid):
    """utime + stime of a process (and its reaped children) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class LlamaServer:
    """llama-server on a free loopback port, ready once GET /health answers 200."""

    def __init__(self, binary, model, slots, ctx_per_slot, threads):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        # -c is the whole cache, split over the -np slots; no extra buffer types (-nr): llama.cpp's AMX
        # path crashes on quantized GGUFs on this VM (bench/PEERS.md), as the other benches run it.
        self.argv = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "-np", str(slots),
                     "-c", str(slots * ctx_per_slot), "-t", str(threads), "-tb", str(threads), "-nr",
                     "--no-webui", "-fa", "on"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def __enter__(self):
        self.log = open(os.path.join(ROOT, "bench", ".work", "llama-server.log"), "w")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}); see bench/.work/llama-server.log")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError("llama-server did not become healthy in 600 s")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    @property
    def pid(self):
        return self.proc.pid


def start_server(engine, model, n, ctx, args):
    if engine == "tessera":
        extra = ["--kv-dtype", "bf16", "--attention-precision", "bf16"] if model.endswith(".gguf") else []
        if model.rstrip("/").endswith("hf-bf16"):  # the bf16 checkpoint stays bf16 in memory
            extra = ["--dtype", "bf16", "--kv-dtype", "bf16", "--attention-precision", "bf16"]
        return ServeProcess(model, "--slots", n, "--max-context", ctx, "--threads", args.threads, *extra,
                            binary=args.tessera, start_timeout=900)
    return LlamaServer(args.llama_server, model, n, ctx, args.threads)


# --- one run -----------------------------------------------------------------------------------------------


def stream_one(url, body, out):
    """One streaming completion; out gets the send time, each token's arrival time, and any error."""
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=1800)
    out["times"], out["sent"] = [], time.perf_counter()
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return
        for line in resp:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                break
            obj = json.loads(payload)
            if obj.get("usage"):
                out["usage"] = obj["usage"].get("completion_tokens")
            ch = obj.get("choices") or []
            if ch and ch[0].get("text"):
                now = time.perf_counter()
                # One SSE chunk is one token unless the server says otherwise (token_ids extension).
                out["times"] += [now] * len(ch[0].get("token_ids") or [0])
    except Exception as e:  # noqa: BLE001 -- reported in the results
        out["error"] = repr(e)
    finally:
        conn.close()


def one_run(server, engine, prompts, decode, stagger=0.0):
    outs = [{} for _ in prompts]
    bodies = [{"prompt": p, "max_tokens": decode, "temperature": 0, "stream": True, "return_token_ids": True,
               "stream_options": {"include_usage": True}} for p in prompts]
    if engine == "llama":
        for b in bodies:
            b["ignore_eos"] = True
            b["cache_prompt"] = False
    def send(i, body, out):
        time.sleep(i * stagger)
        stream_one(server.url, body, out)
    threads = [threading.Thread(target=send, args=(i, b, o)) for i, (b, o) in enumerate(zip(bodies, outs))]
    busy0, srv0, own0 = engines.busy_seconds(), proc_cpu_seconds(server.pid), time.process_time()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    own = proc_cpu_seconds(server.pid) - srv0 + time.process_time() - own0
    foreign = max(0.0, (engines.busy_seconds() - busy0 - own) / wall)
    errors = [o["error"] for o in outs if "error" in o]
    if errors or any(not o["times"] for o in outs):
        return {"error": errors[0] if errors else "a stream produced no tokens"}
    firsts = [o["times"][0] for o in outs]
    lasts = [o["times"][-1] for o in outs]
    lo, hi = max(firsts), min(lasts)
    window = [t for o in outs for t in o["times"] if lo < t <= hi]
    gaps = [b - a for o in outs for a, b in zip(o["times"], o["times"][1:])]
    tokens = sum(len(o["times"]) for o in outs)
    # The server's own count (usage) against the chunks counted: they differ if a chunk held several
    # tokens without saying so (then the rates above undercount).
    usage = sum(o["usage"] for o in outs) if all(o.get("usage") is not None for o in outs) else None
    return {"agg_decode": len(window) / (hi - lo) if hi > lo and window else None,
            "overall": tokens / (max(lasts) - t0), "tokens": tokens,
            "ttft_p50": statistics.median(f - o["sent"] for f, o in zip(firsts, outs)),
            "ttft_p99": pct([f - o["sent"] for f, o in zip(firsts, outs)], 99),
            "itl_p50": statistics.median(gaps) if gaps else None, "itl_p99": pct(gaps, 99) if gaps else None,
            "itl_max": max(gaps) if gaps else None,
            "foreign": foreign, "wall": wall, "usage_tokens": usage}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def median_of(runs):
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    out = {}
    for k in good[0]:
        vals = [r[k] for r in good if r.get(k) is not None]
        out[k] = statistics.median(vals) if vals else None
    out["foreign"] = max(r["foreign"] for r in good)
    out["runs"] = len(good)
    return out


def prompts_for(n, length, vocab, avoid, seed):
    """n prompts of BOS + random ids clear of the special and multimodal ids."""
    rng = random.Random(seed)

    def draw():
        while (t := rng.randrange(16, vocab)) in avoid:
            pass
        return t
    return [[2] + [draw() for _ in range(length - 1)] for _ in range(n)]


# --- the cells --------------------------------------------------------------------------------------------


def prepare(args):
    layers, vocab = (2, 8192) if args.quick else (26, 262144)
    tag = f"gemma3-L{layers}-V{vocab}"
    base = os.path.join(args.work, tag)
    hf = os.path.join(base, "hf")
    cfg = checkpoint.SHAPES["gemma3"](layers=layers, vocab=vocab)
    info = checkpoint.make_checkpoint(hf, cfg, log=log) if "f32" in args.models or any(
        m in QUANT for m in args.models) else None
    models = {}
    for m in args.models:
        if m == "f32":
            models[m] = hf
            continue
        if m == "bf16":
            models[m] = os.path.join(base, "hf-bf16")
            checkpoint.make_checkpoint(models[m], cfg, log=log, dtype="bf16")
            continue
        out = os.path.join(base, f"model.{m}.tessera.gguf")
        if not os.path.exists(out):
            log(f"tessera quantize --type {m} -> {out}")
            subprocess.run([args.tessera, "quantize", "--model", hf, "--type", m, "--out", out + ".part"], check=True)
            os.replace(out + ".part", out)
        models[m] = out
    with open(os.path.join(hf if info else models["bf16"], "config.json")) as f:
        avoid = checkpoint.special_ids(json.load(f))
    return tag, models, vocab, avoid, info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 layers, vocab 8192 (minutes; development)")
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="f32,q4_0", help="f32, bf16 and/or GGUF types tessera quantize writes")
    ap.add_argument("--engines", default="tessera,llama")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--stagger", type=float, default=0.0,
                    help="seconds between the streams' sends (0: all at once)")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "release", "tessera"))
    ap.add_argument("--llama-server", default=LLAMA_DEFAULT,
                    help="llama.cpp's llama-server binary (bash bench/setup_peers.sh --llama-server builds it)")
    ap.add_argument("--work", default=os.path.join(HERE, ".work"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "serve.md"))
    args = ap.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the running cell's server is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.models = [m for m in args.models.split(",") if m]
    for m in args.models:
        if m not in ("f32", "bf16") and m not in QUANT:
            sys.exit(f"--models: {m} is not f32, bf16 or one of {', '.join(QUANT)}")
    streams = [int(x) for x in args.streams.split(",")]
    eng = [e for e in args.engines.split(",") if e]
    if "llama" in eng and not os.access(args.llama_server, os.X_OK):
        log(f"llama-server not found at {args.llama_server} (bash bench/setup_peers.sh --llama-server): "
            "Tessera only")
        eng.remove("llama")
    os.makedirs(args.work, exist_ok=True)
    tag, models, vocab, avoid, info = prepare(args)
    ctx = args.prompt_tokens + args.decode_tokens + 16
    rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    log(f"{tag}: models {list(models)}, engines {eng}, streams {streams}, threads {args.threads}, "
        f"prompt {args.prompt_tokens} + decode {args.decode_tokens} tokens, tree {rev}")
    results = []
    raw = os.path.join(args.work, f"serve-{'quick' if args.quick else 'full'}-{time.strftime('%Y%m%d-%H%M%S')}.json")

    def save():  # after every cell, so a run cut short keeps what it measured
        with open(raw, "w") as f:
            json.dump({"tag": tag, "tree": rev, "args": vars(args), "results": results}, f, indent=1)
    for mname, path in models.items():
        for n in streams:
            for e in eng:  # the engines alternate at each N (see the docstring)
                if e == "llama" and not path.endswith(".gguf"):
                    continue  # llama-server runs GGUFs (the checkpoints are Tessera's own format)
                with engines.cpu_lock() as lk, start_server(e, path, n, ctx, args) as server:
                    warm = one_run(server, e, prompts_for(1, 8, vocab, avoid, seed=999), 4)
                    runs = []
                    for r in range(args.repeat):
                        seed = zlib.crc32(f"{n}-{r}".encode())  # the same prompts for every engine and model
                        runs.append(one_run(server, e, prompts_for(n, args.prompt_tokens, vocab, avoid, seed),
                                            args.decode_tokens, args.stagger))
                    cell = {"model": mname, "engine": e, "streams": n, "lock_waited": lk.waited, **median_of(runs),
                            "all_runs": runs, "warm_error": warm.get("error")}
                results.append(cell)
                save()
                log(f"{mname} {e} N={n}: " + ("ERROR " + str(cell.get("error")) if "error" in cell else
                    f"agg decode {fmt(cell['agg_decode'])} tok/s, overall {fmt(cell['overall'])} tok/s, "
                    f"ttft p50 {fmt(cell['ttft_p50'], 2)} s, itl p50 {fmt(1e3 * cell['itl_p50'])} ms, "
                    f"other load {cell['foreign']:.2f} cores, tokens {cell['tokens']} (usage {cell['usage_tokens']})"))
    table = render(tag, rev, args, results, streams)
    with open(args.out, "a") as f:
        f.write(table)
    print(table)
    log(f"raw results: {raw}; table appended to {args.out}")


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def render(tag, rev, args, results, streams):
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    lines = [f"\n## {tag}, {time.strftime('%Y-%m-%d %H:%M')} (tree {rev})\n",
             f"{cpu}, {os.cpu_count()} cores, {args.threads} threads; prompt {args.prompt_tokens} tokens, "
             f"decode {args.decode_tokens} tokens per stream, greedy; medians of {args.repeat} runs. Command: "
             f"`python3 bench/serve_throughput.py{' --quick' if args.quick else ''} --streams {args.streams} "
             f"--models {','.join(args.models)} --engines {args.engines} --repeat {args.repeat} "
             f"--prompt-tokens {args.prompt_tokens} --decode-tokens {args.decode_tokens}"
             f"{f' --stagger {args.stagger:g}' if args.stagger else ''}`\n",
             "| model | engine | streams | agg. decode tok/s | × 1 stream | overall tok/s | TTFT p50 / p99 (s) "
             "| ITL p50 / p99 / max (ms) | other load (cores) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    single = {(r["model"], r["engine"]): r.get("agg_decode") for r in results if r["streams"] == 1}
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['engine']} | {r['streams']} | error: {r['error'][:80]} | | | | | |")
            continue
        base = single.get((r["model"], r["engine"]))
        ratio = fmt(r["agg_decode"] / base, 2) + "×" if base and r["agg_decode"] else "—"
        lines.append(f"| {r['model']} | {'tessera serve' if r['engine'] == 'tessera' else 'llama-server'} | "
                     f"{r['streams']} | {fmt(r['agg_decode'])} | {ratio} | {fmt(r['overall'])} | "
                     f"{fmt(r['ttft_p50'], 2)} / {fmt(r['ttft_p99'], 2)} | {fmt(1e3 * r['itl_p50'])} / "
                     f"{fmt(1e3 * r['itl_p99'])} / {fmt(1e3 * r['itl_max']) if r.get('itl_max') else '—'} | "
                     f"{r['foreign']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
