"""A Gemma-4-12B-shaped Q4_0 GGUF, written directly, run by `tessera run` at a 32k context (issue 20).

    .venv/bin/python bench/gguf_12b.py                       # write (~6.7 GB), run, print the table, delete
    .venv/bin/python bench/gguf_12b.py --layers 2 --prompt-tokens 64 --decode 8   # a quick small version
    .venv/bin/python bench/gguf_12b.py --write-only          # only the file (bench/.work/gguf_12b/), kept

The model: Gemma 4 at the 12B shape, random weights, every matrix Q4_0. Geometry (48 layers, every
6th and the last full attention with 1 KV head of 512 and V = K, sliding layers 8 KV heads of 256 and
a window of 1024) is src/model/reference_configs.cc Gemma4_12BCache; the remaining widths (hidden
3840, 16 query heads, intermediate 15360, vocabulary 262144, final soft cap 30, tied embeddings,
proportional RoPE rotating a quarter of the full layers' head, thetas 1e6 / 1e4, context 262144) are
the Gemma-4-12B text config as bench/e2e/checkpoint.py and transformers' Gemma4UnifiedTextConfig
defaults give it. The metadata is what llama.cpp's converter writes for `gemma4` (keys and tensor
names of its Gemma4Model), so Tessera's GGUF loader maps it like a converted file. The file carries
no tokenizer (tokenizer.ggml.model = "none": llama.cpp makes dummy tokens; runs use --ids).

Weights are written tensor by tensor, each in row chunks (never the model in memory, no f32 copy on
disk): Q4_0 blocks of random nibbles with small positive f16 scales, norms and layer scales 1.0 in
f32, and the rope_freqs factors the converter writes for the partial rotation.

The run: `tessera run --model FILE --ids ... --max-context 32768 --no-stop` through
bench/e2e/worker.py (peak RSS of the CLI alone, RUSAGE_CHILDREN), under the shared CPU lock
(bench/e2e/engines.py run_measured). Around it: the read bandwidth (bench/e2e/roofline.py, best
probe of the run), the KV plan (`tessera inspect` at the run's max chunk and KV dtype) and the
file size. Reported: load, prefill and decode speed, decode against its roofline (bytes per token =
every tensor in the file, the tied embedding once as the LM head, plus the KV read at the mean
decode context, over the bandwidth) and peak RSS against file + KV plan. Targets (issue 20):
peak RSS <= (file + KV plan) * 1.10 and decode >= 75% of the roofline.

The prompt: a single --ids argument is limited by the kernel to 128 KiB, so the prompt ids are
random three-digit ids (100..999, clear of the special tokens): 32000 of them fit. --prompt-tokens
shortens the prompt while keeping --max-context (and so the same KV plan): a full 32k prefill of
this model takes long on few cores (--estimate prints the estimate from a small run).

--llamacpp also runs the prompt through llama.cpp (llama-cpp-python in bench/.peers/venv) on the same
file and reports how many greedy tokens agree: an independent reading of the file.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from e2e import engines, roofline  # noqa: E402

QK = 32          # Q4_0 block: 32 weights
Q4_0_BYTES = 18  # f16 scale + 16 bytes of nibbles
FILE_TYPE_Q4_0 = 2  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_0

SHAPE = dict(layers=48, hidden=3840, heads=16, ff=15360, vocab=262144, swa_kv=8, swa_hd=256,
             full_kv=1, full_hd=512, window=1024, rot_fraction=0.25, theta=1e6, theta_swa=1e4,
             softcap=30.0, eps=1e-6, context=262144)
SCALE_RANGE = (0.002, 0.006)  # f16 block scales: weights d * (q - 8) have a std near 0.02
CHUNK_BYTES = 64 << 20        # rows generated and written per step


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def layer_is_full(i, layers):
    """Gemma4_12BCache's pattern: every 6th layer and the last one attend to the full context."""
    return (i + 1) % 6 == 0 or i == layers - 1


