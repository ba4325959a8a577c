"""Build the default model of `tessera demo`: a small random-weight Gemma4UnifiedForConditionalGeneration.

Writes models/demo-gemma4-unified/:
  config.json        exactly what `save_pretrained` writes (the full gemma4_unified config: text_config,
                     vision_config, image/boi/eoi/video/audio token ids; audio_config null)
  model.safetensors  bfloat16, exactly what `save_pretrained` writes (<= 4 MB: the file is committed);
                     generation_config.json is dropped, there are no tokenizer / processor files
  README.md          what it is, how it was made, the special token ids, the demo prompt layout

Random weights (seed SEED): the outputs are meaningless tokens. The model exists so that the demo runs a real
Gemma 4 unified checkpoint end to end (sliding + full layers, k_eq_v full layers with 1 KV head and head dim 64,
proportional RoPE, bidirectional attention over an image block, final logit softcapping) without a download.

Every parameter and the persistent `layer_scalar` buffers are overwritten with seeded values (independent of the
HF initialisation, see `randomize`): norm weights and layer scalars are spread a little around their defaults so
the model is not degenerate, q_norm / k_norm are scaled by D^-1/4 (Gemma 4 attends with scaling 1.0; this keeps
q.k ~ O(1) so the softmax is not one-hot), as python/scripts/make_tiny_checkpoints.py does; the post-attention /
post-feedforward norms are centred on POST_NORM_CENTER and the final norm on FINAL_NORM_CENTER instead of 1 (see
there: otherwise greedy decoding only repeats the input token). The model is built and randomised in float32,
then cast to bfloat16 and saved.

Demo prompt (DEMO_LAYOUT, 96 tokens): BOS, 31 text tokens, BOI, 32 x IMAGE placeholder, EOI, 30 text tokens;
mm_token_type_ids = 1 on the 32 IMAGE positions only (BOI / EOI are 0, as the transformers processor does).
The 32 image rows come from the vision embedder on a 4 x 8 grid of patches (pixel_values [1, 32, 48],
image_position_ids (x, y)), or can be supplied directly as [32, 128] embeddings written over the IMAGE rows
(unscaled: image features are not multiplied by sqrt(hidden)).

Usage: .venv/bin/python python/scripts/make_demo_model.py [--out models/demo-gemma4-unified]
       [--check]   regenerate in memory and compare with the files in --out (weights exact, config equal)
       [--no-verify]  skip the reload / forward checks
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "models", "demo-gemma4-unified")
ARCH = "Gemma4UnifiedForConditionalGeneration"
SEED = 5006          # picked among 5000-5015 (post-norm centre 4): most varied greedy output over 4 prompts
MAX_BYTES = 4 * 1000 * 1000          # model.safetensors budget (decimal MB, the stricter reading)

# Special token ids (vocab 2048; same small ids as the tiny checkpoints). Text tokens are drawn from [TEXT_LO, VOCAB).
PAD, EOS, BOS, BOI, EOI, IMAGE, VIDEO, AUDIO, BOA, EOA = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
TEXT_LO = 16
VOCAB = 2048

S = "sliding_attention"
F = "full_attention"

TEXT = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=384, num_hidden_layers=8,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            global_head_dim=64, num_global_key_value_heads=1, attention_k_eq_v=True,
            sliding_window=32, layer_types=[S, S, S, F, S, S, S, F],
            use_bidirectional_attention="vision", final_logit_softcapping=30.0,
            # rope_parameters: the class defaults (sliding: default θ 1e4; full: proportional p 0.25 θ 1e6)
            pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS)
# Encoder-free vision embedder, kept small: 4x4-pixel patches (patch_dim 48), embed dim 32, position table 16 x 2.
VISION = dict(patch_size=4, pooling_kernel_size=1, mm_embed_dim=32, output_proj_dims=32, mm_posemb_size=16)
TOP = dict(image_token_id=IMAGE, video_token_id=VIDEO, audio_token_id=AUDIO, boi_token_id=BOI, eoi_token_id=EOI,
           boa_token_id=BOA, eoa_token_index=EOA)

# Demo prompt layout: (kind, count). "text" slots get ids in [TEXT_LO, VOCAB).
IMAGE_GRID = (4, 8)                  # (rows, cols) of patches -> 32 soft tokens
IMAGE_TOKENS = IMAGE_GRID[0] * IMAGE_GRID[1]
DEMO_LAYOUT = [("bos", 1), ("text", 31), ("boi", 1), ("image", IMAGE_TOKENS), ("eoi", 1), ("text", 30)]
DEMO_LEN = sum(n for _, n in DEMO_LAYOUT)

# Spreads of the randomisation (see `randomize`).
NORM_SPREAD = 0.1
LAYER_SCALAR_RANGE = (0.8, 1.2)
# Centres of the post-attention / post-feedforward norm weights and of the final norm weight (default 1). With
# every norm weight ~1 the scaled token embedding (rms 1) is as large as each layer's contribution, and with tied
# embeddings the LM head then favours the input token itself: greedy decoding repeats one token forever. Scaling
# the post norms up lets the layers dominate the residual stream (output varies); scaling the final norm up widens
# the logits (std ~3, max ~10-15) so that the softcap 30 acts a little and top-1/top-2 gaps are larger.
POST_NORM_CENTER = 4.0
FINAL_NORM_CENTER = 3.0


def versions():
    import torch
    import transformers
    return {"transformers": transformers.__version__, "torch": torch.__version__}


# ----------------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------------

def build_config():
    import transformers as T
    from transformers.models.gemma4_unified import configuration_gemma4_unified as C
    return T.Gemma4UnifiedConfig(text_config=T.Gemma4UnifiedTextConfig(**TEXT),
                                 vision_config=C.Gemma4UnifiedVisionConfig(**VISION),
                                 audio_config=None, **TOP)


def _gen(name):
    import torch
    return torch.Generator().manual_seed((SEED * 1_000_003 + zlib.crc32(name.encode())) % (2**63))


def randomize(model):
    """Deterministic values for every parameter and the layer_scalar buffers (one generator per tensor name).

    Linear [out, in]: N(0, 1/in). Embedding [V, D]: N(0, 1/D) (the model multiplies by sqrt(D)). Gemma 4 RMSNorm
    (scale w, default 1): w ~ 1 + N(0, s^2), s = NORM_SPREAD, except q_norm / k_norm: w ~ D^-1/4 (1 + N(0, s^2)),
    post_attention_layernorm / post_feedforward_layernorm: POST_NORM_CENTER (1 + N(0, s^2)), the final norm:
    FINAL_NORM_CENTER (1 + N(0, s^2)).
    LayerNorm: 1 + N(0, s^2) weight, N(0, s^2) bias. layer_scalar (default 1) ~ U(LAYER_SCALAR_RANGE).
    mm_input-style [in, out] weights: N(0, 1/in). Anything else: N(0, 0.1^2) (biases, position table)."""
    import torch
    import torch.nn as nn
    owner = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = mod
    s = NORM_SPREAD
    with torch.no_grad():
        for name, p in model.named_parameters():
            mod = owner[name]
            cls = type(mod).__name__
            g = _gen(name)
            leaf = name.rsplit(".", 1)[-1]
            if isinstance(mod, nn.Embedding):
                v = torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5
            elif isinstance(mod, nn.Linear) and leaf == "weight":
                v = torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5
            elif "RMSNorm" in cls and name.endswith(("q_norm.weight", "k_norm.weight")):
                v = p.shape[0] ** -0.25 * (1.0 + s * torch.randn(p.shape, generator=g))
            elif "RMSNorm" in cls:
                if name.endswith(("post_attention_layernorm.weight", "post_feedforward_layernorm.weight")):
                    c = POST_NORM_CENTER
                elif name == "model.language_model.norm.weight":
                    c = FINAL_NORM_CENTER
                else:
                    c = 1.0
                v = c * (1.0 + s * torch.randn(p.shape, generator=g))
            elif isinstance(mod, nn.LayerNorm):
                v = (1.0 if leaf == "weight" else 0.0) + s * torch.randn(p.shape, generator=g)
            elif p.dim() >= 2 and leaf == "weight":
                v = torch.randn(p.shape, generator=g) / (p[0].numel()) ** 0.5
            else:
                v = 0.1 * torch.randn(p.shape, generator=g)
            p.copy_(v.to(p.dtype))
        lo, hi = LAYER_SCALAR_RANGE
        n_scalars = 0
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(lo + (hi - lo) * torch.rand(b.shape, generator=_gen(name)))
                n_scalars += 1
        assert n_scalars == TEXT["num_hidden_layers"], n_scalars


def build_model():
    """The demo model in bfloat16 (built and randomised in float32, then cast)."""
    import torch
    import transformers as T
    torch.manual_seed(SEED)
    model = T.Gemma4UnifiedForConditionalGeneration._from_config(build_config(), attn_implementation="eager",
                                                                 dtype=torch.float32).eval()
    randomize(model)
    model = model.to(torch.bfloat16)
    # save_pretrained writes the model dtype at the top level only; keep the sub-configs consistent with it.
    model.config.text_config.dtype = torch.bfloat16
    model.config.vision_config.dtype = torch.bfloat16
    return model


def copy_checkpoint_files(model, path):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_tiny_checkpoints import save_checkpoint as save_config_and_weights
    save_config_and_weights(model, path)


def save_demo_assets(path):
    """The processor config matching the embedder (4-pixel patches, no merge, 70-token budget) and the
    demo's image: scikit-image's astronaut photograph (NASA, public domain), 128 x 128 JPEG."""
    from transformers.models.gemma4_unified.image_processing_gemma4_unified import Gemma4UnifiedImageProcessor
    Gemma4UnifiedImageProcessor(patch_size=VISION["patch_size"], pooling_kernel_size=VISION["pooling_kernel_size"],
                                max_soft_tokens=70).save_pretrained(path)
    from PIL import Image
    from skimage import data
    Image.fromarray(data.astronaut()).resize((128, 128), Image.BICUBIC).save(os.path.join(path, DEMO_IMAGE),
                                                                              quality=90)


def save_checkpoint(model, path):
    """save_pretrained into a temporary folder, keep config.json + model.safetensors; check bf16 throughout."""
    import torch
    copy_checkpoint_files(model, path)
    save_demo_assets(path)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["dtype"] == cfg["text_config"]["dtype"] == cfg["vision_config"]["dtype"] == "bfloat16", cfg
    from safetensors.torch import load_file
    assert all(t.dtype == torch.bfloat16 for t in load_file(os.path.join(path, "model.safetensors")).values())


# ----------------------------------------------------------------------------------------------------------------
# Demo inputs
# ----------------------------------------------------------------------------------------------------------------

DEMO_IMAGE = "astronaut.jpg"


def demo_inputs():
    """The 96-token demo prompt: (input_ids [1, 96], mm_token_type_ids [1, 96], pixel_values [1, 32, 48],
    image_position_ids [1, 32, 2] as (x, y))."""
    import torch
    g = _gen("demo_prompt")
    ids = []
    for kind, n in DEMO_LAYOUT:
        if kind == "text":
            ids += torch.randint(TEXT_LO, VOCAB, (n,), generator=g).tolist()
        else:
            ids += [{"bos": BOS, "boi": BOI, "image": IMAGE, "eoi": EOI}[kind]] * n
    ids = torch.tensor([ids])
    assert ids.shape[1] == DEMO_LEN
    types = (ids == IMAGE).long()
    rows, cols = IMAGE_GRID
    pos = torch.tensor([[[c, r] for r in range(rows) for c in range(cols)]])
    patch_dim = (VISION["patch_size"] * VISION["pooling_kernel_size"]) ** 2 * 3
    pix = torch.randn(1, IMAGE_TOKENS, patch_dim, generator=_gen("demo_pixels"))
    return ids, types, pix, pos


# ----------------------------------------------------------------------------------------------------------------
# Verification
# ----------------------------------------------------------------------------------------------------------------

def verify(path, model):
    """Reload with from_pretrained (bf16 and float32), check the weights survived, run the demo prompt with the
    image block through the model's own vision path and through inputs_embeds rows, and greedy-decode a few
    tokens. Returns a dict of facts for the report."""
    import torch
    import transformers as T
    from safetensors.torch import load_file
    facts = {}
    size = os.path.getsize(os.path.join(path, "model.safetensors"))
    assert size <= MAX_BYTES, f"model.safetensors is {size} bytes > {MAX_BYTES}"
    facts["safetensors_bytes"] = size
    keys = sorted(load_file(os.path.join(path, "model.safetensors")))
    anchors = [k for k in keys if k.endswith("embed_tokens.weight")]
    assert anchors == ["model.language_model.embed_tokens.weight"], anchors
    facts["num_tensors"] = len(keys)

    ids, types, pix, pos = demo_inputs()
    results = {}
    for dtype in (torch.bfloat16, torch.float32):
        m = T.Gemma4UnifiedForConditionalGeneration.from_pretrained(path, attn_implementation="eager",
                                                                    dtype=dtype).eval()
        sd_new, sd_old = m.state_dict(), model.state_dict()
        assert set(sd_new) == set(sd_old)
        for k in sd_old:
            assert torch.equal(sd_new[k].to(torch.float32), sd_old[k].to(torch.float32)), f"{k} changed on reload"
        with torch.no_grad():
            out = m(input_ids=ids, mm_token_type_ids=types, pixel_values=pix.to(dtype), image_position_ids=pos,
                    use_cache=False)
            logits = out.logits.float()
            assert logits.shape == (1, DEMO_LEN, VOCAB) and torch.isfinite(logits).all()
            # Same forward with the image rows written over inputs_embeds (the engine's way).
            feats = torch.cat(m.model.get_image_features(pix.to(dtype), pos, return_dict=True).pooler_output, 0)
            assert feats.shape == (IMAGE_TOKENS, TEXT["hidden_size"])
            emb = m.model.get_input_embeddings()(torch.where(ids == IMAGE, PAD, ids))
            emb[ids == IMAGE] = feats.to(emb.dtype)
            via_embeds = m(inputs_embeds=emb, mm_token_type_ids=types, use_cache=False).logits.float()
            assert torch.equal(via_embeds, logits), float((via_embeds - logits).abs().max())
            # Without token types the image block is causal: the logits must change (the mask matters).
            causal = m(inputs_embeds=emb, use_cache=False).logits.float()
            facts[f"{dtype}: max |logits| change without mm_token_type_ids"] = float((causal - logits).abs().max())
            gen = m.generate(input_ids=ids, mm_token_type_ids=types, pixel_values=pix.to(dtype),
                             image_position_ids=pos, do_sample=False, max_new_tokens=16, eos_token_id=None,
                             pad_token_id=PAD)
        toks = gen[0, DEMO_LEN:].tolist()
        results[str(dtype)] = dict(logits=logits, tokens=toks)
        facts[f"{dtype}: greedy 16 tokens"] = toks
        facts[f"{dtype}: logits std / max|.|"] = (float(logits.std()), float(logits.abs().max()))
    d = (results["torch.bfloat16"]["logits"] - results["torch.float32"]["logits"]).abs().max()
    facts["max |bf16 - f32| logits"] = float(d)
    assert len(set(results["torch.float32"]["tokens"])) > 1, "greedy output is one repeated token"
    facts["prompt_ids"] = ids[0].tolist()
    return facts


# ----------------------------------------------------------------------------------------------------------------
# README
# ----------------------------------------------------------------------------------------------------------------

def readme_text():
    v = versions()
    t = TEXT
    vis = VISION
    return f"""# demo-gemma4-unified

