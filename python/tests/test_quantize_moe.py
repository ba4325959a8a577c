"""Quantize-on-load of a Gemma 4 MoE checkpoint (docs/moe.md, docs/quantization.md).

The reference is the model the quantized weights encode, dequantized by the gguf package (an
independent (de)quantizer): the dense matrices as tessera.quantize types them (taken from the same
checkpoint without its MoE block, written to a GGUF and dequantized), each expert's gate / up / down
rows quantized and dequantized by gguf.quants at the file type's base block type.

- Exact: loading that reference with quantize-on-load gives the logits of quantizing the original bit
  for bit. Values already on the block grid quantize back to the same blocks (checked here), so
  Tessera's blocks for every expert are gguf-py's.
- Accuracy: the quantized model is nearer (KL) the model its blocks encode than the f32 model is.
  The dense prefill bound of test_gguf_model.py (one 8-bit step of the largest logit) does not
  apply: an expert's group holds a few tokens, so its Linears take the int8 row-dot, which rounds
  each input to int8 per block, and on this tiny random checkpoint a small change flips routings
  (docs/moe.md).
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from test_gguf_model import PROMPT, dequantized_checkpoint, make_hf

import tessera

MOE_KEYS = (".router.", ".experts.", "_layernorm_1.", "_layernorm_2.")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("quantize_moe"))


def without_moe(hf, dst):
    """hf with enable_moe_block off and the MoE tensors dropped: the same dense tensors, the same layers."""
    from safetensors.numpy import load_file, save_file  # noqa: PLC0415
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    cfg.get("text_config", cfg)["enable_moe_block"] = False
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f)
    for name in os.listdir(hf):  # the tokenizer files
        if name not in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(hf, name), os.path.join(dst, name))
    w = load_file(os.path.join(hf, "model.safetensors"))
    dense = {k: v for k, v in w.items() if not any(s in k for s in MOE_KEYS)}
    assert len(dense) < len(w)
    save_file(dense, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst


def reference(work, hf, qtype):
    """hf with every matrix Tessera quantizes on load replaced by its gguf-py dequantization."""
    import gguf  # noqa: PLC0415
    from safetensors.numpy import load_file, save_file  # noqa: PLC0415
    dense_gguf = os.path.join(work, f"dense.{qtype}.gguf")
    types = tessera.quantize(without_moe(hf, os.path.join(work, "dense")), qtype, dense_gguf)
    # The experts' rows (64 and 32 values) take the base type, or Q4_K's fallback Q5_0 as the dense
    # matrices of these widths do.
    expert_type = {"q8_0": "q8_0", "q4_0": "q4_0", "q4_k_m": "q5_0"}[qtype]
    assert types["blk.0.ffn_gate.weight"] == expert_type
    dst = dequantized_checkpoint(hf, dense_gguf, os.path.join(work, f"deq_{qtype}"))
    w = load_file(os.path.join(dst, "model.safetensors"))
    q = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
         "q5_0": gguf.GGMLQuantizationType.Q5_0}[expert_type]
    experts = 0
    for k in list(w):
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            rows = w[k].reshape(-1, w[k].shape[-1]).astype(np.float32)
            blocks = gguf.quants.quantize(rows, q)
            deq = gguf.quants.dequantize(blocks, q)
            # on the grid: the same blocks again (what makes the exact comparison above hold)
            np.testing.assert_array_equal(gguf.quants.quantize(deq.astype(np.float32), q), blocks)
            w[k] = deq.reshape(w[k].shape).astype(np.float32)
            experts += 1
    assert experts == 8  # gate_up and down of each of the 4 layers
    save_file(w, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    return dst


def load(path, **kw):
    return tessera.Model.load(path, dtype="auto", max_context=64, **kw)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_k_m"])
def test_moe_quantize_on_load_logits(work, qtype):
    from test_gguf_model import kl  # noqa: PLC0415
    hf = make_hf(work, "gemma4_moe")
    x = np.asarray([PROMPT])
    got = load(hf, quantize=qtype).forward(x)[0]
    ref_dir = reference(work, hf, qtype)
    np.testing.assert_array_equal(load(ref_dir, quantize=qtype).forward(x)[0], got)
    deq = load(ref_dir).forward(x)[0]
    f32 = load(hf).forward(x)[0]
    print(f"{qtype}: max |got - deq| = {np.abs(got - deq).max():.3g} (max |deq| / 127 = {np.abs(deq).max() / 127:.3g}), "
          f"KL(deq || got) = {kl(deq, got):.3g}, KL(deq || f32) = {kl(deq, f32):.3g}")
    assert kl(deq, got) < kl(deq, f32)


def test_moe_quantize_to_gguf_refused(work, tmp_path):
    hf = make_hf(work, "gemma4_moe")
    with pytest.raises(ValueError, match=r"tensor \S*layers\.\d+\.\S+ of .* belongs to a mixture-of-experts block; writing MoE checkpoints to GGUF is not supported yet"):
        tessera.quantize(hf, "q8_0", str(tmp_path / "moe.gguf"))
    assert not os.path.exists(tmp_path / "moe.gguf")
