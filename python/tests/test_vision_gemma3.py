"""Gemma 3's vision path (SigLIP tower + multimodal projector, src/vision/siglip_*) against
transformers live: Tessera's Model.encode_pixels vs Gemma3ForConditionalGeneration.get_image_features
(...).pooler_output on the same pixel tensors, several images per call.

Towers: the committed tiny checkpoint, other shapes built here with transformers (more layers and
heads, other grids and pooling kernels), bf16-stored weights, and (marked slow) a real-shaped
SigLIP-So400m tower at 896^2 (4096 patches) with f32 and bf16 weights.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tessera  # noqa: E402
from helpers.models import MODELS_DIR  # noqa: E402

REL_TOL = 1e-4  # max abs error / max abs reference, at f32
TINY = os.path.join(MODELS_DIR, "gemma3")


def rel_err(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def pixels(config, count, seed):
    g = torch.Generator().manual_seed(seed)
    v = config.vision_config
    return torch.randn(count, v.num_channels, v.image_size, v.image_size, generator=g)


def reference(model, pv):
    """transformers' soft tokens [count * mm_tokens_per_image, text hidden] in float32."""
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        out = model.model.get_image_features(pixel_values=pv.to(dtype)).pooler_output
    return out.float().reshape(-1, out.shape[-1]).numpy()