The default model of `tessera demo`: a tiny **`Gemma4UnifiedForConditionalGeneration`** (model_type
`gemma4_unified`) with **random weights**. Its outputs are meaningless tokens; it exists so that the demo runs a
real Gemma 4 unified checkpoint end to end without a download.

- Made by `python/scripts/make_demo_model.py` (seed {SEED}) with transformers {v['transformers']};
  `make_demo_model.py --check` regenerates it in memory and compares. Files:
  `config.json` and `model.safetensors` exactly as `save_pretrained` wrote them (bfloat16, tied embeddings, no
  `lm_head.weight`); `preprocessor_config.json` as `Gemma4UnifiedImageProcessor.save_pretrained` writes it
  (4-pixel patches, no merge, a 70-token budget: the 128 x 128 demo image becomes 8 x 8 = 64 soft tokens);
  `astronaut.jpg`, the demo's image (scikit-image's astronaut photograph, NASA, public domain, 128 x 128);
  no tokenizer or generation config.
- Text decoder (prefix `model.language_model.`): vocab {t['vocab_size']}, hidden {t['hidden_size']},
  {t['num_hidden_layers']} layers `S S S F S S S F` (sliding window {t['sliding_window']}),
  {t['num_attention_heads']} query heads. Sliding layers: {t['num_key_value_heads']} KV heads, head dim
  {t['head_dim']}. Full layers: head dim {t['global_head_dim']}, {t['num_global_key_value_heads']} KV head,
  `attention_k_eq_v` (written as `per_layer_config`). MLP {t['intermediate_size']}. RoPE: the class defaults
  (sliding `default` θ 1e4, full `proportional` p 0.25 θ 1e6). `use_bidirectional_attention` "vision".
  `final_logit_softcapping` {t['final_logit_softcapping']}.
