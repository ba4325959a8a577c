"""Build tiny random-weight Gemma 3 / Gemma 4 checkpoints with transformers, plus golden outputs.

For each entry of MODELS this writes tests/testdata/models/<name>/:
  config.json, model.safetensors   exactly what `save_pretrained` writes (float32; the generation_config.json it
                                   also writes is dropped; there are no tokenizer files)
  golden.npz                       inputs and outputs of transformers (eager attention, float32, CPU)
  golden_bf16.npz                  transformers' logits for the same batch with bf16 weights (see below)

Every parameter and the persistent `layer_scalar` buffers are overwritten with seeded random values (norm weights
and layer scalars included, so that `1 + w` vs `w`, a missing scalar, etc. change the logits). The
numerics the goldens follow are described in docs/gemma-numerics.md.

golden.npz keys (B = 2 rows, S = padded length, V = vocab, L = layers, H = hidden):
  meta                   JSON string: name, architecture, versions (transformers, torch), what each key means
  input_ids [B,S] int64  row 0 right-padded, row 1 left-padded (pad = pad_token_id)
  attention_mask [B,S]   1 = real token
  token_type_ids [B,S]   gemma3 multimodal only (1 = image soft token), as passed to the model
  mm_token_type_ids      gemma4 and gemma4_unified (1 = image soft token)
  pixel_values, image_position_ids   multimodal only: what the model was called with
  image_embeds [N,H]     multimodal only: the exact rows written over the image placeholders, in order (row-major
                         over (batch, position)); computed by model.get_image_features(...).pooler_output; the
                         forward with pixel_values is checked to equal the forward with these as mm_encoder_outputs
  position_ids [1,S]     the positions a plain forward uses (arange: padding is *not* skipped)
  logits [B,S,V]         model(input_ids, attention_mask, [token types], [pixels]).logits  (fresh forward, no cache),
                         with the attention masks generation builds (generation_masks: the class's
                         create_masks_for_generate passed as the attention_mask dict; for every model but
                         gemma4_unified the same as the forward's own, which is checked)
  position_ids_gen [B,S] the positions `generate` would use: cumsum(attention_mask) - 1, 0 on padding
  logits_gen [B,S,V]     the same forward with position_ids=position_ids_gen
  Compare logits only where attention_mask == 1 (padding query rows attend to nothing real: meaningless).
  row0_embeds [S,H]      batch row 0: input of layer 0 (scaled embeddings, image rows merged)
  row0_attn_out [L,S,H]  batch row 0: self_attn output (after o_proj, before post_attention_layernorm)
  row0_layer_out [L,S,H] batch row 0: output of each decoder layer (pre final norm; Gemma 4: after layer_scalar)
  row0_final_norm [S,H]  batch row 0: after the final norm (input of the LM head)
  row0_per_layer_inputs [S,L,P]  gemma4_text and gemma4 (the models with PLE): the PLE input each layer receives
  row0_router_experts [L,S,K] int64, row0_router_weights [L,S,K]  gemma4_moe: each layer's router output for batch
                         row 0 (the chosen experts as torch.topk orders them, and their final weights: renormalised,
                         times per_expert_scale)
                         (after projection/combine; image rows: projection of the image row, pad token's PLE row)
  gen_prompt [1,P]       single-row prompt (no padding), gen_token_type_ids / gen_mm_token_type_ids /
                         gen_pixel_values / gen_image_position_ids / gen_image_embeds with it for multimodal models
  gen_tokens [32]        greedy tokens of model.generate(do_sample=False, max_new_tokens=32), eos disabled, with a
                         static cache (so generate builds its masks with create_masks_for_generate)
  gen_tokens_forward_mask [32]  gemma4_unified only: the tokens generate gives with the default dynamic cache, where
                         the forward builds its own (other) mask; they differ from gen_tokens (checked)
  gen_logits [32,V]      the logits generate scored each new token with (decode steps use the KV cache)
  gen_min_margin         smallest top-1 minus top-2 logit gap over the 32 steps (argmax robustness)

golden_bf16.npz keys (the batch inputs are those of golden.npz -- input_ids, attention_mask, token types and the
image_embeds rows, passed as mm_encoder_outputs -- not stored again; meta.inputs_crc32 fingerprints them):
  meta                   JSON string: name, architecture, versions, inputs_crc32, what each key means
  logits_bf16 [B,S,V]    float32 copy of the bf16 logits of the checkpoint loaded by
                         from_pretrained(dtype=torch.bfloat16) (eager): bf16 weights *and* bf16 activations --
                         what "running the model in bf16" means in transformers. Parameters and the layer_scalar
                         buffers are bf16, embed_scale is bf16 (sqrt(H) -> bf16, sqrt(8) = 2.828125), the RoPE
                         inv_freq buffers stay float32 (docs/gemma-numerics.md 5.1, 5.11); image_embeds are cast to bf16
  logits_bf16_weights    the same bf16 model upcast with .float() and run in float32: every weight (norm weights and
                         layer_scalar included) and embed_scale hold bf16 values, all compute is float32. The
                         difference logits_bf16_weights - logits (golden.npz) is the effect of bf16 weights alone,
                         logits_bf16 - logits_bf16_weights that of bf16 activations.
  Compare only where attention_mask == 1.

Usage: .venv/bin/python python/scripts/make_tiny_checkpoints.py [--out tests/testdata/models] [--only NAME]
       [--check]   regenerate in memory and compare with the files in --out (weights and integers exact, floats
                   within TOL; on a CPU of another kind than the one that recorded them, within CROSS_CPU_TOL)
The test python/tests/test_tiny_checkpoints.py imports this file for the regeneration check.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import zlib

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "tests", "testdata", "models")
GEN_TOKENS = 32
TOL = 1e-6
# torch picks its CPU kernels by instruction set (AVX-512 or AVX2 sgemm, AVX-512-BF16 or AMX bf16 matmuls), and
# each sums in its own order: goldens regenerated on another kind of CPU differ by float32 rounding noise, and
# the bf16 logits by bf16 rounding. Across CPU kinds the floats are compared within these bounds instead;
# integers, weights and generated tokens stay exact.
CROSS_CPU_TOL = {"logits_bf16": 0.1}
CROSS_CPU_TOL_F32 = 1e-4
# golden.npz keys that golden_bf16.npz reuses as its batch inputs
BATCH_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids", "image_embeds")

# The checkpoints' specs and their vocabulary's token ids live in tiny_checkpoint_specs.py.
from tiny_checkpoint_specs import (AUDIO, BOA, BOI, BOS, EOI, EOS, F, IMAGE, MODELS, PAD, S,  # noqa: E402,F401
                                   TEXT_LO, VIDEO, VOCAB)


def versions():
    import torch
    import transformers
    return {"transformers": transformers.__version__, "torch": torch.__version__, "cpu": cpu_kind()}


def cpu_kind():
    """What decides torch's CPU kernels: its vector capability and the bf16/AMX instructions present."""
    import torch
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    extra = [f for f in ("avx512_bf16", "amx_bf16", "avx512_fp16") if f in flags]
    return "+".join([torch.backends.cpu.get_cpu_capability()] + extra)


