"""Quantize-on-load and tessera.quantize of a Gemma 4 MoE checkpoint (docs/moe.md, docs/quantizing.md).

The reference is the model the quantized weights encode, dequantized by the gguf package (an
independent (de)quantizer) from the GGUF tessera.quantize writes of the same checkpoint (its types and
bytes equal llama.cpp's quantizer's: test_quantize.py), expert stacks included.

- Exact: loading that reference with quantize-on-load gives the logits of quantizing the original bit
  for bit. Values already on the block grid quantize back to the same blocks (checked here for every
  expert stack), so quantizing on load and the GGUF agree expert by expert.
- Accuracy: the quantized model is nearer (KL) the model its blocks encode than the f32 model is.
  The dense prefill bound of test_gguf_model.py (one 8-bit step of the largest logit) does not
  apply: an expert's group holds a few tokens, so its Linears take the int8 row-dot, which rounds
  each input to int8 per block, and on this tiny random checkpoint a small change flips routings
  (docs/moe.md).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from test_gguf_model import PROMPT, dequantized_checkpoint, make_hf
from test_quantize import make_moe16

import tessera

@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("quantize_moe"))


def reference(work, hf, qtype):
    """hf with every matrix replaced by its gguf-py dequantization from tessera.quantize's GGUF of hf
    (whose types and bytes test_quantize.py holds to llama.cpp's quantizer)."""
    import gguf  # noqa: PLC0415
    name = os.path.basename(hf)
    path = os.path.join(work, f"{name}.{qtype}.gguf")
    tessera.quantize(hf, qtype, path)
    stacks = 0
    for t in gguf.GGUFReader(path).tensors:
        if t.name.endswith("_exps.weight"):
            cols = int(t.shape[0])
            deq = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1, cols).astype(np.float32)
            # on the grid: the same blocks again (what makes the exact comparison below hold)
            again = gguf.quants.quantize(deq, t.tensor_type)
            assert again.tobytes() == np.ascontiguousarray(t.data).tobytes(), t.name
            stacks += 1
    assert stacks == 8  # gate_up and down of each of the 4 layers
    return dequantized_checkpoint(hf, path, os.path.join(work, f"deq_{name}_{qtype}"), experts=True)


def load(path, **kw):
    return tessera.Model.load(path, dtype="auto", max_context=64, **kw)


# q4_k_m on the 16-expert copy: with exactly 8 experts llama.cpp's Q4_K_M stores attn_output as
# Q5_1 here (test_quantize.py compares those blocks with llama.cpp's; the model runs them in
# tests/session_verify_test.cc).
@pytest.mark.parametrize(("name", "qtype"), [("gemma4_moe", "q8_0"), ("gemma4_moe", "q4_0"), ("gemma4_moe16", "q4_k_m")])
def test_moe_quantize_on_load_logits(work, name, qtype):
    from test_gguf_model import kl  # noqa: PLC0415
    hf = make_moe16(work) if name == "gemma4_moe16" else make_hf(work, name)
    x = np.asarray([PROMPT])
    got = load(hf, quantize=qtype).forward(x)[0]
    ref_dir = reference(work, hf, qtype)
    np.testing.assert_array_equal(load(ref_dir, quantize=qtype).forward(x)[0], got)
    deq = load(ref_dir).forward(x)[0]
    f32 = load(hf).forward(x)[0]
    print(f"{qtype}: max |got - deq| = {np.abs(got - deq).max():.3g} (max |deq| / 127 = {np.abs(deq).max() / 127:.3g}), "
          f"KL(deq || got) = {kl(deq, got):.3g}, KL(deq || f32) = {kl(deq, f32):.3g}")
    assert kl(deq, got) < kl(deq, f32)