- Vision: the encoder-free embedder (`model.vision_embedder.*`, `model.embed_vision.*`):
  {vis['patch_size']}x{vis['patch_size']}-pixel patches (patch dim {vis['patch_size'] ** 2 * 3}), embed dim
  {vis['mm_embed_dim']}, position table {vis['mm_posemb_size']} x 2; one soft token per patch.
- Weights: linear N(0, 1/fan_in), embeddings N(0, 1/hidden); norm weights 1 + N(0, {NORM_SPREAD}²), times
  head_dim^-1/4 for q/k norms (attention scaling is 1.0), times {POST_NORM_CENTER} for the post-attention /
  post-feedforward norms (so that greedy decoding does not just repeat the input token) and
  {FINAL_NORM_CENTER} for the final norm (wider logits); `layer_scalar` ~ U{LAYER_SCALAR_RANGE}.

## Special token ids

| token | id |
| --- | --- |
| pad | {PAD} |
| eos | {EOS} |
| bos | {BOS} |
| boi (begin of image) | {BOI} |
| eoi (end of image) | {EOI} |
| image placeholder (`image_token_id`) | {IMAGE} |
| video placeholder | {VIDEO} |
| audio placeholder | {AUDIO} |
| boa / eoa | {BOA} / {EOA} |

Text tokens: any id in [{TEXT_LO}, {VOCAB}).