# ----------------------------------------------------------------------------------------------------------------
# Model construction and weight randomisation
# ----------------------------------------------------------------------------------------------------------------

def build_config(spec):
    import transformers as T
    arch = spec["arch"]
    text = dict(spec["text"])
    if arch == "Gemma3ForCausalLM":
        return T.Gemma3TextConfig(**text)
    if arch == "Gemma3ForConditionalGeneration":
        return T.Gemma3Config(text_config=T.Gemma3TextConfig(**text),
                              vision_config=T.SiglipVisionConfig(**spec["vision"]), **spec["top"])
    if arch == "Gemma4ForCausalLM":
        return T.Gemma4TextConfig(**text)
    if arch == "Gemma4ForConditionalGeneration":
        return T.Gemma4Config(text_config=T.Gemma4TextConfig(**text), vision_config=T.Gemma4VisionConfig(**spec["vision"]),
                              audio_config=None, **spec["top"])
    if arch == "Gemma4UnifiedForConditionalGeneration":
        from transformers.models.gemma4_unified import configuration_gemma4_unified as C
        return T.Gemma4UnifiedConfig(text_config=T.Gemma4UnifiedTextConfig(**text),
                                     vision_config=C.Gemma4UnifiedVisionConfig(**spec["vision"]),
                                     audio_config=None, **spec["top"])
    raise ValueError(arch)


def build_model(name):
    import torch
    import transformers as T
    spec = MODELS[name]
    cfg = build_config(spec)
    cls = getattr(T, spec["arch"])
    torch.manual_seed(spec["seed"])
    model = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32).eval()
    randomize(model, spec["seed"])
    return model


def _gen(seed, name):
    import torch
    g = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))
    return g


