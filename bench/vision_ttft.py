"""Time to first token of an image + text prompt: Tessera (`tessera run --image`) vs llama.cpp's
multimodal library (mtmd, through llama-cpp-python's bindings) on the same random-weight checkpoint
bench/vision_peers.py writes and converts (run that first; this script converts nothing).

  python3 bench/vision_ttft.py [--shape gemma4v] [--precisions f32,bf16] [--repeat 3] [--threads 2]

The prompt: <bos>, one image (the tower's PNG), then 29 text ids (30 text tokens). Each
measurement is a fresh process holding /tmp/tessera-cpu.lock, engines alternated, medians over
--repeat processes. The time runs from the decoded image to the first generated token's logits,
cold (the first image the process encodes; model loading excluded):
- Tessera: `tessera run ... --max-new-tokens 1`, its printed EncodeImages time (preprocessing +
  encoder) plus its prefill time (the prompt with the soft tokens, ending in the first token).
- llama.cpp: mtmd_tokenize (its preprocessing) + mtmd_helper_eval_chunks (encoder and prefill of
  <bos> and the image) + llama_decode of the 29 text ids with the last logits + their argmax.
Precision bf16: Tessera converts the weights to bf16 and runs its matmuls at bf16; llama.cpp takes
the bf16 mmproj GGUF (the text GGUF stays f32: two small layers).
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from e2e.peers_venv import reexec_in_peers_venv  # noqa: E402

reexec_in_peers_venv("bench/vision_ttft.py")

from e2e import engines  # noqa: E402

TEXT_IDS = [100 + 7 * i for i in range(29)]  # outside the synthetic vocabulary's specials and markers
BOS = 2


def worker_llamacpp(a):
    import ctypes

    import llama_cpp
    import numpy as np
    from llama_cpp import mtmd_cpp as M
    from PIL import Image
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(a["text"].encode(), llama_cpp.llama_model_default_params())
    if not model:
        return {"error": f"cannot load {a['text']}"}
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 2048, 1024, 1024
    cp.n_threads, cp.n_threads_batch = a["threads"], a["threads"]
    lctx = llama_cpp.llama_init_from_model(model, cp)
    mp = M.mtmd_context_params_default()
    mp.use_gpu, mp.n_threads, mp.print_timings, mp.warmup = False, a["threads"], False, False
    ctx = M.mtmd_init_from_file(a["mmproj"].encode(), model, mp)
    if not lctx or not ctx:
        return {"error": "llama_init_from_model / mtmd_init_from_file failed"}
    img = Image.open(a["image"]).convert("RGB")
    data = img.tobytes()
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bmp = M.mtmd_bitmap_init(img.width, img.height, buf)
    bitmaps = (M.mtmd_bitmap_p_ctypes * 1)(bmp)
    marker = M.mtmd_default_marker()
    text = M.mtmd_input_text()
    text.text, text.text_len, text.add_special, text.parse_special = marker, len(marker), True, True
    chunks = M.mtmd_input_chunks_init()
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))

    t0 = time.perf_counter()
    if M.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1) != 0:
        return {"error": "mtmd_tokenize failed"}
    n_past = llama_cpp.llama_pos(0)
    if M.mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, cp.n_batch, False, ctypes.byref(n_past)) != 0:
        return {"error": "mtmd_helper_eval_chunks failed"}
    n = len(TEXT_IDS)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    for i, t in enumerate(TEXT_IDS):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, n_past.value + i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, i == n - 1
    batch.n_tokens = n
    if llama_cpp.llama_decode(lctx, batch) != 0:
        return {"error": "llama_decode failed"}
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(lctx, -1), shape=(n_vocab,))
    first = int(logits.argmax())
    ttft = time.perf_counter() - t0
    return {"ttft_s": ttft, "prompt_tokens": n_past.value + n, "first_token": first}


def run_llamacpp(spec, timeout):
    from vision_peers import worker_python
    cmd = [worker_python("llamacpp"), os.path.abspath(__file__), "--worker", json.dumps(spec)]
    rc, so, se, _, _ = engines.run_measured(cmd, timeout, env=dict(os.environ, TESSERA_E2E_NO_REEXEC="1"))
    for line in so.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]), foreign_cores=engines.LAST_FOREIGN[0])
    return {"error": f"worker rc {rc}: {engines.tail(se + so)}"}


def run_tessera(binary, hf, png, threads, precision, timeout):
    cmd = [binary, "run", "--model", hf, "--ids", ",".join(map(str, [BOS] + TEXT_IDS)), "--image", png,
           "--max-new-tokens", "1", "--max-chunk", "1024", "--threads", str(threads)]
    if precision == "bf16":
        cmd += ["--dtype", "bf16", "--matmul-precision", "bf16"]
    rc, so, se, _, _ = engines.run_measured(cmd, timeout)
    enc = re.search(r"encoded 1 image\(s\) into (\d+) soft tokens in ([\d.]+) s", se)
    pre = re.search(r"prefill (\d+) tokens in ([\d.]+) s", se)
    if rc != 0 or not enc or not pre:
        return {"error": f"tessera run rc {rc}: {engines.tail(se)}"}
    first = so.split()
    return {"ttft_s": float(enc.group(2)) + float(pre.group(2)), "encode_s": float(enc.group(2)),
            "prefill_s": float(pre.group(2)), "prompt_tokens": int(pre.group(1)),
            "first_token": int(first[0]) if first else None, "foreign_cores": engines.LAST_FOREIGN[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="gemma4v", choices=["gemma4v", "siglip"])
    ap.add_argument("--precisions", default="f32,bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="processes per engine and precision, alternating")
    ap.add_argument("--work", default=os.path.join(HERE, ".work", "vision"))
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "release", "tessera"))
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        try:
            r = worker_llamacpp(json.loads(args.worker))
        except Exception as e:  # reported in the results, never fatal to the other runs
            r = {"error": f"{type(e).__name__}: {e}"}
        print("RESULT " + json.dumps(r), flush=True)
        return
    base = os.path.join(args.work, args.shape)
    hf, png = os.path.join(base, "hf"), os.path.join(base, "image.png")
    text = os.path.join(base, "text.f32.gguf")
    for p in (hf, png, text):
        if not os.path.exists(p):
            sys.exit(f"{p} missing: run `python3 bench/vision_peers.py --only {args.shape} --prepare-only` first")
    precisions = [p for p in args.precisions.split(",") if p]
    res = {}
    for rep in range(args.repeat):
        for dt in precisions:
            runs = {"tessera": lambda: run_tessera(args.tessera, hf, png, args.threads, dt, args.timeout),
                    "llamacpp": lambda: run_llamacpp({"text": text, "mmproj": os.path.join(base, f"mmproj.{dt}.gguf"),
                                                      "image": png, "threads": args.threads}, args.timeout)}
            for eng, go in runs.items():
                r = go()
                res.setdefault((eng, dt), []).append(r)
                print(f"#{rep + 1} {eng} {dt}: {json.dumps(r)}", flush=True)
    print(f"\nload {os.getloadavg()}\n\n| engine | precision | TTFT s (median) | runs | prompt tokens | foreign load, cores |")
    print("|---|---|---|---|---|---|")
    for (eng, dt), rs in res.items():
        good = [r for r in rs if "error" not in r]
        med = "%.2f" % statistics.median(r["ttft_s"] for r in good) if good else "—"
        runs = ", ".join("%.2f" % r["ttft_s"] for r in good)
        foreign = ", ".join("%.2f" % r["foreign_cores"] for r in good)
        tokens = good[0]["prompt_tokens"] if good else "—"
        print(f"| {eng} | {dt} | {med} | {runs} | {tokens} | {foreign} |")


if __name__ == "__main__":
    main()
