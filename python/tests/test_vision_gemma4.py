"""Gemma 4 vision tower + embed_vision, and Gemma 4 unified's patch embedder, against transformers.

Each case builds (or reads) a checkpoint, feeds the same pixel patches and positions to
transformers' `get_image_features(...).pooler_output` and to `tessera.Model.encode_pixels`, and
compares the concatenated soft tokens. Error metric: max |got - want| / max |want| over the call.

TOL_F32: float32 on both sides, summed in another order (blocked GEMM, tiled online softmax): a few
float32 ulps per op, far under 1e-4 (the project's conformance target), while a wrong position,
norm or pooling slot moves soft tokens by O(1) relative.
bf16 weights: Tessera computes in f32 on them, so it must match transformers run in f32 on the same
(exactly widened) weights to TOL_F32; against transformers run all in bf16 (what a user gets) the
bound is bf16_tol: as test_model_conformance.py's 4 * layers * 2^-8 from bf16 precision, counting
the patch embedder and the pooler + embedder as two more stages of rounded matmuls and norms.

`python python/tests/test_vision_gemma4.py --write-goldens` rewrites the small goldens the C++ test
(tests/vision_gemma4_test.cc) reads from tests/testdata/vision/.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch") if __name__ != "__main__" else __import__("torch")
import transformers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TINY = os.path.join(ROOT, "tests", "testdata", "models")
GOLDEN_DIR = os.path.join(ROOT, "tests", "testdata", "vision")
TOL_F32 = 1e-4
BF16_ULP = 2.0 ** -8


def bf16_tol(num_layers):
    return 4 * (num_layers + 2) * BF16_ULP


def patch_inputs(seed, grids, max_soft, k, patch):
    """Pixel patches [B, R, patch^2 * 3] in [0, 1] and positions [B, R, 2] for images of
    grids[i] = (columns, rows) patches (multiples of k), padded to R = max_soft * k^2 rows."""
    rng = np.random.default_rng(seed)
    R, P = max_soft * k * k, patch * patch * 3
    pv = np.zeros((len(grids), R, P), np.float32)
    pos = np.full((len(grids), R, 2), -1, np.int64)
    for b, (gw, gh) in enumerate(grids):
        assert gw % k == 0 and gh % k == 0 and gw * gh <= R
        xy = np.array([(x, y) for y in range(gh) for x in range(gw)], np.int64)
        pos[b, : len(xy)] = xy
        pv[b, : len(xy)] = rng.random((len(xy), P), dtype=np.float32)
    return pv, pos


def reference(model, pv, pos):
    with torch.no_grad():
        feats = model.model.get_image_features(torch.from_numpy(pv).to(model.dtype), torch.from_numpy(pos))
    return torch.cat(list(feats.pooler_output)).float().numpy()


def rel_err(got, want):
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    return float(np.abs(got - want).max() / np.abs(want).max())


def tessera_model(path, dtype="float32", **kw):
    tessera = pytest.importorskip("tessera")
    if not hasattr(tessera.Model, "encode_pixels"):
        pytest.skip("tessera.Model.encode_pixels is not built yet (the engine glue lands separately)")
    return tessera.Model.load(str(path), dtype=dtype, **kw)


def encode(model, pv, pos):
    return np.asarray(model.encode_pixels(pv, image_position_ids=pos), np.float32)


def perturb(model, seed, clip=False, standardize=False, weight_std=None):
    """Random vision weights (transformers' init leaves norms and tables at 1): norm weights 1 +
    N(0, 0.2^2); matrices and tables N(0, 1 / fan_in), or N(0, weight_std^2) when given."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "language_model" in name:
                continue
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                # Attention runs at scaling 1.0: q/k norm weights ~ head_dim^-1/4 keep the scores
                # O(1), as a trained tower's do; at ~1 the scores are O(head_dim^1/2) and each layer
                # multiplies float32 rounding noise, so a 16-layer tower is chaotic in float32 itself.
                p.copy_((1.0 + 0.2 * torch.randn(p.shape, generator=g)) * p.shape[-1] ** -0.25)
            elif name.endswith("norm.weight") or "layernorm" in name or "_ln" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1] if p.dim() > 1 else 1
                std = weight_std if weight_std is not None else max(fan_in, 1) ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
        for name, b in model.named_buffers():
            if clip and name.endswith(("input_min", "output_min")):
                b.fill_(-0.5 - torch.rand((), generator=g).item())
            elif clip and name.endswith(("input_max", "output_max")):
                b.fill_(0.5 + torch.rand((), generator=g).item())
            elif standardize and name.endswith("std_bias"):
                b.copy_(torch.randn(b.shape, generator=g))
            elif standardize and name.endswith("std_scale"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
    return model


def build_gemma4(path, seed, dtype=torch.float32, weight_std=None, **vision):
    config = transformers.Gemma4Config.from_pretrained(os.path.join(TINY, "gemma4"))
    for key, value in vision.items():
        setattr(config.vision_config, key, value)
    torch.manual_seed(seed)
    model = perturb(transformers.Gemma4ForConditionalGeneration(config).eval(), seed,
                    clip=vision.get("use_clipped_linears", False), standardize=vision.get("standardize", False),
                    weight_std=weight_std)
    model = model.to(dtype)
    model.save_pretrained(str(path))
    return model


def load_tiny(name, dtype=torch.float32):
    cls = {"gemma4": transformers.Gemma4ForConditionalGeneration,
           "gemma4_unified": transformers.Gemma4UnifiedForConditionalGeneration}[name]
    return cls.from_pretrained(os.path.join(TINY, name), dtype=dtype).eval()


def unified_inputs(seed, grids, max_soft, config):
    v = config.vision_config
    return patch_inputs(seed, grids, max_soft, 1, v.patch_size * v.pooling_kernel_size)


# --- committed tiny checkpoints ---------------------------------------------------------------

@pytest.mark.parametrize("grids", [[(4, 2)], [(4, 2), (2, 6), (6, 4)]])
def test_tiny_gemma4_f32(grids):
    ref_model = load_tiny("gemma4")
    pv, pos = patch_inputs(1, grids, max_soft=6, k=2, patch=2)
    want = reference(ref_model, pv, pos)
    got = encode(tessera_model(os.path.join(TINY, "gemma4")), pv, pos)
    assert rel_err(got, want) < TOL_F32
    # The tower's weights are never block-quantized: matmul precision int8 encodes as f32 does.
    int8 = encode(tessera_model(os.path.join(TINY, "gemma4"), matmul_precision="int8"), pv, pos)
    np.testing.assert_array_equal(int8, got)


@pytest.mark.parametrize("grids", [[(3, 2)], [(3, 2), (1, 5), (4, 4)]])
def test_tiny_unified_f32(grids):
    ref_model = load_tiny("gemma4_unified")
    pv, pos = unified_inputs(2, grids, 16, ref_model.config)
    want = reference(ref_model, pv, pos)
    got = encode(tessera_model(os.path.join(TINY, "gemma4_unified")), pv, pos)
    assert rel_err(got, want) < TOL_F32


def test_demo_unified_bf16():
    path = os.path.join(ROOT, "models", "demo-gemma4-unified")
    if not os.path.isdir(path):
        pytest.skip("models/demo-gemma4-unified is not present")
    cls = transformers.Gemma4UnifiedForConditionalGeneration
    pv, pos = unified_inputs(3, [(5, 3), (2, 2)], 16, transformers.AutoConfig.from_pretrained(path))
    got = encode(tessera_model(path, dtype="auto"), pv, pos)
    check_bf16(got, lambda dtype: reference(cls.from_pretrained(path, dtype=dtype).eval(), pv, pos), 0)


def check_bf16(got, run_reference, num_layers):
    """bf16 weights (see the module docstring): exact against f32 compute, bf16_tol against bf16."""
    exact = run_reference(torch.float32)
    assert rel_err(got, exact) < TOL_F32
    assert rel_err(got, run_reference(torch.bfloat16)) < bf16_tol(num_layers)


# --- other shapes built here ------------------------------------------------------------------

GEMMA4_SHAPES = {
    "deeper_gqa": dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                       hidden_size=32, intermediate_size=48),
    "clipped_standardized": dict(num_hidden_layers=2, use_clipped_linears=True, standardize=True),
    "kernel3_mqa": dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=12,
                        hidden_size=24, intermediate_size=40, pooling_kernel_size=3, patch_size=3,
                        position_embedding_size=32),
}