def randomize(model, seed):
    """Deterministic values for every parameter (and the layer_scalar buffers), independent of HF init.

    Linear [out, in]: N(0, 1/in). Embedding [V, D]: N(0, 1/D) (the model multiplies by sqrt(D)). Gemma 3 RMSNorm
    (scale 1 + w): w ~ N(0, 0.3^2). Gemma 4 RMSNorm (scale w): w ~ 1 + N(0, 0.3^2), except q_norm / k_norm:
    w ~ D^-1/4 (1 + N(0, 0.3^2)) (Gemma 4 does not scale q.k, see the comment below). LayerNorm: 1 + N(0, 0.1^2)
    weight, N(0, 0.1^2) bias. layer_scalar ~ U(0.6, 1.4). MoE: router.proj N(0, 2^2), router.scale 1 + N(0, 0.3^2),
    per_expert_scale U(0.5, 1.5), stacked expert matrices [E, out, in] N(0, 1/in). Anything else: N(0, 0.1^2)
    (biases, position tables), or N(0, 1/fan_in) for >= 2-D tensors."""
    import torch
    import torch.nn as nn
    owner = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = mod
    with torch.no_grad():
        for name, p in model.named_parameters():
            mod = owner[name]
            cls = type(mod).__name__
            g = _gen(seed, name)
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith("router.proj.weight"):         # logits ~ N(0, 2^2): its input has rms H^-1/2
                v = 2.0 * torch.randn(p.shape, generator=g)
            elif name.endswith("router.scale"):
                v = 1.0 + 0.3 * torch.randn(p.shape, generator=g)
            elif name.endswith("router.per_expert_scale"):  # so a scale applied wrongly changes the logits
                v = 0.5 + torch.rand(p.shape, generator=g)
            elif cls == "Gemma4TextExperts":                    # stacked [E, out, in], used as x @ W[e]^T
                v = torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5
            elif isinstance(mod, nn.Embedding):
                v = torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5
            elif isinstance(mod, nn.Linear) and leaf == "weight":
                v = torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5
            elif "RMSNorm" in cls and cls.startswith("Gemma3"):
                v = 0.3 * torch.randn(p.shape, generator=g)
            elif "RMSNorm" in cls and leaf == "weight" and name.endswith(("q_norm.weight", "k_norm.weight")):
                # Gemma 4 attends with scaling 1.0: keep q.k ~ O(1) (scale D^-1/4 each) so the softmax is not
                # nearly one-hot, which would make float32 rounding noise dominate the logits.
                v = p.shape[0] ** -0.25 * (1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif "RMSNorm" in cls:
                v = 1.0 + 0.3 * torch.randn(p.shape, generator=g)
            elif isinstance(mod, nn.LayerNorm):
                v = (1.0 if leaf == "weight" else 0.0) + 0.1 * torch.randn(p.shape, generator=g)
            elif leaf == "mm_input_projection_weight":        # [vision_hidden, text_hidden], used as x @ W
                v = torch.randn(p.shape, generator=g) / p.shape[0] ** 0.5
            elif p.dim() >= 2 and leaf == "weight":           # conv patch embedding etc.
                v = torch.randn(p.shape, generator=g) / (p[0].numel()) ** 0.5
            else:
                v = 0.1 * torch.randn(p.shape, generator=g)
            p.copy_(v.to(p.dtype))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                g = _gen(seed, name)
                b.copy_(0.6 + 0.8 * torch.rand(b.shape, generator=g))


# ----------------------------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------------------------

def _text(rng, n):
    return list(rng.integers(TEXT_LO, VOCAB, size=n))


def _gen_text(spec, template):
    """The generation prompt: `template` with every text slot (id >= TEXT_LO) drawn from spec["gen_seed"]."""
    t = np.array(template)
    slots = t >= TEXT_LO
    t[slots] = np.random.default_rng(spec["gen_seed"]).integers(TEXT_LO, VOCAB, size=int(slots.sum()))
    return [int(x) for x in t]


def make_inputs(name, model):
    """Batch of 2 (row 0 right-padded, row 1 left-padded) and a single-row generation prompt."""
    import torch
    spec = MODELS[name]
    rng = np.random.default_rng(spec["seed"])
    arch = spec["arch"]
    Slen = 24
    mm = arch.endswith("ConditionalGeneration")
    if not mm:
        r0 = [BOS] + _text(rng, 19)                                   # 20 real + 4 right pad
        r1 = [BOS] + _text(rng, 18)                                   # 5 left pad + 19 real
        rows = [r0 + [PAD] * (Slen - len(r0)), [PAD] * (Slen - len(r1)) + r1]
        mask = [[1] * len(r0) + [0] * (Slen - len(r0)), [0] * (Slen - len(r1)) + [1] * len(r1)]
        prompt = _gen_text(spec, [BOS] + [TEXT_LO] * 9)
        batch = dict(input_ids=torch.tensor(rows), attention_mask=torch.tensor(mask))
        gen = dict(input_ids=torch.tensor([prompt]))
        return batch, gen
    n_img = spec["image_tokens"]
    img = [BOI] + [IMAGE] * n_img + [EOI]
    if arch == "Gemma3ForConditionalGeneration":
        r0 = [BOS] + _text(rng, 3) + img + _text(rng, 5)              # 20 real + 4 right pad
        r1 = [BOS] + _text(rng, 2) + img + _text(rng, 4)              # 6 left pad + 18 real
        prompt = _gen_text(spec, [BOS] + [TEXT_LO] * 2 + img + [TEXT_LO] * 3)
    else:
        r0 = [BOS] + _text(rng, 2) + img + _text(rng, 6)              # 19 real + 5 right pad
        r1 = [BOS] + _text(rng, 3) + img + _text(rng, 6)              # 4 left pad + 20 real
        prompt = _gen_text(spec, [BOS] + [TEXT_LO] * 3 + img + [TEXT_LO] * 2)
    rows = [r0 + [PAD] * (Slen - len(r0)), [PAD] * (Slen - len(r1)) + r1]
    mask = [[1] * len(r0) + [0] * (Slen - len(r0)), [0] * (Slen - len(r1)) + [1] * len(r1)]
    ids = torch.tensor(rows)
    types = (ids == IMAGE).long()
    pids = torch.tensor([prompt])
    ptypes = (pids == IMAGE).long()
    g = _gen(spec["seed"], "pixels")
    if arch == "Gemma3ForConditionalGeneration":
        vc = model.config.vision_config
        pix = torch.randn(2, 3, vc.image_size, vc.image_size, generator=g)
        gpix = torch.randn(1, 3, vc.image_size, vc.image_size, generator=g)
        batch = dict(input_ids=ids, attention_mask=torch.tensor(mask), token_type_ids=types, pixel_values=pix)
        gen = dict(input_ids=pids, token_type_ids=ptypes, pixel_values=gpix)
    else:
        vc = model.config.vision_config
        rows_, cols_ = spec["image_grid"]
        if arch == "Gemma4UnifiedForConditionalGeneration":    # one (k*patch)^2 pixel patch per soft token
            patch_dim = (vc.patch_size * vc.pooling_kernel_size) ** 2 * 3
        else:                                               # Gemma 4 tower: k x k patches pooled per soft token
            patch_dim = vc.patch_size ** 2 * 3
            rows_, cols_ = rows_ * vc.pooling_kernel_size, cols_ * vc.pooling_kernel_size
        pos = torch.tensor([[c, r] for r in range(rows_) for c in range(cols_)])   # (x, y)
        pix = torch.randn(2, rows_ * cols_, patch_dim, generator=g)
        gpix = torch.randn(1, rows_ * cols_, patch_dim, generator=g)
        batch = dict(input_ids=ids, attention_mask=torch.tensor(mask), mm_token_type_ids=types, pixel_values=pix,
                     image_position_ids=pos[None].repeat(2, 1, 1))
        gen = dict(input_ids=pids, mm_token_type_ids=ptypes, pixel_values=gpix, image_position_ids=pos[None])
    return batch, gen


# ----------------------------------------------------------------------------------------------------------------
# Goldens
# ----------------------------------------------------------------------------------------------------------------

def _decoder_layers(model):
    inner = model.model
    lm = getattr(inner, "language_model", inner)
    return lm, list(lm.layers)


def _image_features(model, batch):
    """(flat [N, H] rows that replace the image placeholders, in order; mm_encoder_outputs for the forward)."""
    import torch
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    inner = model.model
    if "image_position_ids" in batch:       # unified: a tuple of [n_i, H] per image
        out = inner.get_image_features(batch["pixel_values"], batch["image_position_ids"], return_dict=True)
        flat = torch.cat(list(out.pooler_output), dim=0)
    else:                                   # Gemma 3: [n_images, mm_tokens_per_image, H]
        out = inner.get_image_features(batch["pixel_values"], return_dict=True)
        flat = out.pooler_output.reshape(-1, out.pooler_output.shape[-1])
    return flat, {"image": BaseModelOutputWithPooling(pooler_output=out.pooler_output)}


def generation_masks(model, kw, position_ids=None):
    """`kw` with its 2-D attention_mask replaced by the per-layer-type mask dict that generation builds (the model
    class's create_masks_for_generate, as `generate` calls it with a static cache). Gemma4UnifiedModel.forward
    builds a different mask when it makes its own (docs/attention.md); the goldens follow generation."""
    import torch
    from transformers.masking_utils import create_masks_for_generate
    ids = kw["input_ids"]
    B, S = ids.shape
    pos = torch.arange(S)[None] if position_ids is None else position_ids
    make = getattr(type(model), "create_masks_for_generate", create_masks_for_generate)
    types = {k: kw[k] for k in ("token_type_ids", "mm_token_type_ids") if k in kw}
    out = dict(kw)
    out["attention_mask"] = make(config=model.config, inputs_embeds=torch.empty(B, S, 0), cache=None,
                                 attention_mask=kw.get("attention_mask"), position_ids=pos, **types)
    return out


def _forward_paths_must(name, model, batch, logits):
    """The plain forward (its own mask) equals the generation-mask forward except for gemma4_unified, where
    transformers' two paths differ: fail loudly if that ever changes, so the goldens' choice is revisited."""
    import torch
    own = model(**batch, use_cache=False).logits
    if MODELS[name]["arch"] == "Gemma4UnifiedForConditionalGeneration":
        mask = batch["attention_mask"].bool()
        assert not torch.allclose(own[mask], logits[mask], rtol=1e-3, atol=1e-3), (
            "gemma4_unified: transformers' forward and generation masks now give the same logits")
    else:
        assert torch.equal(own, logits), f"{name}: forward and generation masks give different logits"


def _hooked_forward(model, layers, lm, gbatch, has_ple, has_moe):
    """One forward with hooks recording each layer's attention output, layer output, per-layer input and
    router choice, cross-checked against output_hidden_states. Returns (output, records, final norm)."""
    import torch
    L = len(layers)
    rec = {"attn": [None] * L, "layer": [None] * L, "ple": [None] * L, "router": [None] * L}
    hooks = []
    for i, layer in enumerate(layers):
        hooks.append(layer.self_attn.register_forward_hook(
            lambda m, a, o, i=i: rec["attn"].__setitem__(i, o[0].detach().clone())))
        hooks.append(layer.register_forward_hook(
            lambda m, a, o, i=i: rec["layer"].__setitem__(i, (o[0] if isinstance(o, tuple) else o)
                                                          .detach().clone())))
        if has_ple:
            def pre(m, a, kw, i=i):
                pli = a[1] if len(a) > 1 else kw.get("per_layer_input")
                rec["ple"][i] = pli.detach().clone()
            hooks.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        if has_moe:   # router output: (probabilities, top-k weights, top-k experts), [B*S, ...]
            hooks.append(layer.router.register_forward_hook(
                lambda m, a, o, i=i: rec["router"].__setitem__(i, (o[1].detach().clone(), o[2].detach().clone()))))
    fin = {}
    hooks.append(lm.norm.register_forward_hook(lambda m, a, o: fin.__setitem__("norm", o.detach().clone())))
    out = model(**gbatch, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    hs = out.hidden_states
    assert len(hs) == L + 1
    for i in range(L - 1):
        assert torch.equal(hs[i + 1], rec["layer"][i]), f"hidden_states[{i + 1}] != layer {i} output"
    assert torch.equal(hs[L], fin["norm"]), "hidden_states[-1] is expected to be the final-norm output"
    return out, rec, fin["norm"]


def _greedy_arrays(name, spec, model, gen):
    """Greedy generation (single row, no padding), eos disabled so that all 32 tokens are produced. The
    static cache makes `generate` build its masks with create_masks_for_generate (the default dynamic cache
    lets the forward build its own, which for gemma4_unified is the other rule)."""
    import torch
    from transformers import GenerationConfig
    arrays = {}
    gkw = dict(do_sample=False, max_new_tokens=GEN_TOKENS, min_new_tokens=0, eos_token_id=None, pad_token_id=PAD,
               bos_token_id=BOS, num_beams=1, output_logits=True, return_dict_in_generate=True)
    gout = model.generate(**gen, generation_config=GenerationConfig(cache_implementation="static", **gkw))
    dyn = model.generate(**gen, generation_config=GenerationConfig(**gkw))
    plen = gen["input_ids"].shape[1]
    toks = gout.sequences[0, plen:]
    assert toks.numel() == GEN_TOKENS, toks.shape
    glog = torch.stack([lg[0] for lg in gout.logits])          # [32, V]
    assert torch.equal(glog.argmax(-1), toks)
    top2 = glog.topk(2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())
    # teacher-forced full forward (no cache) must pick the same tokens
    full = dict(gen)
    full["input_ids"] = gout.sequences[:, :-1]
    tt_key = "token_type_ids" if "token_type_ids" in gen else ("mm_token_type_ids" if "mm_token_type_ids" in gen
                                                                 else None)
    if tt_key:
        full[tt_key] = torch.cat([gen[tt_key], torch.zeros(1, GEN_TOKENS - 1, dtype=torch.long)], 1)
    tf = model(**generation_masks(model, full), use_cache=False).logits[0, plen - 1:]
    assert torch.equal(tf.argmax(-1), toks), "cached decode and full forward disagree on the greedy tokens"
    toks_dyn = dyn.sequences[0, plen:]
    if spec["arch"] == "Gemma4UnifiedForConditionalGeneration":
        # the prompt is chosen so that the two rules pick different tokens: a test comparing with gen_tokens
        # can tell which rule an engine follows
        assert not torch.equal(toks_dyn, toks), "gemma4_unified: both mask rules give the same greedy tokens"
        arrays["gen_tokens_forward_mask"] = toks_dyn.numpy().astype(np.int64)
    else:
        assert torch.equal(toks_dyn, toks), f"{name}: static- and dynamic-cache generate disagree"
    if "pixel_values" in gen:
        gfeats, _ = _image_features(model, gen)
        arrays["gen_image_embeds"] = gfeats.numpy().astype(np.float32)
    arrays.update(gen_prompt=gen["input_ids"].numpy().astype(np.int64),
                  gen_tokens=toks.numpy().astype(np.int64),
                  gen_logits=glog.numpy().astype(np.float32),
                  gen_min_margin=np.array(margin, dtype=np.float32))
    return arrays


def _input_arrays(batch, gen):
    """The model inputs beyond the ids (token types, pixels, image positions) of the batch and the generation."""
    arrays = {}
    for k in ("token_type_ids", "mm_token_type_ids"):
        if k in batch:
            arrays[k] = batch[k].numpy().astype(np.int64)
            arrays["gen_" + k] = gen[k].numpy().astype(np.int64)
    if "pixel_values" in batch:
        arrays["pixel_values"] = batch["pixel_values"].numpy().astype(np.float32)
        arrays["gen_pixel_values"] = gen["pixel_values"].numpy().astype(np.float32)
    if "image_position_ids" in batch:
        arrays["image_position_ids"] = batch["image_position_ids"].numpy().astype(np.int64)
        arrays["gen_image_position_ids"] = gen["image_position_ids"].numpy().astype(np.int64)
    return arrays


def golden_arrays(name, model):
    import torch
    spec = MODELS[name]
    torch.manual_seed(spec["seed"])
    batch, gen = make_inputs(name, model)
    lm, layers = _decoder_layers(model)
    L = len(layers)
    arrays = {}
    text_config = model.config.get_text_config()
    has_ple = bool(getattr(text_config, "hidden_size_per_layer_input", 0))
    has_moe = bool(getattr(text_config, "enable_moe_block", False))
    with torch.no_grad():
        gbatch = generation_masks(model, batch)
        out, rec, final_norm = _hooked_forward(model, layers, lm, gbatch, has_ple, has_moe)
        logits, hs = out.logits, out.hidden_states
        Sl = batch["input_ids"].shape[1]
        pos = torch.arange(Sl)[None]
        # plain forward without output_hidden_states / hooks must give the same logits
        plain = model(**gbatch, use_cache=False).logits
        assert torch.equal(plain, logits)
        explicit = model(**gbatch, position_ids=pos, use_cache=False).logits
        assert torch.equal(explicit, logits)
        _forward_paths_must(name, model, batch, logits)
        am = batch["attention_mask"]
        pos_gen = (am.long().cumsum(-1) - 1).masked_fill(am == 0, 0)
        logits_gen = model(**generation_masks(model, batch, pos_gen), position_ids=pos_gen, use_cache=False).logits

        if "pixel_values" in batch:
            feats, enc = _image_features(model, batch)
            nb = {k: v for k, v in gbatch.items() if k not in ("pixel_values", "image_position_ids")}
            via_enc = model(**nb, mm_encoder_outputs=enc, use_cache=False).logits
            assert torch.equal(via_enc, logits), "forward with image features != forward with pixel_values"
            assert feats.shape[0] == int((batch["input_ids"] == IMAGE).sum())
            arrays["image_embeds"] = feats.numpy().astype(np.float32)
        arrays.update(_greedy_arrays(name, spec, model, gen))

    arrays.update(
        input_ids=batch["input_ids"].numpy().astype(np.int64),
        attention_mask=batch["attention_mask"].numpy().astype(np.int64),
        position_ids=pos.numpy().astype(np.int64),
        logits=logits.numpy().astype(np.float32),
        position_ids_gen=pos_gen.numpy().astype(np.int64),
        logits_gen=logits_gen.numpy().astype(np.float32),
        row0_embeds=hs[0][0].numpy().astype(np.float32),
        row0_attn_out=torch.stack([a[0] for a in rec["attn"]]).numpy().astype(np.float32),
        row0_layer_out=torch.stack([a[0] for a in rec["layer"]]).numpy().astype(np.float32),
        row0_final_norm=final_norm[0].numpy().astype(np.float32),
    )
    if has_moe:
        B, S = batch["input_ids"].shape
        arrays["row0_router_experts"] = torch.stack([r[1].reshape(B, S, -1)[0] for r in rec["router"]]).numpy() \
            .astype(np.int64)
        arrays["row0_router_weights"] = torch.stack([r[0].reshape(B, S, -1)[0] for r in rec["router"]]).numpy() \
            .astype(np.float32)
    if has_ple:
        arrays["row0_per_layer_inputs"] = torch.stack([p[0] for p in rec["ple"]], dim=1).numpy().astype(np.float32)
    arrays.update(_input_arrays(batch, gen))
    meta = dict(name=name, architecture=spec["arch"], model_type=model.config.model_type, seed=spec["seed"],
                num_layers=L, gen_tokens=GEN_TOKENS, eos_disabled_in_generate=True, attn_implementation="eager",
                dtype="float32", image_token_id=IMAGE if "pixel_values" in batch else None,
                logits_compare="only where attention_mask == 1", **versions())
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    return arrays


# ----------------------------------------------------------------------------------------------------------------
# Save / check
# ----------------------------------------------------------------------------------------------------------------

def save_checkpoint(model, path):
    """save_pretrained into a temporary folder, keep config.json + model.safetensors."""
    import shutil
    os.makedirs(path, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        files = sorted(os.listdir(tmp))
        assert "model.safetensors" in files and "config.json" in files, files
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(tmp, f), os.path.join(path, f))


def inputs_crc32(arrays):
    """Fingerprint of the batch inputs of golden.npz that golden_bf16.npz was computed from."""
    crc = 0
    for k in BATCH_INPUT_KEYS:
        if k in arrays:
            a = np.ascontiguousarray(arrays[k])
            crc = zlib.crc32(f"{k}:{a.dtype.str}:{a.shape}".encode(), crc)
            crc = zlib.crc32(a.tobytes(), crc)
    return crc


def _forward_from_arrays(name, model, arrays, dtype):
    """Logits of `model` for the golden.npz batch, image features fed as mm_encoder_outputs (cast to `dtype`)."""
    import torch
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    kw = {k: torch.from_numpy(arrays[k]) for k in ("input_ids", "attention_mask", "token_type_ids",
                                                   "mm_token_type_ids") if k in arrays}
    if "image_embeds" in arrays:
        e = torch.from_numpy(arrays["image_embeds"]).to(dtype)
        pooled = e.reshape(-1, MODELS[name]["image_tokens"], e.shape[-1])   # [n_images, tokens, H]
        if "image_position_ids" in arrays:     # unified: a tuple of [n_i, H] per image
            pooled = tuple(pooled)
        kw["mm_encoder_outputs"] = {"image": BaseModelOutputWithPooling(pooler_output=pooled)}
    with torch.no_grad():
        return model(**generation_masks(model, kw), use_cache=False).logits


def bf16_golden_arrays(name, path, model, arrays):
    """golden_bf16.npz for the checkpoint saved at `path` (float32 `model`) and the batch of golden.npz `arrays`."""
    import copy
    import torch
    import transformers as T
    spec = MODELS[name]
    # the batch is rebuilt exactly: the float32 model gives golden.npz's logits bit for bit
    assert torch.equal(_forward_from_arrays(name, model, arrays, torch.float32),
                       torch.from_numpy(arrays["logits"])), "batch rebuilt from golden arrays differs"
    cls = getattr(T, spec["arch"])
    bf = cls.from_pretrained(path, attn_implementation="eager", dtype=torch.bfloat16).eval()
    for n, p in bf.named_parameters():
        assert p.dtype == torch.bfloat16, (n, p.dtype)
    for n, b in bf.named_buffers():
        if n.endswith("inv_freq"):
            assert b.dtype == torch.float32, (n, b.dtype)       # RoPE frequencies stay float32
        elif b.is_floating_point():
            assert b.dtype == torch.bfloat16, (n, b.dtype)      # layer_scalar, embed_scale
    up = copy.deepcopy(bf).float()
    for n, t in list(up.named_parameters()) + list(up.named_buffers()):
        if t.is_floating_point() and not n.endswith("inv_freq"):
            assert torch.equal(t, t.to(torch.bfloat16).float()), n
    with torch.no_grad():
        lb = _forward_from_arrays(name, bf, arrays, torch.bfloat16)
        lw = _forward_from_arrays(name, up, arrays, torch.float32)
    assert lb.dtype == torch.bfloat16 and lw.dtype == torch.float32
    out = dict(logits_bf16=lb.float().numpy().astype(np.float32), logits_bf16_weights=lw.numpy().astype(np.float32))
    mask = arrays["attention_mask"].astype(bool)
    for k, v in out.items():
        assert np.all(np.isfinite(v[mask])), k
        assert v.shape == arrays["logits"].shape, k
    assert not np.array_equal(out["logits_bf16"], out["logits_bf16_weights"])
    meta = dict(name=name, architecture=spec["arch"], model_type=model.config.model_type, seed=spec["seed"],
                attn_implementation="eager",
                inputs="golden.npz: " + ", ".join(k for k in BATCH_INPUT_KEYS if k in arrays),
                inputs_crc32=inputs_crc32(arrays),
                logits_bf16="from_pretrained(dtype=bfloat16): bf16 weights, bf16 activations (float32 copy)",
                logits_bf16_weights="the same bf16 model .float(): bf16-valued weights, float32 compute",
                logits_compare="only where attention_mask == 1", **versions())
    out["meta"] = np.array(json.dumps(meta, sort_keys=True))
    return out


def generate_one(name):
    """(model, {file name: arrays} for golden.npz and golden_bf16.npz, config.json dict, safetensors tensors)
    regenerated in memory."""
    import torch
    from safetensors.torch import load_file
    import transformers
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    model = build_model(name)
    arrays = golden_arrays(name, model)
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(model, tmp)
        tensors = {k: v.numpy() for k, v in load_file(os.path.join(tmp, "model.safetensors")).items()}
        with open(os.path.join(tmp, "config.json")) as f:
            config = json.load(f)
        check_round_trip(name, tmp, arrays)
        arrays_bf16 = bf16_golden_arrays(name, tmp, model, arrays)
    return model, {"golden.npz": arrays, "golden_bf16.npz": arrays_bf16}, config, tensors


def check_round_trip(name, path, arrays):
    """from_pretrained(path) must reproduce the golden logits exactly (nothing lost by save_pretrained)."""
    import torch
    import transformers as T
    cls = getattr(T, MODELS[name]["arch"])
    model = cls.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
    # Loaded tensors sit in the file's mapping at offsets that need not be 64-byte aligned, and some
    # CPUs' BLAS sums in another order for unaligned operands (1e-7 off on the MoE checkpoint on an
    # AMD EPYC): compare freshly allocated copies, so that only what save_pretrained kept decides.
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.clone()
    kw = {k: torch.from_numpy(arrays[k]) for k in ("input_ids", "attention_mask", "token_type_ids",
                                                   "mm_token_type_ids", "pixel_values", "image_position_ids")
          if k in arrays}
    with torch.no_grad():
        logits = model(**generation_masks(model, kw), use_cache=False).logits.numpy()
    if not np.array_equal(logits, arrays["logits"]):
        raise AssertionError(f"{name}: reloaded checkpoint gives different logits "
                             f"(max diff {np.abs(logits - arrays['logits']).max():.3g})")


def compare(name, out_dir, goldens, config, tensors):
    """List of differences between regenerated data and the committed files (empty = identical within TOL).
    goldens: {npz file name: arrays}, as generate_one returns."""
    from safetensors.numpy import load_file
    d = os.path.join(out_dir, name)
    problems = []
    with open(os.path.join(d, "config.json")) as f:
        old_cfg = json.load(f)
    if old_cfg != config:
        problems.append("config.json differs")
    old_t = load_file(os.path.join(d, "model.safetensors"))
    if set(old_t) != set(tensors):
        problems.append(f"safetensors keys differ: {sorted(set(old_t) ^ set(tensors))}")
    for k in sorted(set(old_t) & set(tensors)):
        if old_t[k].shape != tensors[k].shape or not np.array_equal(old_t[k], tensors[k]):
            problems.append(f"weight {k} differs")
    for fname, arrays in goldens.items():
        path = os.path.join(d, fname)
        if not os.path.exists(path):
            problems.append(f"{fname} is missing")
            continue
        problems += [f"{fname}: {p}" for p in _compare_npz(path, arrays)]
    bf16_path = os.path.join(d, "golden_bf16.npz")
    if os.path.exists(bf16_path) and os.path.exists(os.path.join(d, "golden.npz")):
        # The committed bf16 goldens must come from the committed batch, whatever CPU regenerates them.
        with np.load(os.path.join(d, "golden.npz")) as g, np.load(bf16_path) as b:
            if json.loads(str(b["meta"])).get("inputs_crc32") != inputs_crc32({k: g[k] for k in g.files}):
                problems.append("golden_bf16.npz: inputs_crc32 is not that of the committed golden.npz batch")
    return problems


def _compare_npz(path, arrays):
    problems = []
    with np.load(path) as old:
        if set(old.files) != set(arrays):
            problems.append(f"golden keys differ: {sorted(set(old.files) ^ set(arrays))}")
        same_cpu = "meta" in old.files and "meta" in arrays and \
            json.loads(str(old["meta"])).get("cpu") == json.loads(str(arrays["meta"])).get("cpu")
        for k in sorted(set(old.files) & set(arrays)):
            a, b = old[k], arrays[k]
            if k == "meta":
                ma, mb = json.loads(str(a)), json.loads(str(b))
                # Versions and CPU are recorded, not compared. On another CPU kind the image features
                # (floats in the batch) differ within tolerance, so the batch's CRC does too; compare()
                # checks it against the committed batch instead.
                for v in ("transformers", "torch", "cpu") + (() if same_cpu else ("inputs_crc32",)):
                    ma.pop(v, None), mb.pop(v, None)
                if ma != mb:
                    problems.append("meta differs")
                continue
            tol = TOL if same_cpu else CROSS_CPU_TOL.get(k, CROSS_CPU_TOL_F32)
            if a.shape != b.shape or a.dtype != b.dtype:
                problems.append(f"{k}: shape/dtype {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}")
            elif np.issubdtype(a.dtype, np.floating):
                err = np.abs(a.astype(np.float64) - b.astype(np.float64)) / np.maximum(1.0, np.abs(a))
                if err.size and float(err.max()) > tol:
                    problems.append(f"{k}: max rel/abs diff {float(err.max()):.3g} > {tol}"
                                    + ("" if same_cpu else " (recorded on another kind of CPU)"))
            elif not np.array_equal(a, b):
                problems.append(f"{k} differs")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", action="append", choices=sorted(MODELS), help="restrict to these models")
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    args = ap.parse_args(argv)
    bad = 0
    for name in args.only or list(MODELS):
        model, goldens, config, tensors = generate_one(name)
        d = os.path.join(args.out, name)
        if args.check:
            problems = compare(name, args.out, goldens, config, tensors)
            print(("ok   " if not problems else "DIFF ") + d)
            for p in problems:
                print("     " + p)
            bad += bool(problems)
        else:
            save_checkpoint(model, d)
            for fname, arrays in goldens.items():
                np.savez_compressed(os.path.join(d, fname), **arrays)
            sizes = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}
            print(f"wrote {d} {sizes} gen_min_margin={float(goldens['golden.npz']['gen_min_margin']):.4f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
