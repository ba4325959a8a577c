"""Vision encoders: Tessera vs llama.cpp's multimodal encoder (mtmd) vs onnxruntime on the same
random-weight towers. One command, after `bash bench/setup_peers.sh` and building
`tessera_bench_vision`:

  python3 bench/vision_peers.py [--only siglip|gemma4v] [--engines tessera,llamacpp,onnxruntime]
                                [--reps 3] [--threads 2] [--prepare-only]

(it re-executes itself with bench/.peers/venv/bin/python, the peers' venv). Two towers:
- siglip: Gemma 3 (`Gemma3ForConditionalGeneration`) with the SigLIP-So400m tower (27 layers,
  hidden 1152, 16 heads, MLP 4304, patch 14, image 896 -> 4096 patches, 256 soft tokens) and a
  2-layer text model of Gemma-3-4B width (2560; the projector's output width);
- gemma4v: Gemma 4 (`Gemma4ForConditionalGeneration`) with transformers' default
  Gemma4VisionConfig (16 layers, hidden 768, 12 heads, MLP 3072, patch 16, pooling 3) at the
  default budget of 280 soft tokens: a 960 x 672 image, 60 x 42 = 2520 patches, no padding.
Checkpoints (bench/e2e/checkpoint.py's writer: f32, N(0, 0.02) from a fixed seed) and each peer's
conversion (llama.cpp convert_hf_to_gguf.py: the text GGUF and the --mmproj GGUF, f32 and bf16;
the transformers vision path pixel_values -> projector output exported with torch.onnx.export,
opset 17) are written under bench/.work/vision once and reused.

Each measurement is its own process holding /tmp/tessera-cpu.lock, same thread count; the figure
is the median of --reps timed encodes after one untimed one. llama.cpp is timed around
mtmd_encode_chunk (its encoder alone, the image already preprocessed by mtmd_tokenize, which is
timed separately); onnxruntime around InferenceSession.run on the transformers processor's
pixel_values; Tessera by tessera_bench_vision (EncodePixels on the same pixels, EncodeImages on
the PNG). GFLOP/s use one FLOP count for all (tower_flops: matmuls + attention products).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from e2e.peers_venv import reexec_in_peers_venv  # noqa: E402

reexec_in_peers_venv("bench/vision_peers.py")

import numpy as np  # noqa: E402

from e2e import checkpoint, engines, roofline  # noqa: E402

T0 = time.time()
ENGINES = ("tessera", "llamacpp", "onnxruntime")


def log(msg):
    print(f"[{time.time() - T0:7.0f} s] {msg}", flush=True)


# --- checkpoints -------------------------------------------------------------------------------------
# The text model only sets the projector's output width (and lets llama.cpp load the projector): a
# small vocabulary with the multimodal markers moved inside it keeps its embedding small.
VOCAB = 8192


def gemma3_siglip_config():
    return {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "boi_token_index": 6, "eoi_token_index": 7, "image_token_index": 8,
        "mm_tokens_per_image": 256, "tie_word_embeddings": True, "dtype": "float32",
        "text_config": {
            "model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
            "intermediate_size": 2560, "vocab_size": VOCAB, "sliding_window": 1024,
            "layer_types": ["sliding_attention", "full_attention"], "query_pre_attn_scalar": 256,
            "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
            "max_position_embeddings": checkpoint.MAX_POS, "tie_word_embeddings": True,
            "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "dtype": "float32"},
        "vision_config": {
            "model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
            "num_hidden_layers": 27, "num_attention_heads": 16, "patch_size": 14, "image_size": 896,
            "num_channels": 3, "layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
            "vision_use_head": False, "dtype": "float32"},
    }


def gemma4_vision_config():
    return {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
        "tie_word_embeddings": True, "dtype": "float32", "audio_config": None,
        "boi_token_id": 6, "eoi_token_id": 7, "image_token_id": 8, "video_token_id": 9, "boa_token_id": 10,
        "eoa_token_index": 11, "audio_token_id": 12,
        "text_config": {
            "model_type": "gemma4_text", "hidden_size": 2560, "num_hidden_layers": 2,
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
            "per_layer_config": {"1": {"head_dim": 512}}, "attention_k_eq_v": False,
            "intermediate_size": 2560, "vocab_size": VOCAB, "vocab_size_per_layer_input": VOCAB,
            "hidden_size_per_layer_input": 0, "sliding_window": 512,
            "layer_types": ["sliding_attention", "full_attention"], "num_kv_shared_layers": 0,
            "enable_moe_block": False, "final_logit_softcapping": 30.0,
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
            "max_position_embeddings": checkpoint.MAX_POS, "tie_word_embeddings": True,
            "use_bidirectional_attention": "vision",
            "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "dtype": "float32"},
        "vision_config": {"model_type": "gemma4_vision", "dtype": "float32"},  # transformers' defaults
    }


SHAPES = {"siglip": gemma3_siglip_config, "gemma4v": gemma4_vision_config}
# Pieces the synthetic vocabulary carries at the config's marker ids: llama.cpp's Gemma 3 path wraps
# the image in `<start_of_image>` / `<end_of_image>` and looks them up by text (mtmd_tokenize fails
# without them).
MARKERS = {"siglip": {6: "<start_of_image>", 7: "<end_of_image>", 8: "<image_soft_token>"}}
# The image each tower encodes (width, height): 896^2 for SigLIP; for Gemma 4 a size whose patch
# grid (60 x 42, a multiple of the 3 x 3 pooling) is exactly the 280-token budget, so no engine
# computes padding rows and the aspect-preserving resize leaves it as it is.
IMAGE_WH = {"siglip": (896, 896), "gemma4v": (960, 672)}


def vision_geometry(cfg):
    """The tower's shape from a saved config.json (transformers' defaults filled in)."""
    v = cfg["vision_config"]
    t = checkpoint.text_config(cfg)
    g = {"family": cfg["model_type"], "layers": v["num_hidden_layers"], "hidden": v["hidden_size"],
         "intermediate": v["intermediate_size"], "heads": v["num_attention_heads"],
         "patch": v["patch_size"], "text_hidden": t["hidden_size"]}
    if cfg["model_type"] == "gemma3":
        g.update(head_dim=v["hidden_size"] // v["num_attention_heads"], kv_heads=v["num_attention_heads"],
                 gated=False, patches=(v["image_size"] // v["patch_size"]) ** 2,
                 soft_tokens=cfg.get("mm_tokens_per_image", 256))
    else:
        g.update(head_dim=v["head_dim"], kv_heads=v["num_key_value_heads"], gated=True,
                 pooling=v["pooling_kernel_size"], soft_tokens=280, patches=280 * v["pooling_kernel_size"] ** 2)
    return g


def tower_flops(g):
    """Multiply-adds x 2 of one image: patch embedding, per layer q/k/v/o + MLP (+ gate) + the two
    attention products over all patch pairs, and the projector to the text width."""
    n, d, f = g["patches"], g["hidden"], g["intermediate"]
    q, kv = g["heads"] * g["head_dim"], g["kv_heads"] * g["head_dim"]
    per_layer = 2 * n * d * (q + 2 * kv) + 2 * n * q * d + 2 * n * d * f * (3 if g["gated"] else 2) \
        + 2 * 2 * n * n * q
    embed = 2 * n * 3 * g["patch"] ** 2 * d
    proj = 2 * g["soft_tokens"] * d * g["text_hidden"]
    return embed + g["layers"] * per_layer + proj


def write_image(path, wh, seed=3):
    """A deterministic RGB PNG: smooth gradients plus noise (content does not change the cost)."""
    from PIL import Image
    w, h = wh
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / w * 255, y / h * 255, (x + y) / (w + h) * 255], -1) + rng.normal(0, 20, (h, w, 3))
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path)


def image_processor(shape, cfg):
    if shape == "siglip":
        from transformers import Gemma3ImageProcessor
        return Gemma3ImageProcessor(size={"height": 896, "width": 896}, do_pan_and_scan=False)
    from transformers import Gemma4ImageProcessor
    v = cfg["vision_config"]
    return Gemma4ImageProcessor(patch_size=v["patch_size"], pooling_kernel_size=v["pooling_kernel_size"],
                                max_soft_tokens=280)


def pixel_inputs(shape, cfg, png):
    """The transformers processor's arrays for the PNG: {"pixel_values", ["image_position_ids"]}."""
    from PIL import Image
    img = Image.open(png).convert("RGB")
    p = image_processor(shape, cfg)
    if shape == "siglip":
        return {"pixel_values": p(images=[img], return_tensors="np")["pixel_values"].astype(np.float32)}
    out = p(images=[img], return_tensors="np")
    return {"pixel_values": out["pixel_values"].astype(np.float32),
            "image_position_ids": out["image_position_ids"].astype(np.int64)}