# --- the tensors --------------------------------------------------------------------------------------
def tensor_list(layers):
    """[(name, shape outermost first, 'q4_0' | 'f32', fill)] in the converter's order; fill is a
    float for f32 vectors (or 'rope_freqs'), None for random Q4_0."""
    s = SHAPE
    H = s["hidden"]
    out = [("token_embd.weight", (s["vocab"], H), "q4_0", None),
           ("rope_freqs.weight", (s["full_hd"] // 2,), "f32", "rope_freqs"),
           ("output_norm.weight", (H,), "f32", 1.0)]
    for i in range(layers):
        p = f"blk.{i}."
        full = layer_is_full(i, layers)
        D = s["full_hd"] if full else s["swa_hd"]
        kv = s["full_kv"] if full else s["swa_kv"]
        out += [(p + "attn_norm.weight", (H,), "f32", 1.0),
                (p + "attn_q.weight", (s["heads"] * D, H), "q4_0", None),
                (p + "attn_k.weight", (kv * D, H), "q4_0", None)]
        if not full:  # full layers use V = K (attention_k_eq_v): no attn_v, as the converter writes them
            out.append((p + "attn_v.weight", (kv * D, H), "q4_0", None))
        out += [(p + "attn_output.weight", (H, s["heads"] * D), "q4_0", None),
                (p + "attn_q_norm.weight", (D,), "f32", 1.0),
                (p + "attn_k_norm.weight", (D,), "f32", 1.0),
                (p + "post_attention_norm.weight", (H,), "f32", 1.0),
                (p + "ffn_norm.weight", (H,), "f32", 1.0),
                (p + "ffn_gate.weight", (s["ff"], H), "q4_0", None),
                (p + "ffn_up.weight", (s["ff"], H), "q4_0", None),
                (p + "ffn_down.weight", (H, s["ff"]), "q4_0", None),
                (p + "post_ffw_norm.weight", (H,), "f32", 1.0),
                (p + "layer_output_scale.weight", (1,), "f32", 1.0)]
    return out


def tensor_nbytes(shape, kind):
    if kind == "f32":
        return 4 * int(np.prod(shape))
    rows, cols = shape
    assert cols % QK == 0, (shape, "Q4_0 rows must be whole blocks")
    return rows * (cols // QK) * Q4_0_BYTES


def f32_values(shape, fill):
    n = int(np.prod(shape))
    if fill == "rope_freqs":  # rotated pairs get factor 1, the rest 1e30 (left in place), as the converter
        rotated = int(SHAPE["full_hd"] * SHAPE["rot_fraction"] / 2)
        return np.array([1.0] * rotated + [1e30] * (n - rotated), dtype=np.float32)
    return np.full(n, fill, dtype=np.float32)


def q4_0_rows(bits, rows, cols):
    """`rows` rows of random Q4_0 blocks as raw bytes: an f16 scale drawn uniformly among the f16
    values in SCALE_RANGE (positive f16 bit patterns are ordered like their values), random nibbles."""
    nb = rows * (cols // QK)
    lo, hi = (int(v) for v in np.array(SCALE_RANGE, dtype=np.float16).view(np.uint16))
    blocks = np.empty((nb, Q4_0_BYTES), dtype=np.uint8)
    scales = (lo + bits.random_raw(nb) % np.uint64(hi - lo + 1)).astype(np.uint16)
    blocks[:, :2] = scales.view(np.uint8).reshape(nb, 2)
    blocks[:, 2:] = bits.random_raw(2 * nb).view(np.uint8).reshape(nb, 16)
    return blocks


# --- the file -----------------------------------------------------------------------------------------
def add_metadata(w, layers):
    import gguf
    s = SHAPE
    a = "gemma4"
    w.add_name("tessera bench: Gemma-4-12B-shaped, random Q4_0")
    w.add_file_type(FILE_TYPE_Q4_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_uint32(f"{a}.block_count", layers)
    w.add_uint32(f"{a}.context_length", s["context"])
    w.add_uint32(f"{a}.embedding_length", s["hidden"])
    w.add_uint32(f"{a}.feed_forward_length", s["ff"])
    w.add_uint32(f"{a}.attention.head_count", s["heads"])
    w.add_array(f"{a}.attention.head_count_kv",
                [s["full_kv"] if layer_is_full(i, layers) else s["swa_kv"] for i in range(layers)])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", s["eps"])
    w.add_uint32(f"{a}.attention.key_length", s["full_hd"])
    w.add_uint32(f"{a}.attention.value_length", s["full_hd"])
    w.add_uint32(f"{a}.attention.key_length_swa", s["swa_hd"])
    w.add_uint32(f"{a}.attention.value_length_swa", s["swa_hd"])
    w.add_uint32(f"{a}.attention.sliding_window", s["window"])
    w.add_array(f"{a}.attention.sliding_window_pattern", [not layer_is_full(i, layers) for i in range(layers)])
    w.add_uint32(f"{a}.attention.shared_kv_layers", 0)
    w.add_uint32(f"{a}.embedding_length_per_layer_input", 0)
    w.add_float32(f"{a}.rope.freq_base", s["theta"])
    w.add_float32(f"{a}.rope.freq_base_swa", s["theta_swa"])
    w.add_uint32(f"{a}.rope.dimension_count", s["full_hd"])
    w.add_uint32(f"{a}.rope.dimension_count_swa", s["swa_hd"])
    w.add_float32(f"{a}.final_logit_softcapping", s["softcap"])
    # No tokenizer: llama.cpp then makes vocab_size dummy tokens (its "none" model); Tessera needs one only for --prompt.
    w.add_uint32(f"{a}.vocab_size", s["vocab"])
    w.add_string("tokenizer.ggml.model", "none")
    w.add_uint32("tokenizer.ggml.bos_token_id", 2)
    w.add_uint32("tokenizer.ggml.eos_token_id", 1)
    w.add_uint32("tokenizer.ggml.padding_token_id", 0)


def expected_size(layers):
    """Data bytes of the file (each tensor padded to the 32-byte alignment) plus a header margin."""
    pad = lambda n: (n + 31) // 32 * 32  # noqa: E731
    return sum(pad(tensor_nbytes(shape, kind)) for _, shape, kind, _ in tensor_list(layers)) + (1 << 20)


def write_tensor(fout, bits, shape, kind, fill):
    if kind == "f32":
        f32_values(shape, fill).tofile(fout)
        return
    rows, cols = shape
    step = max(1, CHUNK_BYTES // ((cols // QK) * Q4_0_BYTES))
    for r0 in range(0, rows, step):
        q4_0_rows(bits, min(step, rows - r0), cols).tofile(fout)


def write_data(w, specs, seed):
    """Header, metadata, tensor infos, then each tensor's data aligned as GGUFWriter.write_tensor_data
    aligns it, generated and written a chunk at a time."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    bits = np.random.SFC64(seed)  # raw 64-bit draws: the fastest numpy source of random bytes
    t0 = time.time()
    for name, shape, kind, fill in specs:
        w.write_padding(fout, fout.tell())
        write_tensor(fout, bits, shape, kind, fill)
        w.write_padding(fout, tensor_nbytes(shape, kind))
        if name.endswith("ffn_down.weight") or name == "token_embd.weight":
            log(f"  {name} done ({fout.tell() / 2**30:.2f} GiB, {time.time() - t0:.0f} s)")
    w.close()


def write_gguf(path, layers, seed):
    """Streams the model into `path` (via a temporary name, renamed when complete)."""
    import gguf
    need = expected_size(layers)
    free = shutil.disk_usage(os.path.dirname(path)).free
    if free < need + (2 << 30):
        sys.exit(f"gguf_12b: writing {path} needs {need / 2**30:.1f} GiB and 2 GiB to spare; "
                 f"{free / 2**30:.1f} GiB free")
    tmp = path + ".part"
    w = gguf.GGUFWriter(tmp, "gemma4")
    add_metadata(w, layers)
    specs = tensor_list(layers)
    for name, shape, kind, _ in specs:
        n = tensor_nbytes(shape, kind)
        if kind == "f32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), n)
        else:  # byte shape [rows, row bytes]; gguf turns it into the element shape of raw_dtype
            w.add_tensor_info(name, (shape[0], n // shape[0]), np.dtype(np.uint8), n,
                              raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    try:
        write_data(w, specs, seed)
    except BaseException:  # a partial file would be reused by the next run: never leave one
        w.close()
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, path)
    return os.path.getsize(path)


def check_file(path, layers):
    """Reads the file back with gguf-py (an independent reader): tensor names, types, shapes, sizes."""
    import gguf
    r = gguf.GGUFReader(path)
    got = {t.name: t for t in r.tensors}
    specs = tensor_list(layers)
    if len(got) != len(specs):
        sys.exit(f"gguf_12b: {path} holds {len(got)} tensors, expected {len(specs)}")
    for name, shape, kind, _ in specs:
        t = got.get(name)
        want = gguf.GGMLQuantizationType.Q4_0 if kind == "q4_0" else gguf.GGMLQuantizationType.F32
        if t is None or t.tensor_type != want or tuple(int(x) for x in reversed(t.shape)) != shape \
                or int(t.n_bytes) != tensor_nbytes(shape, kind):
            sys.exit(f"gguf_12b: {path}: tensor {name} is not {kind} {shape} as written")
    # gguf-py's Q4_0 dequantization of a few rows: finite, within +-8 scales, spread as the random nibbles imply
    for name in ("token_embd.weight", f"blk.{layers - 1}.ffn_down.weight"):
        t = got[name]
        x = gguf.quants.dequantize(np.asarray(t.data[:4]), gguf.GGMLQuantizationType.Q4_0)
        lim = 8 * float(np.float16(SCALE_RANGE[1]))
        if not (np.all(np.isfinite(x)) and np.abs(x).max() <= lim and 0.01 < x.std() < 0.03):
            sys.exit(f"gguf_12b: {path}: {name} rows dequantize to max {np.abs(x).max()}, std {x.std()} "
                     f"(expected <= {lim}, std near 0.02)")
    return sum(int(t.n_bytes) for t in r.tensors)


# --- the run ------------------------------------------------------------------------------------------
def inspect(binary, path, chunk, context, kv_dtype):
    """(KV plan bytes at `context`, per-layer [(kind, kv_heads, head_dim, window)]) from `tessera inspect`."""
    p = subprocess.run([binary, "inspect", "--model", path, "--max-chunk", str(chunk)], capture_output=True,
                       text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"gguf_12b: tessera inspect failed: {p.stderr.strip()[-600:]}")
    layers, kv = [], None
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].isdigit() and parts[1] in ("sliding", "full"):
            layers.append((parts[1], int(parts[2]), int(parts[3]), int(parts[4])))
        if len(parts) >= 4 and parts[0] == str(context):
            kv = float(parts[1 if kv_dtype == "f32" else 2]) * 2**20
    if kv is None:
        sys.exit(f"gguf_12b: `tessera inspect` prints the KV plan at 1024, 4096, 8192, 32768 and 131072 "
                 f"keys only; --max-context {context} is not one of them")
    return kv, layers, p.stdout


def kv_read_bytes(layers, context, elem):
    """KV bytes one decode step reads: K and V of every layer, sliding layers capped at the window."""
    return sum(2 * kv * hd * (min(context, w) if kind == "sliding" else context) * elem
               for kind, kv, hd, w in layers)


def bandwidth(threads):
    """Best of one-stream and `threads`-stream numpy read probes (bench/e2e/roofline.py), GB/s."""
    with engines.cpu_lock():
        one, _ = roofline.one_stream()
        multi = roofline.multi_stream(threads)
    return max(one, multi)


RUN_LINE = re.compile(r"prefill (\d+) tokens in ([\d.]+) s .*decode (\d+) tokens in ([\d.]+) s")
LOAD_LINE = re.compile(r"loaded .* in ([\d.]+) s")


def prompt_ids(a):
    return np.random.default_rng(a.seed + 1).integers(100, 1000, size=a.prompt_tokens).tolist()


def run_tessera(binary, path, a):
    ids = prompt_ids(a)
    cmd = [binary, "run", "--model", path, "--ids", ",".join(map(str, ids)), "--max-new-tokens", str(a.decode),
           "--max-context", str(a.max_context), "--max-chunk", str(a.max_chunk), "--threads", str(a.threads),
           "--kv-dtype", a.kv_dtype, "--no-stop"]
    if a.kv_dtype == "bf16" and a.bf16_attention:
        cmd += ["--attention-precision", "bf16"]
    if a.matmul_precision:
        cmd += ["--matmul-precision", a.matmul_precision]
    w = [sys.executable, os.path.join(HERE, "e2e", "worker.py"), json.dumps({"engine": "exec", "cmd": cmd})]
    rc, wo, we, _, wall = engines.run_measured(w, a.timeout)
    line = [x for x in wo.splitlines() if x.startswith("RESULT ")]
    if rc != 0 or not line:
        sys.exit(f"gguf_12b: worker rc {rc}: {engines.tail(we + wo)}")
    r = json.loads(line[-1][len("RESULT "):])
    m, ld = RUN_LINE.search(r["stderr"]), LOAD_LINE.search(r["stderr"])
    if r["rc"] != 0 or not m:
        sys.exit(f"gguf_12b: tessera run rc {r['rc']}: {engines.tail(r['stderr'], 6)}")
    return dict(prefill_tokens=int(m.group(1)), prefill_s=float(m.group(2)), decode_tokens=int(m.group(3)),
                decode_s=float(m.group(4)), load_s=float(ld.group(1)) if ld else None,
                maxrss_bytes=r["maxrss_kb"] * 1024, wall_s=wall, foreign_cores=engines.LAST_FOREIGN[0],
                tokens=[int(t) for t in r["stdout"].split()], cmd=" ".join(cmd[:5] + [f"<{len(ids)} ids>"] + cmd[6:]))


def run_llamacpp(path, a):
    """The same prompt through llama.cpp (llama-cpp-python in the peers venv, bench/e2e/worker.py's
    run): its greedy tokens, an independent reading of the file. Runs this script under the peers'
    interpreter (--llamacpp-worker)."""
    if not os.path.exists(a.peers_python):
        return {"error": f"{a.peers_python} missing (bash bench/setup_peers.sh)"}
    job = dict(engine="llamacpp", model=path, ids=prompt_ids(a), decode=a.decode, threads=a.threads,
               context=a.max_context, kv_type=30 if a.kv_dtype == "bf16" else 0,  # GGML_TYPE_BF16 / F32
               extra_bufts=a.llamacpp_extra_bufts)
    rc, so, se, rss, wall = engines.run_measured([a.peers_python, os.path.abspath(__file__), "--llamacpp-worker",
                                                  json.dumps(job, separators=(",", ":"))], a.timeout)
    line = [x for x in so.splitlines() if x.startswith("RESULT ")]
    if rc != 0 or not line:
        return {"error": f"rc {rc}: {engines.tail(se + so)}"}
    return json.loads(line[-1][len("RESULT "):])


def llamacpp_worker(job):
    """In the peers venv: bench/e2e/worker.py's llama.cpp run, by default without llama.cpp's extra
    CPU buffer types: its AMX Q4_0 matmul crashes (SIGSEGV) on this file on this machine."""
    from e2e import worker
    r = worker.run_llamacpp(job)
    r["maxrss_kb"] = worker.vm_hwm_kb()
    print("RESULT " + json.dumps(r), flush=True)


def agreement(ours, theirs):
    lead = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
    return f"{lead}/{min(len(ours), len(theirs))} leading tokens equal ({sum(x == y for x, y in zip(ours, theirs))} positions)"


def report(a, path, file_bytes, weight_bytes, kv_plan, layers, bw, r):
    steps = r["decode_tokens"] - 1  # the first token comes from the prefill's logits
    dec = steps / r["decode_s"] if steps > 0 and r["decode_s"] > 0 else float("nan")
    ctx = r["prefill_tokens"] + r["decode_tokens"] // 2
    kv_read = kv_read_bytes(layers, ctx, 2 if a.kv_dtype == "bf16" else 4)
    roof = bw * 1e9 / (weight_bytes + kv_read)
    budget = file_bytes + kv_plan
    rss = r["maxrss_bytes"]
    G = 2**30
    rows = [("model", f"Gemma-4-12B shape, {len(layers)} layers, random Q4_0 ({os.path.basename(path)})"),
            ("file", f"{file_bytes / G:.2f} GiB ({file_bytes} bytes)"),
            ("KV plan", f"{kv_plan / G:.2f} GiB ({a.kv_dtype}, max context {a.max_context}, max chunk {a.max_chunk})"),
            ("load", f"{r['load_s']:.2f} s" if r["load_s"] is not None else "—"),
            ("prefill", f"{r['prefill_tokens']} tokens in {r['prefill_s']:.1f} s "
                        f"({r['prefill_tokens'] / r['prefill_s']:.1f} tok/s)"),
            ("decode", f"{steps} steps in {r['decode_s']:.2f} s: {dec:.3f} tok/s at context ~{ctx}"),
            ("bytes / token", f"{(weight_bytes + kv_read) / G:.3f} GiB (weights {weight_bytes / G:.3f} + "
                              f"KV read {kv_read / 2**20:.1f} MiB)"),
            ("bandwidth", f"{bw:.1f} GB/s (best probe of this run, {a.threads} threads)"),
            ("roofline", f"{roof:.3f} tok/s; decode at {100 * dec / roof:.0f}% (target >= 75%)"),
            ("peak RSS", f"{rss / G:.2f} GiB vs file + KV plan {budget / G:.2f} GiB: "
                         f"{100 * (rss / budget - 1):+.1f}% (target <= +10%)"),
            ("other load", f"{r['foreign_cores']:.2f} cores busy with other processes during the run"),
            ("command", r["cmd"])]
    w = max(len(k) for k, _ in rows)
    print("\n| " + "measure".ljust(w) + " | value |\n|" + "-" * (w + 2) + "|-------|")
    for k, v in rows:
        print(f"| {k.ljust(w)} | {v} |")
    return dict(file_bytes=file_bytes, weight_bytes=weight_bytes, kv_plan_bytes=kv_plan, kv_read_bytes=kv_read,
                bandwidth_gbs=bw, decode_tok_s=dec, roofline_tok_s=roof, roofline_pct=100 * dec / roof,
                rss_over_budget_pct=100 * (rss / budget - 1), **{k: v for k, v in r.items() if k != "tokens"})


def linear_flops_per_token(layers):
    """Multiply-adds x 2 of every decoder matrix for one token (the LM head runs on the last token only)."""
    return sum(2 * shape[0] * shape[1] for name, shape, kind, _ in tensor_list(layers)
               if kind == "q4_0" and name != "token_embd.weight")


def attention_flops(layers, prompt):
    """QK^T and PV of a causal prefill of `prompt` tokens: 4 * heads * head_dim per (query, key) pair;
    a sliding layer's query sees at most `window` keys."""
    s, total = SHAPE, 0
    for i in range(layers):
        if layer_is_full(i, layers):
            pairs = prompt * (prompt + 1) // 2
            hd = s["full_hd"]
        else:
            w = s["window"]
            pairs = min(prompt, w) * (min(prompt, w) + 1) // 2 + max(0, prompt - w) * w
            hd = s["swa_hd"]
        total += 4 * s["heads"] * hd * pairs
    return total


def estimate(r, layers_run, prompt_full):
    """The full model's prefill of `prompt_full` tokens from this run's rate (Linear and attention
    FLOPs over the prefill seconds), assuming attention runs at the Linear rate: a lower bound when
    the long-context attention is slower than the matmuls."""
    done = linear_flops_per_token(layers_run) * r["prefill_tokens"] + attention_flops(layers_run, r["prefill_tokens"])
    rate = done / r["prefill_s"]
    lin = linear_flops_per_token(SHAPE["layers"]) * prompt_full
    att = attention_flops(SHAPE["layers"], prompt_full)
    t = (lin + att) / rate
    print(f"\nestimated {prompt_full}-token prefill at {SHAPE['layers']} layers: ~{t / 60:.0f} min "
          f"({rate / 1e9:.0f} GFLOP/s measured over {r['prefill_tokens']} tokens at {layers_run} layers; "
          f"{lin / 1e12:.0f} TFLOP Linear + {att / 1e12:.0f} TFLOP attention at that rate)")
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=SHAPE["layers"], help="decoder layers (48: the full model)")
    ap.add_argument("--out", help="GGUF path (default bench/.work/gguf_12b/gemma4-12b-q4_0-L<layers>.gguf)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--write-only", action="store_true", help="write (and check) the file, run nothing; implies --keep")
    ap.add_argument("--keep", action="store_true", help="keep the file afterwards (default: delete it when "
                                                        "this script wrote it; an existing file is reused and kept)")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "release", "tessera"))
    ap.add_argument("--prompt-tokens", type=int, default=32000, help="prompt length (same KV plan at any length)")
    ap.add_argument("--decode", type=int, default=16, help="generated tokens (decode steps + 1)")
    ap.add_argument("--max-context", type=int, default=32768)
    ap.add_argument("--max-chunk", type=int, default=256, help="tessera run --max-chunk (its default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--bf16-attention", action="store_true", help="with bf16 KV: --attention-precision bf16")
    ap.add_argument("--matmul-precision", choices=["f32", "bf16", "int8"],
                    help="tessera run --matmul-precision (default: the CLI's); bf16 on AMX CPUs runs the prefill "
                         "on dequantized bf16 tiles, int8 with one activation byte (decode is the same either way)")
    ap.add_argument("--timeout", type=int, default=6 * 3600, help="seconds for the measured run")
    ap.add_argument("--estimate", action="store_true", help="also estimate the full 32k-token, 48-layer prefill")
    ap.add_argument("--llamacpp", action="store_true",
                    help="also run the prompt through llama.cpp (peers venv) and compare greedy tokens")
    ap.add_argument("--peers-python", default=os.path.join(HERE, ".peers", "venv", "bin", "python"))
    ap.add_argument("--llamacpp-extra-bufts", action="store_true",
                    help="let llama.cpp use its extra CPU buffer types (AMX): crashes on this file here")
    ap.add_argument("--llamacpp-worker", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    if a.llamacpp_worker:
        return llamacpp_worker(json.loads(a.llamacpp_worker))
    if a.layers < 1 or a.prompt_tokens < 1 or a.decode < 2 or a.prompt_tokens + a.decode > a.max_context:
        sys.exit("gguf_12b: need --layers >= 1, --prompt-tokens >= 1, --decode >= 2 and "
                 "prompt + decode <= --max-context")
    if 4 * a.prompt_tokens > 128 * 1024:
        sys.exit("gguf_12b: --prompt-tokens above 32768 does not fit one --ids argument (128 KiB)")
    a.keep = a.keep or a.write_only
    path = a.out or os.path.join(HERE, ".work", "gguf_12b", f"gemma4-12b-q4_0-L{a.layers}.gguf")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    wrote = not os.path.exists(path)
    try:
        if wrote:
            log(f"writing {path} ({expected_size(a.layers) / 2**30:.2f} GiB, {a.layers} layers)")
            t = time.time()
            write_gguf(path, a.layers, a.seed)
            log(f"written in {time.time() - t:.0f} s")
        else:
            log(f"reusing {path}")
        weight_bytes = check_file(path, a.layers)
        file_bytes = os.path.getsize(path)
        log(f"checked with gguf-py: {file_bytes / 2**30:.2f} GiB, tensor data {weight_bytes / 2**30:.2f} GiB")
        if a.write_only:
            return
        if not os.access(a.tessera, os.X_OK):
            sys.exit(f"gguf_12b: {a.tessera} is not built (cmake --build build/release --target tessera)")
        kv_plan, layers, _ = inspect(a.tessera, path, a.max_chunk, a.max_context, a.kv_dtype)
        bw = bandwidth(a.threads)
        log(f"KV plan {kv_plan / 2**30:.2f} GiB; bandwidth {bw:.1f} GB/s; running {a.prompt_tokens} + "
            f"{a.decode} tokens ...")
        r = run_tessera(a.tessera, path, a)
        bw = max(bw, bandwidth(a.threads))
        out = report(a, path, file_bytes, weight_bytes, kv_plan, layers, bw, r)
        if a.estimate:
            out["estimated_full_prefill_s"] = estimate(r, a.layers, 32000)
        if a.llamacpp:
            lc = run_llamacpp(path, a)
            out["llamacpp"] = lc.get("error") or agreement(r["tokens"], lc["tokens"])
            if "error" not in lc:
                lc_dec = (a.decode - 1) / lc["decode_s"]
                out["llamacpp"] += (f"; llama.cpp prefill {a.prompt_tokens / lc['prefill_s']:.1f} tok/s, decode "
                                    f"{lc_dec:.3f} tok/s, peak RSS {lc['maxrss_kb'] / 2**20:.2f} GiB")
            print(f"\nllama.cpp on the same file: {out['llamacpp']}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    finally:
        if wrote and not a.keep:
            for p in (path, path + ".part"):
                if os.path.exists(p):
                    os.remove(p)
            log(f"deleted {path}")


if __name__ == "__main__":
    main()
