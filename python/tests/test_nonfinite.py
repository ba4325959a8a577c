"""Non-finite numbers (docs/reliability.md): never silently absorbed into plausible output.

Attention: a NaN/inf in a visible q or k makes its row NaN in every kernel, a masked key contributes
nothing whatever it holds. Weights: a checkpoint with a non-finite weight fails to load (ValueError
naming the tensor and element). Generation: non-finite logits stop generate() with a ValueError naming
the step and row instead of yielding a token.
"""
import os
import struct

import numpy as np
import pytest

import tessera
from helpers.inputs import qkv
from helpers.models import MODELS_DIR, copy_config, read_safetensors

KERNELS = ["reference", "prefill", "decode"]


def causal_problem(seed=0, B=1, H=4, S=80, D=32):
    """q, k, v [B, H, S, D]: as many kv heads as query heads, as many keys as queries."""
    return qkv(np.random.default_rng(seed), B=B, Hq=H, Hkv=H, S_q=S, S_kv=S, D=D, Dv=D)


@pytest.mark.parametrize("precision", ["f32", "bf16"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_attention_nan_query_row_is_nan(kernel, precision):
    q, k, v = causal_problem()
    q[0, 1, 30, 3] = np.nan
    out = tessera.attention(q, k, v, kernel=kernel, precision=precision, kv_dtype=precision)
    assert np.isnan(out[0, 1, 30]).all()
    out[0, 1, 30] = 0
    assert np.isfinite(out).all()


@pytest.mark.parametrize("precision", ["f32", "bf16"])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_attention_non_finite_key_and_value(kernel, precision, bad):
    # Causal: key 50 is visible to queries 50.. only. Its bad K makes exactly those rows NaN; its bad
    # V reaches exactly column 7 of those rows; earlier rows never see either.
    q, k, v = causal_problem(seed=1)
    k[0, :, 50, 5] = bad
    out = tessera.attention(q, k, v, kernel=kernel, precision=precision, kv_dtype=precision)
    assert np.isnan(out[0, :, 50:]).all()
    assert np.isfinite(out[0, :, :50]).all()
    q, k, v = causal_problem(seed=1)
    v[0, :, 50, 7] = bad
    out = tessera.attention(q, k, v, kernel=kernel, precision=precision, kv_dtype=precision)
    assert not np.isfinite(out[0, :, 50:, 7]).any()
    rest = np.ones(out.shape, bool)
    rest[0, :, 50:, 7] = False
    assert np.isfinite(out[rest]).all()


def patched_checkpoint(src, dst, suffix, index, value):
    """config.json + model.safetensors of `src` with element `index` of the F32 tensor named ...`suffix` set."""
    copy_config(src, dst)
    header, base, data = read_safetensors(os.path.join(src, "model.safetensors"))
    data = bytearray(data)
    key = next(k for k in header if k.endswith(suffix))
    assert header[key]["dtype"] == "F32"
    at = base + header[key]["data_offsets"][0] + 4 * index
    data[at:at + 4] = struct.pack("<f", value)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(data)
    return header[key]["shape"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("bad,name", [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")])
def test_non_finite_linear_weight_fails_to_load(tmp_path, dtype, bad, name):
    src = os.path.join(MODELS_DIR, "gemma3_text")
    shape = patched_checkpoint(src, tmp_path, "layers.1.mlp.down_proj.weight", 0, 0.0)
    patched_checkpoint(src, tmp_path, "layers.1.mlp.down_proj.weight", 2 * shape[1] + 9, bad)
    with pytest.raises(ValueError, match=r"tensor layers\.1\.mlp\.down_proj\.weight in .* has a non-finite value "
                                         rf"\({name}\) at \[2, 9\]"):
        tessera.Model.load(tmp_path, dtype=dtype, max_context=32)


def test_nan_activations_reach_the_logits_and_stop_generate():
    name = "gemma4_unified"
    z = dict(np.load(os.path.join(MODELS_DIR, name, "golden.npz")))
    model = tessera.Model.load(os.path.join(MODELS_DIR, name), max_batch=2, max_context=64, max_chunk=32)
    # NaN image features: the logits of the positions that attend to them are NaN, the others finite.
    embeds = np.full_like(z["image_embeds"], np.nan)
    logits = model.forward(z["input_ids"], z["attention_mask"], mm_token_type_ids=z["mm_token_type_ids"],
                           image_embeds=embeds)
    for b in range(logits.shape[0]):
        real = z["attention_mask"][b].astype(bool)
        image = real & (z["mm_token_type_ids"][b] != 0)
        if not image.any():
            continue
        first = int(np.argmax(image))
        assert np.isnan(logits[b, first:][real[first:]]).all(), b
        assert np.isfinite(logits[b, :first][real[:first]]).all(), b
    # generate() refuses to pick a token from NaN logits.
    with pytest.raises(ValueError, match=r"Generate: step 0, row 0: Sampler: logit of token \d+ is nan"):
        model.generate(z["gen_prompt"], 4, mm_token_type_ids=z["gen_mm_token_type_ids"],
                       image_embeds=np.full_like(z["gen_image_embeds"], np.nan), stop_tokens=[])
