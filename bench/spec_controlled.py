"""Speculative decoding end to end on an E2B-shaped model with a drafter whose acceptance is set by a knob.

  .venv/bin/python bench/spec_controlled.py [--layers 10] [--scales 1,4,16] [--context 512] [--reps 5] [--ordered]

The main model: bench/e2e/checkpoint.py's `gemma4_e2b` (E2B's real widths, `--layers` layers, vocabulary
262144, random bf16 weights), as in bench/results/speculative.md. The drafter: a `gemma4_assistant` at the
main model's width built as python/scripts/make_tiny_drafters.py builds its "copy" drafter: pre_projection
passes the main model's embedding of the last seen token through (identity on its first half, zero on the
hidden-state half), its two layers (sliding, full; E2B's attention geometry, MLP 2048) have their
outputs scaled down, and its LM head is the main model's embedding: it proposes the last seen token again.

The knob: the main model's token embedding multiplied by `scale`. With tied embeddings the residual copy
of the input token then outweighs the layers by that factor, so the main model repeats its last token more
often, and the copy drafter is accepted more often (scale 1: the checkpoint as written, whose embedding is
made small so that the layers pick the token, bench/e2e/checkpoint.py embedding_std). Each scale is a
directory whose model.safetensors.index.json maps every tensor to the base file (a symlink) but the
embedding, which lives in a file of its own: no copy of the 3 GB. The drafter's LM head is the base
embedding (a scale multiplies every row, so the drafter's argmax is the same for every scale).

--ordered gives the drafter the E2B/E4B assistants' clustered head (use_ordered_embeddings, docs/speculative.md):
2048 clusters of 128 tokens (a seeded random permutation), each centroid the mean of its tokens' LM-head rows,
the top 32 scored. The copy token's own cluster then usually ranks among the top 32 (its row's self product
outweighs the others' noise), so the drafter still mostly proposes the last seen token, at 1/64 of the head.

Each scale then runs build/release/tessera_bench_speculative --model MAIN --draft DRAFTER at bf16 under
/tmp/tessera-cpu.lock: the verification step for k = 1..8 against one decode step, and generation of
48 tokens with k = 0 (plain), 1, 2, 3, 4, 8 drafts: tokens/s, acceptance, the draft step's cost and
whether the tokens equal plain decoding's.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from e2e import checkpoint  # noqa: E402

EMBED = "model.embed_tokens.weight"
DRAFT_MLP = 2048


def read_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)), 8 + n


def write_safetensors(path, tensors):
    """tensors: [(name, uint16 bf16 bits or float32 array)] in order."""
    header, off = {}, 0
    names = {np.dtype(np.uint16): "BF16", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
    for name, a in tensors:
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path + ".part", "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        for _, a in tensors:
            f.write(np.ascontiguousarray(a).tobytes())
    os.replace(path + ".part", path)


def bf16(a):
    return checkpoint.to_bf16(np.ascontiguousarray(a, dtype=np.float32))


def base_embedding(base_file):
    h, start = read_header(base_file)
    e = h[EMBED]
    assert e["dtype"] == "BF16", e
    m = np.memmap(base_file, dtype=np.uint16, mode="r", offset=start + e["data_offsets"][0], shape=tuple(e["shape"]))
    return h, m


def index(d, weight_map):
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=0)


def make_scaled(base, out, scale):
    """out/: config.json, base.safetensors -> base file, embed.safetensors (the embedding x scale), index."""
    if os.path.exists(os.path.join(out, "model.safetensors.index.json")):
        return out
    os.makedirs(out, exist_ok=True)
    base_file = os.path.join(base, "model.safetensors")
    h, emb = base_embedding(base_file)
    scaled = np.empty(emb.shape, dtype=np.uint16)
    for r in range(0, emb.shape[0], 16384):  # in row blocks: the f32 copy of the whole table is 1.6 GB
        f32 = (emb[r:r + 16384].astype(np.uint32) << 16).view(np.float32)
        scaled[r:r + 16384] = bf16(f32 * scale)
    write_safetensors(os.path.join(out, "embed.safetensors"), [(EMBED, scaled)])
    for f in ("config.json",):
        with open(os.path.join(base, f)) as src, open(os.path.join(out, f), "w") as dst:
            dst.write(src.read())
    link = os.path.join(out, "base.safetensors")
    if not os.path.lexists(link):
        os.symlink(os.path.abspath(base_file), link)
    index(out, {n: ("embed.safetensors" if n == EMBED else "base.safetensors") for n in h if n != "__metadata__"})
    return out


CENTROIDS, CENTROID_TOP_K = 2048, 32


def drafter_config(main_cfg, ordered=False):
    import transformers as T
    text = dict(main_cfg)
    for k in ("architectures", "model_type", "dtype"):
        text.pop(k, None)
    text.update(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"], intermediate_size=DRAFT_MLP,
                use_double_wide_mlp=False, hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
                num_kv_shared_layers=2, enable_moe_block=False)
    extra = dict(use_ordered_embeddings=True, num_centroids=CENTROIDS, centroid_intermediate_top_k=CENTROID_TOP_K) \
        if ordered else {}
    cfg = T.Gemma4AssistantConfig(text_config=T.Gemma4TextConfig(**text), backbone_hidden_size=main_cfg["hidden_size"],
                                  **extra)
    return cfg


def ordered_head(base, vocab):
    """token_ordering (a seeded permutation) and centroids [CENTROIDS, H]: each the mean of its cluster's rows."""
    _, emb = base_embedding(os.path.join(base, "model.safetensors"))
    order = np.random.default_rng(2027).permutation(vocab).astype(np.int64)
    per = vocab // CENTROIDS
    cent = np.empty((CENTROIDS, emb.shape[1]), np.float32)
    for c in range(CENTROIDS):
        rows = emb[np.sort(order[c * per:(c + 1) * per])]
        cent[c] = (rows.astype(np.uint32) << 16).view(np.float32).mean(axis=0)
    return [("masked_embedding.centroids.weight", bf16(cent)), ("masked_embedding.token_ordering", order)]