def prepare_checkpoint(shape, work):
    base = os.path.join(work, shape)
    hf = os.path.join(base, "hf")
    cfg = SHAPES[shape]()
    info = checkpoint.make_checkpoint(hf, cfg, log=log, markers=MARKERS.get(shape))
    with open(os.path.join(hf, "config.json")) as f:
        saved = json.load(f)
    if not os.path.exists(os.path.join(hf, "preprocessor_config.json")):
        # llama.cpp's --mmproj conversion reads image_mean / image_std from it; Tessera reads it too
        image_processor(shape, saved).save_pretrained(hf)
    png = os.path.join(base, "image.png")
    if not os.path.exists(png):
        write_image(png, IMAGE_WH[shape])
    pix = os.path.join(base, "pixels.npz")
    if not os.path.exists(pix):
        arrays = pixel_inputs(shape, saved, png)
        np.savez(pix, **arrays)
        for k, v in arrays.items():  # 2-D f32 copies for tessera_bench_vision (its .npy reader's form)
            np.save(os.path.join(base, k + ".npy"), v.reshape(-1, v.shape[-1]).astype(np.float32))
    return base, hf, saved, png, pix, info


# --- peers' preparation ------------------------------------------------------------------------------
# llama.cpp's Gemma 3 projector converter takes the original checkpoints' names (transformers
# renames them on load); the bench's writer stores transformers' in-memory names.
LLAMA_RENAMES = {"siglip": (("model.vision_tower.", "vision_tower.vision_model."),
                            ("model.multi_modal_projector.", "multi_modal_projector."))}


