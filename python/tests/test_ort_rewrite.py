# tessera.ort_rewrite: a decoder exported by onnxruntime-genai's model builder (the tiny Gemma 3
# text checkpoint, tests/testdata/models/gemma3_text) with its GroupQueryAttention nodes rewritten
# to com.tessera.TesseraGroupQueryAttention, run step by step in onnxruntime (prefill of 12 tokens,
# 3 decode steps), against transformers' Gemma3ForCausalLM on the same tokens:
# - text only: transformers' own masks (causal; window 8 on sliding layers, shorter than the prompt);
# - two image blocks: transformers given the mask built here pair by pair (window AND (causal OR
#   same block)), as a per-layer-type dict of 4-D masks.
# The sliding layers keep the export's window-sized caches (sliding_window_cache = 1, capacity 8
# here, shorter than the prompt); on text the rewritten decoder is also run against the export
# itself (onnxruntime's GroupQueryAttention evicting its own window) over more decode steps.
# Tolerance: ATOL = RTOL = 1e-5 on the logits (float32 throughout, other summation orders).
# The model builder (onnxruntime-genai 0.18.0) comes from `bash bench/setup_peers.sh --builder`
# (scripts/test.sh runs it), the end-to-end peers' venv, or TESSERA_ORTGENAI_PYTHON; without it
# those cases skip, saying so.
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.ort_rewrite import main as rewrite_main
from tessera.ort_rewrite import rewrite
from helpers.tolerances import ATOL, RTOL

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CKPT = os.path.join(ROOT, "tests", "testdata", "models", "gemma3_text")
BUILDER = os.path.join(ROOT, "bench", "e2e", "ortgenai_build.py")
LAYERS, HKV, D, WINDOW = 6, 2, 32, 8
PROMPT_BLOCKS = [0, 0, 1, 1, 1, 1, 1, 0, 2, 2, 0, 0]