def make_drafter(base, out, main_cfg, ordered=False):
    """The copy drafter (module docstring) at the main model's width; its LM head maps to the base file."""
    if os.path.exists(os.path.join(out, "model.safetensors.index.json")):
        return out
    os.makedirs(out, exist_ok=True)
    cfg = drafter_config(main_cfg, ordered)
    cfg.save_pretrained(out)
    H = main_cfg["hidden_size"]
    rng = np.random.default_rng(2026)
    std = checkpoint.STD
    t = []
    for i, kind in enumerate(["sliding_attention", "full_attention"]):  # drafter_config's layer types
        D = main_cfg["global_head_dim"] if kind == "full_attention" else main_cfg["head_dim"]
        q = main_cfg["num_attention_heads"] * D
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", np.ones(H, np.float32)),
              (p + "layer_scalar", np.ones(1, np.float32)),
              (p + "mlp.down_proj.weight", bf16(0.1 * std * rng.standard_normal((H, DRAFT_MLP), np.float32))),
              (p + "mlp.gate_proj.weight", bf16(std * rng.standard_normal((DRAFT_MLP, H), np.float32))),
              (p + "mlp.up_proj.weight", bf16(std * rng.standard_normal((DRAFT_MLP, H), np.float32))),
              (p + "post_attention_layernorm.weight", np.ones(H, np.float32)),
              (p + "post_feedforward_layernorm.weight", np.ones(H, np.float32)),
              (p + "pre_feedforward_layernorm.weight", np.ones(H, np.float32)),
              (p + "self_attn.o_proj.weight", bf16(0.1 * std * rng.standard_normal((H, q), np.float32))),
              (p + "self_attn.q_norm.weight", np.ones(D, np.float32)),
              (p + "self_attn.q_proj.weight", bf16(std * rng.standard_normal((q, H), np.float32)))]
    pre = np.zeros((H, 2 * H), np.float32)
    pre[:, :H] = np.eye(H, dtype=np.float32)
    # (the hidden-state half stays zero: at E2B's width the main model's normed hidden state would
    # outweigh the small embedding of the copy, and the drafter would stop proposing the last token)
    t += [("model.norm.weight", np.ones(H, np.float32)), ("post_projection.weight", bf16(std * rng.standard_normal(
        (H, H), np.float32))), ("pre_projection.weight", bf16(pre))]
    if ordered:
        t += ordered_head(base, main_cfg["vocab_size"])
    write_safetensors(os.path.join(out, "drafter.safetensors"), t)
    link = os.path.join(out, "base.safetensors")
    if not os.path.lexists(link):
        os.symlink(os.path.abspath(os.path.join(base, "model.safetensors")), link)
    wm = {n: "drafter.safetensors" for n, _ in t}
    wm[EMBED] = "base.safetensors"
    index(out, wm)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--scales", default="1,4,16")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=os.path.join(HERE, ".work"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "release", "tessera_bench_speculative"))
    ap.add_argument("--ordered", action="store_true", help="the drafter with the clustered head (use_ordered_embeddings)")
    args = ap.parse_args()
    cfg = checkpoint.gemma4_e2b_config(layers=args.layers, vocab=262144)
    base = os.path.join(args.work, f"spec_e2b{args.layers}")
    checkpoint.make_checkpoint(base, cfg, dtype="bf16")
    name = f"spec_e2b{args.layers}_copy_drafter_" + ("ordered" if args.ordered else "v2")
    drafter = make_drafter(base, os.path.join(args.work, name), cfg, args.ordered)
    for s in args.scales.split(","):
        main_dir = make_scaled(base, os.path.join(args.work, f"spec_e2b{args.layers}_embx{s}"), float(s))
        cmd = ["flock", "/tmp/tessera-cpu.lock", args.bench, "--model", main_dir, "--draft", drafter, "--context",
               str(args.context), "--threads", str(args.threads), "--reps", str(args.reps), "--precision", "bf16"]
        print(f"\n## embedding x {s}: {' '.join(cmd)}; load average {os.getloadavg()}", flush=True)
        subprocess.run(cmd, check=False)
        print(f"(load average after: {os.getloadavg()})", flush=True)


if __name__ == "__main__":
    main()