def randomize_vision(model, seed):
    """Random vision weights with non-trivial norms and biases (the default init zeroes biases and
    the projection)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "vision_tower" not in name and "multi_modal_projector" not in name:
                continue
            r = torch.randn(p.shape, generator=g)
            if name.endswith("mm_input_projection_weight"):
                p.copy_(r / p.shape[0] ** 0.5)
            elif p.ndim >= 2:
                p.copy_(r * (0.5 if "position_embedding" in name else 1.0 / np.prod(p.shape[1:]) ** 0.5))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * r if "mm_soft_emb_norm" not in name else 0.1 * r)
            else:
                p.copy_(0.1 * r)


def build(tmp_path, vision, mm_tokens, dtype=torch.float32, seed=0):
    """A Gemma3ForConditionalGeneration with the tiny checkpoint's text model and this vision tower,
    saved to tmp_path; returns (the transformers model, the directory)."""
    with open(os.path.join(TINY, "config.json")) as f:
        cfg = json.load(f)
    cfg["vision_config"].update(vision)
    cfg["mm_tokens_per_image"] = mm_tokens
    config = transformers.Gemma3Config(**{k: v for k, v in cfg.items() if k not in ("architectures",)})
    torch.manual_seed(seed)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    randomize_vision(model, seed + 1)
    model = model.to(dtype)
    out = str(tmp_path / "ckpt")
    model.save_pretrained(out)
    return model, out


def test_tiny_checkpoint_matches_get_image_features():
    model = transformers.Gemma3ForConditionalGeneration.from_pretrained(TINY, dtype=torch.float32).eval()
    pv = pixels(model.config, 3, seed=1)
    ref = reference(model, pv)
    got = tessera.Model.load(TINY, max_context=64).encode_pixels(pv.numpy())
    assert got.shape == ref.shape == (3 * 9, 64)
    assert rel_err(got, ref) <= REL_TOL, rel_err(got, ref)


SHAPES = {
    # more layers and heads; a 4 x 4 grid pooled 2 x 2
    "layers3_heads4": ({"hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 3,
                        "num_attention_heads": 4, "image_size": 16, "patch_size": 4}, 4),
    # a 14 x 14 grid (196 patches) pooled 2 x 2 into 49 tokens, head_dim 32
    "grid14": ({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 2, "image_size": 28, "patch_size": 2}, 49),
    # no pooling (kernel 1), one channel's worth of odd sizes: patch 3, head_dim 8
    "kernel1": ({"hidden_size": 40, "intermediate_size": 24, "num_hidden_layers": 2,
                 "num_attention_heads": 5, "image_size": 15, "patch_size": 3, "layer_norm_eps": 1e-5}, 25),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_other_towers_match_get_image_features(shape, tmp_path):
    vision, mm = SHAPES[shape]
    model, ckpt = build(tmp_path, vision, mm, seed=3)
    pv = pixels(model.config, 3, seed=4)
    got = tessera.Model.load(ckpt, max_context=64).encode_pixels(pv.numpy())
    ref = reference(model, pv)
    assert got.shape == ref.shape
    assert rel_err(got, ref) <= REL_TOL, rel_err(got, ref)


def test_bf16_weights_at_f32_match_the_same_weights_in_f32(tmp_path):
    vision, mm = SHAPES["layers3_heads4"]
    model, ckpt = build(tmp_path, vision, mm, dtype=torch.bfloat16, seed=5)
    pv = pixels(model.config, 2, seed=6)
    ref = reference(model.float(), pv)  # the stored bf16 values, computed in f32
    got = tessera.Model.load(ckpt, dtype="auto", max_context=64).encode_pixels(pv.numpy())
    assert rel_err(got, ref) <= REL_TOL, rel_err(got, ref)


def test_bf16_precision_is_close_to_transformers_in_bf16(tmp_path):
    vision, mm = SHAPES["grid14"]
    model, ckpt = build(tmp_path, vision, mm, dtype=torch.bfloat16, seed=7)
    pv = pixels(model.config, 2, seed=8)
    got = tessera.Model.load(ckpt, dtype="auto", matmul_precision="bfloat16", max_context=64).encode_pixels(pv.numpy())
    exact = reference(model.float(), pv)
    bf16 = reference(model.to(torch.bfloat16), pv)
    # Tessera rounds only the matmul inputs, transformers in bf16 every activation: both stay
    # within bf16's few units of 2^-8 of the f32 result, and Tessera is no further from it.
    assert rel_err(got, exact) <= 2e-2, rel_err(got, exact)
    assert rel_err(got, exact) <= rel_err(bf16, exact) + 1e-3, (rel_err(got, exact), rel_err(bf16, exact))


def test_bad_pixels_raise_naming_the_shape():
    m = tessera.Model.load(TINY, max_context=64)
    with pytest.raises(ValueError, match=r"shape \[3, 12, 10\]"):
        m.encode_pixels(np.zeros((1, 3, 12, 10), np.float32))


def test_non_finite_vision_weight_raises_naming_the_tensor(tmp_path):
    vision, mm = SHAPES["layers3_heads4"]
    model, _ = build(tmp_path, vision, mm, seed=11)
    with torch.no_grad():
        dict(model.named_parameters())["model.vision_tower.encoder.layers.1.mlp.fc1.weight"][3, 5] = float("nan")
    ckpt = str(tmp_path / "nan")
    model.save_pretrained(ckpt)
    m = tessera.Model.load(ckpt, max_context=64)
    with pytest.raises(ValueError, match=r"layers\.1\.mlp\.fc1\.weight.*non-finite"):
        m.encode_pixels(pixels(model.config, 1, seed=12).numpy())


# SigLIP-So400m as Gemma 3 uses it: 27 layers x 1152, 16 heads, MLP 4304, patch 14, 896^2.
SO400M = {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
          "image_size": 896, "patch_size": 14}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_real_shaped_tower(dtype, tmp_path):
    t0 = time.time()
    model, ckpt = build(tmp_path, SO400M, 256, dtype=getattr(torch, dtype), seed=9)
    pv = pixels(model.config, 1, seed=10)
    t1 = time.time()
    ref = reference(model.float(), pv)
    del model
    t2 = time.time()
    m = tessera.Model.load(ckpt, dtype="auto", max_context=64)
    got = m.encode_pixels(pv.numpy())
    t3 = time.time()
    err = rel_err(got, ref)
    print(f"\nSo400m {dtype} weights: build {t1 - t0:.1f}s, transformers {t2 - t1:.1f}s, "
          f"tessera load+encode {t3 - t2:.1f}s, rel err {err:.2e}")
    assert got.shape == (256, 64)
    assert err <= REL_TOL, err