def renamed_view(hf, out, renames):
    """out/: hf's checkpoint with tensor names rewritten by prefix (data copied, other files linked)."""
    dst = os.path.join(out, "model.safetensors")
    if os.path.exists(dst):
        return out
    os.makedirs(out, exist_ok=True)
    src = os.path.join(hf, "model.safetensors")
    with open(src, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        new = {}
        for k, v in header.items():
            for a, b in renames:
                if k.startswith(a):
                    k = b + k[len(a):]
            new[k] = v
        hb = json.dumps(new, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        with open(dst + ".part", "wb") as g:
            g.write(len(hb).to_bytes(8, "little") + hb)
            while chunk := f.read(1 << 26):
                g.write(chunk)
    os.replace(dst + ".part", dst)
    for name in os.listdir(hf):
        if name != "model.safetensors" and not os.path.lexists(os.path.join(out, name)):
            os.symlink(os.path.join(hf, name), os.path.join(out, name))
    return out


def convert_gguf(hf, out, mmproj, outtype):
    if os.path.exists(out):
        return out, None
    conv = os.path.join(engines.SDIST, "convert_hf_to_gguf.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(engines.SDIST, "gguf-py") + ":" + engines.SDIST)
    cmd = [sys.executable, conv, hf, "--outtype", outtype, "--outfile", out] + (["--mmproj"] if mmproj else [])
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    log(f"convert_hf_to_gguf {'--mmproj ' if mmproj else ''}--outtype {outtype}: rc {p.returncode}, "
        f"{time.time() - t:.0f} s")
    if p.returncode != 0 or not os.path.exists(out) or os.path.getsize(out) < 1 << 20:
        why = engines.tail(p.stderr + p.stdout)
        if os.path.exists(out):  # a metadata-only file (no tensor matched) is a failure too
            os.replace(out, out + ".empty")
        return None, why
    return out, None


class _Features:
    """The vision path transformers runs for get_image_features, as one traceable module: pixels
    (and Gemma 4's patch positions) to the projector's soft tokens, padding rows included."""

    @staticmethod
    def build(model, gemma4):
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model.model

            def forward(self, pixel_values, image_position_ids=None):
                if gemma4:
                    h = self.m.vision_tower(pixel_values=pixel_values, pixel_position_ids=image_position_ids)
                    return self.m.embed_vision(inputs_embeds=h.last_hidden_state)
                return self.m.get_image_features(pixel_values).pooler_output

        return M().eval()


def export_onnx(shape, hf, pix, out):
    if os.path.exists(out):
        return out, None
    import torch
    from transformers import AutoModelForImageTextToText
    t = time.time()
    model = AutoModelForImageTextToText.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager")
    gemma4 = shape == "gemma4v"
    m = _Features.build(model, gemma4)
    a = np.load(pix)
    args = (torch.from_numpy(a["pixel_values"]),) + ((torch.from_numpy(a["image_position_ids"]),) if gemma4 else ())
    names = ["pixel_values"] + (["image_position_ids"] if gemma4 else [])
    with torch.no_grad():
        ref = m(*args).float().numpy()
        tmp = out + ".part"
        torch.onnx.export(m, args, tmp, input_names=names, output_names=["features"], opset_version=17,
                          dynamo=False)
    os.replace(tmp, out)
    np.save(out + ".ref.npy", ref.reshape(-1, ref.shape[-1]))
    log(f"onnx export {shape}: {time.time() - t:.0f} s, features {ref.shape}")
    return out, None


# --- workers (each measurement in its own process: `vision_peers.py --worker JSON`) -----------------
def _vmhwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _timed(reps, fn):
    fn()  # untimed: first-touch of weights and scratch
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts


def worker_llamacpp(a):
    """llama.cpp's multimodal library (mtmd) through llama-cpp-python's bindings: the text GGUF for
    the context, the mmproj GGUF for the encoder; the image chunk is encoded with mtmd_encode_chunk."""
    import ctypes
    import llama_cpp
    from llama_cpp import mtmd_cpp as M
    from PIL import Image
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(a["text"].encode(), mp)
    if not model:
        return {"error": f"cannot load {a['text']}"}
    cp = M.mtmd_context_params_default()
    cp.use_gpu, cp.n_threads, cp.print_timings, cp.warmup = False, a["threads"], False, False
    ctx = M.mtmd_init_from_file(a["mmproj"].encode(), model, cp)
    if not ctx:
        return {"error": f"mtmd_init_from_file failed for {a['mmproj']} (projector not supported?)"}
    img = Image.open(a["image"]).convert("RGB")
    data = img.tobytes()
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bmp = M.mtmd_bitmap_init(img.width, img.height, buf)
    chunks = M.mtmd_input_chunks_init()
    text = M.mtmd_input_text()
    marker = M.mtmd_default_marker()
    text.text, text.text_len, text.add_special, text.parse_special = marker, len(marker), False, True
    bitmaps = (M.mtmd_bitmap_p_ctypes * 1)(bmp)
    t = time.perf_counter()
    rc = M.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1)
    tokenize_s = time.perf_counter() - t
    if rc != 0:
        return {"error": f"mtmd_tokenize rc {rc}"}
    chunk = None
    for i in range(M.mtmd_input_chunks_size(chunks)):
        c = M.mtmd_input_chunks_get(chunks, i)
        if M.mtmd_input_chunk_get_type(c) == M.MTMD_INPUT_CHUNK_TYPE_IMAGE:
            chunk = c
    if chunk is None:
        return {"error": "no image chunk after mtmd_tokenize"}
    n_tok = M.mtmd_input_chunk_get_n_tokens(chunk)
    img_tokens = M.mtmd_input_chunk_get_tokens_image(chunk)
    nx, ny = M.mtmd_image_tokens_get_nx(img_tokens), M.mtmd_image_tokens_get_ny(img_tokens)
    errs = []
    ts = _timed(a["reps"], lambda: errs.append(M.mtmd_encode_chunk(ctx, chunk)))
    if any(errs):
        return {"error": f"mtmd_encode_chunk rc {errs}"}
    n_embd = llama_cpp.llama_model_n_embd(model)
    out = np.ctypeslib.as_array(M.mtmd_get_output_embd(ctx), shape=(n_tok * n_embd,)).reshape(n_tok, n_embd)
    if a.get("features"):
        np.save(a["features"], out.copy())
    return {"seconds": ts, "tokenize_s": tokenize_s, "soft_tokens": n_tok, "grid": [nx, ny],
            "maxrss_kb": _vmhwm_kb()}


def worker_onnxruntime(a):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = a["threads"], 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(a["onnx"], so, providers=["CPUExecutionProvider"])
    arrays = np.load(a["pixels"])
    feeds = {i.name: arrays[i.name] for i in sess.get_inputs()}
    out = []
    ts = _timed(a["reps"], lambda: out.append(sess.run(None, feeds)[0]))
    f = out[-1].reshape(-1, out[-1].shape[-1])
    if a.get("features"):
        np.save(a["features"], f)
    return {"seconds": ts, "soft_tokens": int(f.shape[0]), "maxrss_kb": _vmhwm_kb(), "ort": ort.__version__}


def worker_main(spec):
    a = json.loads(spec)
    try:
        r = {"llamacpp": worker_llamacpp, "onnxruntime": worker_onnxruntime}[a["engine"]](a)
    except Exception as e:  # reported in the table's notes, never fatal to the other engines
        r = {"error": f"{type(e).__name__}: {e}"}
    print("RESULT " + json.dumps(r), flush=True)


# The package each peer's worker imports. The peers' venv holds llama.cpp's build, the project's
# .venv onnxruntime and torch (for the export); a worker runs in whichever of the two has its package,
# so one run can alternate all engines.
WORKER_MODULE = {"llamacpp": "llama_cpp", "onnxruntime": "onnxruntime"}


def worker_python(engine):
    import importlib.util
    if importlib.util.find_spec(WORKER_MODULE[engine]) is not None:
        return sys.executable
    from e2e.peers_venv import VENV_PY
    return VENV_PY if os.path.exists(VENV_PY) else sys.executable


def run_worker(spec, timeout):
    cmd = [worker_python(spec["engine"]), os.path.abspath(__file__), "--worker", json.dumps(spec)]
    rc, so, se, rss, wall = engines.run_measured(cmd, timeout, env=dict(os.environ, TESSERA_E2E_NO_REEXEC="1"))
    for line in so.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["foreign_cores"] = engines.LAST_FOREIGN[0]
            return r
    return {"error": f"worker rc {rc}: {engines.tail(se + so)}"}


def run_tessera(binary, hf, png, pix_dir, reps, threads, precisions, out_json, features, timeout):
    cmd = [binary, "--model", hf, "--image", png, "--reps", str(reps), "--threads", str(threads),
           "--precisions", ",".join(precisions), "--json", out_json, "--features", features,
           "--pixels", os.path.join(pix_dir, "pixel_values.npy")]
    pos = os.path.join(pix_dir, "image_position_ids.npy")
    if os.path.exists(pos):
        cmd += ["--positions", pos]
    rc, so, se, rss, wall = engines.run_measured(cmd, timeout)
    if rc != 0 or not os.path.exists(out_json):
        return {"error": f"tessera_bench_vision rc {rc}: {engines.tail(se + so)}"}
    with open(out_json) as f:
        r = json.load(f)
    r.update(stdout=so, maxrss_kb=rss, foreign_cores=engines.LAST_FOREIGN[0])
    return r


# --- driver ------------------------------------------------------------------------------------------
def closeness(ref_path, got_path):
    """max |got - ref| / max |ref| over the soft tokens, or None when either is missing / misshapen."""
    if not (os.path.exists(ref_path) and os.path.exists(got_path)):
        return None
    ref, got = np.load(ref_path), np.load(got_path)
    if ref.shape != got.shape:
        return f"shapes {got.shape} vs {ref.shape}"
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def fmt(x, nd=2):
    return "—" if x is None else f"{x:.{nd}f}"


def prepare_peers(shape, base, hf, png, pix, args, eng):
    """{run name: worker spec} of the peers that prepared, and notes on those that did not."""
    notes, models = [], {}
    if "llamacpp" in eng:
        text, why = convert_gguf(hf, os.path.join(base, "text.f32.gguf"), False, "f32")
        if not text:
            notes.append(f"llama.cpp text GGUF: {why}")
        src = renamed_view(hf, os.path.join(base, "hf-llama"), LLAMA_RENAMES[shape]) if shape in LLAMA_RENAMES else hf
        for dt in args.precisions:
            mm, why = convert_gguf(src, os.path.join(base, f"mmproj.{dt}.gguf"), True, dt)
            if text and mm:
                models[f"llamacpp-{dt}"] = {"engine": "llamacpp", "text": text, "mmproj": mm, "image": png}
            elif not mm:
                notes.append(f"llama.cpp mmproj {dt}: {why}")
    onnx, why = export_onnx(shape, hf, pix, os.path.join(base, "model.onnx"))  # also the reference features
    if onnx and "onnxruntime" in eng:
        models["onnxruntime-f32"] = {"engine": "onnxruntime", "onnx": onnx, "pixels": pix}
    elif not onnx:
        notes.append(f"onnx export: {why}")
    return models, notes


def run_all(shape, base, hf, png, models, args, eng):
    """Every engine --repeat times, alternating; Tessera's JSON results and the peers' by run name."""
    res, tess = {k: [] for k in models}, []
    for rep in range(args.repeat):
        if "tessera" in eng:
            r = run_tessera(args.tessera, hf, png, base, args.reps, args.threads, args.precisions,
                            os.path.join(base, "tessera.json"), os.path.join(base, "tessera.features.npy"),
                            args.timeout)
            tess.append(r)
            log(f"{shape} #{rep + 1} tessera: " + (r["error"] if "error" in r else
                " | ".join(f"{x['what']} {x['precision']} {x['seconds']:.2f} s" for x in r["rows"])
                + f", foreign load {r['foreign_cores']:.2f} cores"))
        for k, spec in models.items():
            spec = dict(spec, threads=args.threads, reps=args.reps,
                        features=os.path.join(base, f"{k}.features.npy"))
            r = run_worker(spec, args.timeout)
            res[k].append(r)
            log(f"{shape} #{rep + 1} {k}: " + (r["error"] if "error" in r else
                f"median {statistics.median(r['seconds']):.2f} s of {[round(x, 2) for x in r['seconds']]}, "
                f"{r['soft_tokens']} soft tokens, foreign load {r['foreign_cores']:.2f} cores"))
    return tess, res


def table_rows(tess, res, precisions, notes):
    """[(engine, precision, median s/image)]: Tessera's two calls, then each peer."""
    good_t = [r for r in tess if "error" not in r]
    notes += [f"tessera: {r['error']}" for r in tess if "error" in r]
    rows = []
    for what in ("EncodePixels", "EncodeImages"):
        for dt in precisions:
            xs = [x["seconds"] for r in good_t for x in r["rows"] if x["what"] == what and x["precision"] == dt]
            rows.append((f"Tessera {what}", dt, statistics.median(xs) if xs else None))
    names = {"llamacpp": "llama.cpp mtmd_encode_chunk", "onnxruntime": "onnxruntime (transformers export)"}
    for k, rs in res.items():
        good = [r for r in rs if "error" not in r]
        sec = statistics.median(statistics.median(r["seconds"]) for r in good) if good else None
        rows.append((names[k.split("-")[0]], k.split("-")[1], sec))
        notes += [f"{k}: {r['error']}" for r in rs if "error" in r]
    return rows, good_t


def measure_shape(shape, args, eng, log_probe):
    base, hf, cfg, png, pix, info = prepare_checkpoint(shape, args.work)
    g = vision_geometry(cfg)
    flops = tower_flops(g)
    log(f"{shape}: checkpoint {hf} ({info['total_bytes'] / 2**30:.2f} GiB f32), {flops / 1e9:.1f} GFLOP per image")
    models, notes = prepare_peers(shape, base, hf, png, pix, args, eng)
    if args.prepare_only:
        return None
    tess, res = run_all(shape, base, hf, png, models, args, eng)
    bw, gemm = log_probe()
    gemm = gemm if gemm == gemm else None  # nan when the probe's GEMM is unavailable
    rows, good_t = table_rows(tess, res, args.precisions, notes)
    fma = statistics.median(r["fma_peak_gflops"] for r in good_t) if good_t else None
    dot = statistics.median(r["bf16_dot_peak_gflops"] for r in good_t) if good_t else None
    amx = statistics.median(r.get("amx_bf16_peak_gflops", 0) for r in good_t) if good_t else None
    # bf16 against AMX's tile peak where the machine has it (Tessera's Linear runs there), else the dot product's
    peak = {"f32": fma or gemm, "bf16": amx or dot or (2 * (fma or gemm) if fma or gemm else None)}
    tess_s = {dt: s for n, dt, s in rows if n == "Tessera EncodePixels"}
    title = "Gemma 3 SigLIP-So400m, 896 x 896" if shape == "siglip" else "Gemma 4 vision, 280 soft tokens"
    lines = [f"### {shape}: {title}", "",
             f"{g['patches']} patches, {g['soft_tokens']} soft tokens of width {g['text_hidden']}; "
             f"{flops / 1e9:.1f} GFLOP per image; {args.threads} threads; peaks: f32 FMA {fmt(fma, 1)}, "
             f"bf16 dot {fmt(dot, 1)}, AMX bf16 {fmt(amx, 1)} GFLOP/s (tessera_bench_vision's probes; bf16 rows "
             f"against {'AMX' if amx else 'the dot product'}), numpy f32 GEMM {fmt(gemm, 1)} "
             f"GFLOP/s; medians of {args.repeat} process(es) x {args.reps} encodes", "",
             "| engine | precision | s / image | GFLOP/s | % of peak | Tessera EncodePixels faster by |",
             "|---|---|---|---|---|---|"]
    for n, dt, sec in rows:
        gf = flops / sec / 1e9 if sec else None
        sp = sec / tess_s[dt] if tess_s.get(dt) and sec else None
        lines.append(f"| {n} | {dt} | {fmt(sec)} | {fmt(gf, 1)} | {fmt(100 * gf / peak[dt] if gf and peak[dt] else None, 0)} | "
                     f"{'—' if n.startswith('Tessera') or not sp else f'{sp:.2f}x'} |")
    lines.append("")
    ref = os.path.join(base, "model.onnx.ref.npy")
    for k in ["tessera"] + list(models):
        c = closeness(ref, os.path.join(base, f"{k}.features.npy"))
        if c is not None:
            lines.append(f"- {k} soft tokens vs transformers (f32 eager): max |diff| / max |ref| = "
                         f"{c if isinstance(c, str) else f'{c:.2e}'}")
    for k, rs in res.items():
        for r in [r for r in rs if "grid" in r][:1]:
            lines.append(f"- {k}: mtmd_tokenize (its preprocessing) {r['tokenize_s']:.2f} s, "
                         f"{r['soft_tokens']} soft tokens, grid {r['grid']}")
    lines += [f"- note: {n}" for n in notes]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(SHAPES))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--precisions", default="f32,bf16", help="Tessera's and llama.cpp's (onnxruntime: f32 only)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3, help="timed encodes per process (after one untimed)")
    ap.add_argument("--repeat", type=int, default=1, help="processes per engine, alternating")
    ap.add_argument("--work", default=os.path.join(HERE, ".work", "vision"))
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "release", "tessera_bench_vision"))
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--prepare-only", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args.worker)
    args.precisions = [p for p in args.precisions.split(",") if p]
    eng = [e for e in args.engines.split(",") if e]
    for e in eng:
        if e not in ENGINES:
            sys.exit(f"unknown engine {e}; choose from {','.join(ENGINES)}")
    os.makedirs(args.work, exist_ok=True)
    rev = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    log(f"tree {rev}, threads {args.threads}, engines {eng}, precisions {args.precisions}")

    def probe():
        with engines.cpu_lock():
            bw, gemm = roofline.one_stream()
        log(f"probe: read bandwidth {bw:.1f} GB/s, numpy f32 GEMM {gemm:.1f} GFLOP/s")
        return bw, gemm

    tables = []
    for shape in ([args.only] if args.only else list(SHAPES)):
        t = measure_shape(shape, args, eng, probe)
        if t:
            print("\n" + t + "\n", flush=True)
            tables.append(t)
    if tables:
        out = os.path.join(args.work, f"results-{time.strftime('%Y%m%d-%H%M%S')}.md")
        with open(out, "w") as f:
            f.write(f"tree {rev}, {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()}\n\n" + "\n\n".join(tables))
        log(f"done; tables in {out}")


if __name__ == "__main__":
    main()