@pytest.mark.parametrize("shape", sorted(GEMMA4_SHAPES))
def test_gemma4_shapes_f32(tmp_path, shape):
    ref_model = build_gemma4(tmp_path, seed=7, **GEMMA4_SHAPES[shape])
    v = ref_model.config.vision_config
    k = v.pooling_kernel_size
    grids = [(2 * k, 3 * k), (4 * k, k), (k, k)]
    pv, pos = patch_inputs(4, grids, max_soft=14, k=k, patch=v.patch_size)
    want = reference(ref_model, pv, pos)
    got = encode(tessera_model(tmp_path), pv, pos)
    assert rel_err(got, want) < TOL_F32


def test_gemma4_bf16_weights(tmp_path):
    build_gemma4(tmp_path, seed=8, dtype=torch.bfloat16, **GEMMA4_SHAPES["deeper_gqa"])
    pv, pos = patch_inputs(5, [(4, 6), (2, 2)], max_soft=8, k=2, patch=2)
    got = encode(tessera_model(tmp_path, dtype="auto"), pv, pos)
    cls = transformers.Gemma4ForConditionalGeneration
    check_bf16(got, lambda dtype: reference(cls.from_pretrained(str(tmp_path), dtype=dtype).eval(), pv, pos),
               GEMMA4_SHAPES["deeper_gqa"]["num_hidden_layers"])