## Prompt layout

`bos, text..., boi, image x N, eoi, text...` with `mm_token_type_ids` = 1 on the N image placeholders only
(0 on boi / eoi / text). The N image rows of the input embeddings are replaced by the image features (not
scaled by sqrt(hidden)); the placeholder id itself is embedded as the pad row. The image block attends
bidirectionally on the sliding layers, within the window (window and (causal or same block)); full layers
stay causal, as in generation (docs/attention.md). The script's check prompt is {DEMO_LEN} tokens: bos, 31 text, boi, {IMAGE_TOKENS} image
({IMAGE_GRID[0]} x {IMAGE_GRID[1]} patches), eoi, 30 text.
"""


# ----------------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------------

def compare(path, model):
    import torch
    from safetensors.torch import load_file
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(model, tmp)
        for f in ("config.json",):
            with open(os.path.join(tmp, f)) as a, open(os.path.join(path, f)) as b:
                if json.load(a) != json.load(b):
                    problems.append(f"{f} differs")
        new, old = (load_file(os.path.join(d, "model.safetensors")) for d in (tmp, path))
    if set(new) != set(old):
        problems.append(f"safetensors keys differ: {sorted(set(new) ^ set(old))}")
    for k in sorted(set(new) & set(old)):
        if new[k].shape != old[k].shape or not torch.equal(new[k], old[k]):
            problems.append(f"weight {k} differs")
    with open(os.path.join(path, "README.md")) as f:
        if f.read() != readme_text():
            problems.append("README.md differs")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    ap.add_argument("--no-verify", action="store_true", help="skip the reload / forward checks")
    args = ap.parse_args(argv)
    import torch
    import transformers
    torch.set_num_threads(min(8, torch.get_num_threads()))
    transformers.utils.logging.disable_progress_bar()
    model = build_model()
    if args.check:
        problems = compare(args.out, model)
        print(("ok   " if not problems else "DIFF ") + args.out)
        for p in problems:
            print("     " + p)
        return 1 if problems else 0
    save_checkpoint(model, args.out)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme_text())
    sizes = {f: os.path.getsize(os.path.join(args.out, f)) for f in sorted(os.listdir(args.out))}
    print(f"wrote {args.out} {sizes}")
    if not args.no_verify:
        for k, v in verify(args.out, model).items():
            print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