def builder_python():
    for py in (os.environ.get("TESSERA_ORTGENAI_PYTHON"),
               os.path.join(ROOT, "bench", ".peers", "builder-venv", "bin", "python"),
               os.path.join(ROOT, "bench", ".peers", "venv", "bin", "python")):
        if py and os.path.exists(py) and subprocess.run([py, "-c", "import onnxruntime_genai.models"],
                                                        capture_output=True).returncode == 0:
            return py
    return None


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(checkpoint dir, rewritten model, the export itself) from the builder's fp32 CPU export."""
    py = builder_python()
    if py is None:
        pytest.skip("onnxruntime-genai's model builder is not installed (bash bench/setup_peers.sh --builder)")
    pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("rewrite")
    ckpt = tmp / "ckpt"
    shutil.copytree(CKPT, ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config["max_position_embeddings"] = 64  # the export's rotary tables; 131072 rows would be 33 MB
    (ckpt / "config.json").write_text(json.dumps(config))
    subprocess.run([py, BUILDER, "-i", str(ckpt), "-o", str(tmp / "onnx"), "-p", "fp32", "-e", "cpu",
                    "-c", str(tmp / "cache")], check=True, capture_output=True)
    export = onnx.load(str(tmp / "onnx" / "model.onnx"))
    return ckpt, rewrite(export), export


def window_capacities(model, capacity):
    """{past input: capacity} for the layers whose attention keeps a window-sized cache
    (sliding_window_cache = 1: the builder's sliding layers)."""
    caps = {}
    for node in model.graph.node:
        if any(a.name == "sliding_window_cache" and helper.get_attribute_value(a) == 1 for a in node.attribute):
            caps[node.input[3]] = caps[node.input[4]] = capacity
    return caps


def run_decoder(model, steps, blocks, window_capacity=WINDOW):
    """Steps of input ids through the decoder (blocks None: the unrewritten one); past = the
    previous step's present: growing caches for full layers, window-sized ones of
    `window_capacity` rows for sliding layers."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.register_custom_ops_library(tessera.onnx.onnxruntime_library())
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    caps = window_capacities(model, window_capacity)
    past = {n: np.zeros((1, HKV, caps.get(n, 0), D), np.float32)
            for n in (f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value"))}
    assert 0 < len(caps) < len(past)  # (the export has both kinds of layers)
    total, logits = 0, []
    for n, ids in enumerate(steps):
        total += len(ids)
        feeds = {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, total), np.int64), **past}
        if blocks is not None:
            feeds["block_ids"] = np.array([blocks[n]], np.int32)
        out = sess.run(None, feeds)
        logits.append(out[0][0])
        past = {n.replace("present", "past_key_values"): v for n, v in zip(names[1:], out[1:])}
    return logits


def run_decoder_shared(model, steps, blocks, capacity=16):
    """The same steps with onnxruntime-genai's past_present_share_buffer: one [1, Hkv, capacity, D]
    OrtValue per cache, bound as both past and present (the op writes in place)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.register_custom_ops_library(tessera.onnx.onnxruntime_library())
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    caches = {f"{i}.{kv}": ort.OrtValue.ortvalue_from_numpy(np.zeros((1, HKV, capacity, D), np.float32))
              for i in range(LAYERS) for kv in ("key", "value")}
    total, logits = 0, []
    for ids, blk in zip(steps, blocks):
        total += len(ids)
        io = sess.io_binding()
        io.bind_cpu_input("input_ids", np.array([ids], np.int64))
        io.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        io.bind_cpu_input("block_ids", np.array([blk], np.int32))
        io.bind_output("logits")  # first: get_outputs() follows the binding order
        for name, value in caches.items():
            io.bind_ortvalue_input(f"past_key_values.{name}", value)
            io.bind_ortvalue_output(f"present.{name}", value)
        sess.run_with_iobinding(io)
        logits.append(io.get_outputs()[0].numpy()[0])
    return logits, caches


@pytest.mark.parametrize("extra", [0, 3])
def test_window_caches_match_the_unrewritten_decoder(built, extra):
    """Window-sized caches on the sliding layers (capacity W + extra), a prompt longer than the
    window, decode steps across evictions: the rewritten decoder's logits are the export's own
    (onnxruntime's GroupQueryAttention with sliding_window_cache = 1) on text."""
    _, model, export = built
    rng = np.random.default_rng(2)
    steps = [rng.integers(10, 500, 12).tolist()] + [[int(t)] for t in rng.integers(10, 500, 6)]
    ours = run_decoder(model, steps, [[0] * len(s) for s in steps], WINDOW + extra)
    theirs = run_decoder(export, steps, None, WINDOW + extra)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"step {k}")


def test_shared_buffers_give_the_same_logits(built):
    """In place on fixed-capacity caches: the same logits, bit for bit, as with growing caches
    (window-sized on the sliding layers)."""
    _, model, _ = built
    rng = np.random.default_rng(1)
    steps = [rng.integers(10, 500, len(PROMPT_BLOCKS)).tolist(), [7], [9]]
    blocks = [PROMPT_BLOCKS, [0], [0]]
    grown = run_decoder(model, steps, blocks)
    shared, caches = run_decoder_shared(model, steps, blocks)
    for a, b in zip(grown, shared):
        assert np.array_equal(a, b)
    assert not caches["0.key"].numpy()[:, :, len(PROMPT_BLOCKS) + 2:].any()  # rows past the tokens untouched


def block_mask(blocks, window):
    """[1, 1, n, n] additive mask, pair by pair: in the window and (causal or the same block)."""
    n = len(blocks)
    m = np.full((1, 1, n, n), -np.inf, np.float32)
    for i in range(n):
        for j in range(n):
            if (window < 0 or i - j < window) and (j <= i or (blocks[i] > 0 and blocks[i] == blocks[j])):
                m[0, 0, i, j] = 0.0
    return m