# --- the real Gemma 4 vision shape (transformers' config defaults) at budget 280 -----------------

REAL_FIELDS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "head_dim", "patch_size", "pooling_kernel_size", "position_embedding_size"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gemma4_real_shape(tmp_path, dtype):
    defaults = transformers.Gemma4VisionConfig()
    real = {key: getattr(defaults, key) for key in REAL_FIELDS}
    build_gemma4(tmp_path, seed=9, dtype=getattr(torch, dtype), **real)
    # Two images at budget 280 (2520 patch rows each): 42 x 60 and 48 x 48 patches.
    pv, pos = patch_inputs(6, [(42, 60), (48, 48)], max_soft=280, k=3, patch=16)
    t0 = time.time()
    got = encode(tessera_model(tmp_path, dtype="auto"), pv, pos)
    t1 = time.time()
    cls = transformers.Gemma4ForConditionalGeneration
    errs = {}
    for ref_dtype in ([torch.float32] if dtype == "float32" else [torch.float32, torch.bfloat16]):
        t = time.time()
        errs[ref_dtype] = rel_err(got, reference(cls.from_pretrained(str(tmp_path), dtype=ref_dtype).eval(), pv, pos))
        print(f"real-shaped gemma4, {dtype} weights: transformers {ref_dtype} {time.time() - t:.1f}s, "
              f"rel err {errs[ref_dtype]:.2e}; tessera load + encode {t1 - t0:.1f}s")
    assert errs[torch.float32] < TOL_F32
    if torch.bfloat16 in errs:
        assert errs[torch.bfloat16] < bf16_tol(real["num_hidden_layers"])


# --- goldens for the C++ test -----------------------------------------------------------------

def write_goldens():
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    g4 = load_tiny("gemma4")
    pv, pos = patch_inputs(11, [(4, 2), (2, 4)], max_soft=4, k=2, patch=2)
    cases = {"gemma4": (pv, pos, reference(g4, pv, pos))}
    un = load_tiny("gemma4_unified")
    pv, pos = unified_inputs(12, [(3, 2), (2, 2)], 8, un.config)
    cases["gemma4_unified"] = (pv, pos, reference(un, pv, pos))
    for name, (pv, pos, out) in cases.items():
        np.save(os.path.join(GOLDEN_DIR, f"{name}_pixels.npy"), pv.reshape(-1, pv.shape[-1]))
        np.save(os.path.join(GOLDEN_DIR, f"{name}_positions.npy"), pos.reshape(-1, 2).astype(np.float32))
        np.save(os.path.join(GOLDEN_DIR, f"{name}_out.npy"), out.astype(np.float32))
        print(name, pv.shape, out.shape)


if __name__ == "__main__":
    if "--write-goldens" in sys.argv:
        write_goldens()