@pytest.mark.parametrize("with_blocks", [False, True])
def test_rewritten_decoder_matches_transformers(built, with_blocks):
    import torch
    from transformers import AutoModelForCausalLM
    ckpt, model, _ = built
    rng = np.random.default_rng(0)
    steps = [rng.integers(10, 500, len(PROMPT_BLOCKS)).tolist(), [7], [9], [11]]
    prompt_blocks = PROMPT_BLOCKS if with_blocks else [0] * len(PROMPT_BLOCKS)
    logits = run_decoder(model, steps, [prompt_blocks, [0], [0], [0]])
    ids = torch.tensor([sum(steps, [])])
    hf = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32, attn_implementation="eager")
    all_blocks = prompt_blocks + [0] * 3
    with torch.no_grad():
        if with_blocks:
            masks = {"full_attention": torch.from_numpy(block_mask(all_blocks, -1)),
                     "sliding_attention": torch.from_numpy(block_mask(all_blocks, WINDOW))}
            want = hf(ids, attention_mask=masks).logits[0].numpy()
        else:
            want = hf(ids).logits[0].numpy()
    n = len(PROMPT_BLOCKS)
    np.testing.assert_allclose(logits[0], want[:n], rtol=RTOL, atol=ATOL)
    for k in range(1, 4):
        np.testing.assert_allclose(logits[k][-1], want[n + k - 1], rtol=RTOL, atol=ATOL)


# --- the rewrite itself, on one-node graphs -------------------------------------------------------

def gqa_model(extra_inputs=(), **attrs):
    names = ["q", "k", "v", "pk", "pv", "seqlens_k", "total", "cos", "sin", *extra_inputs]
    node = helper.make_node("GroupQueryAttention", names, ["out", "present_k", "present_v"], name="attn",
                            domain="com.microsoft", num_heads=2, kv_num_heads=1, **attrs)
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names if n]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("out", "present_k", "present_v")]
    return helper.make_model(helper.make_graph([node], "g", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


def test_rewrite_keeps_inputs_and_attributes():
    model = rewrite(gqa_model(do_rotary=1, local_window_size=4, softcap=30.0, sliding_window_cache=1))
    node = model.graph.node[0]
    assert (node.domain, node.op_type) == ("com.tessera", "TesseraGroupQueryAttention")
    assert list(node.input) == ["q", "k", "v", "pk", "pv", "seqlens_k", "total", "cos", "sin", "block_ids"]
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute} == {
        "num_heads": 2, "kv_num_heads": 1, "do_rotary": 1, "local_window_size": 4, "softcap": 30.0,
        "sliding_window_cache": 1}
    block = model.graph.input[-1]
    assert block.name == "block_ids" and block.type.tensor_type.elem_type == TensorProto.INT32
    assert [d.dim_param for d in block.type.tensor_type.shape.dim] == ["batch", "seq"]
    assert ("com.tessera", 1) in [(o.domain, o.version) for o in model.opset_import]


@pytest.mark.parametrize("model,message", [
    (gqa_model(["pos_ids"]), "input position_ids \\('pos_ids'\\) is used"),
    (gqa_model(["", "bias"]), "input attention_bias \\('bias'\\) is used"),
    (gqa_model(smooth_softmax=1), "attribute smooth_softmax = 1"),
    (gqa_model(k_quant_type=b"PER_TENSOR"), "attribute k_quant_type"),
    (helper.make_model(helper.make_graph([], "g", [], [])), "no com.microsoft.GroupQueryAttention node"),
])
def test_rewrite_refuses_by_name(model, message):
    with pytest.raises(ValueError, match=message):
        rewrite(model)


def test_command_line(tmp_path, capsys):
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(gqa_model(), str(src))
    assert rewrite_main([str(src), str(dst)]) == 0
    assert onnx.load(str(dst)).graph.node[0].op_type == "TesseraGroupQueryAttention"
    onnx.save(gqa_model(smooth_softmax=1), str(src))
    assert rewrite_main([str(src), str(dst)]) == 2
    assert "attribute smooth_softmax = 1" in capsys.readouterr().err
