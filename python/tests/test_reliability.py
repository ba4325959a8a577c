"""Issue 17 from Python: special files and deep JSON never block or crash the interpreter, and
nonsense arguments (out-of-range integers, head_dim 0, negative max_new_tokens, a config that
disagrees with its checkpoint) give a ValueError naming the argument or field."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tessera
from helpers.models import MODELS_DIR

TEXT_MODEL = os.path.join(MODELS_DIR, "gemma3_text")


@pytest.fixture(scope="module")
def model():
    return tessera.Model.load(TEXT_MODEL, max_context=64)


def copy_model(tmp_path, edit=None):
    d = tmp_path / "m"
    shutil.copytree(TEXT_MODEL, d)
    if edit is not None:
        cfg = json.loads((d / "config.json").read_text())
        edit(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def run_isolated(code, timeout=60):
    """Runs `code` in a fresh interpreter (a crash or hang there must not take pytest with it)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(tessera.__file__))] +
                                                      sys.path))
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {timeout} s (blocked?)")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_fifo_in_a_checkpoint_is_an_immediate_error(tmp_path, name):
    d = copy_model(tmp_path)
    os.remove(d / name)
    os.mkfifo(d / name)
    r = run_isolated(f"""
        import tessera
        try:
            tessera.Model.load({str(d)!r})
        except ValueError as e:
            print("ERROR:", e)
        """)
    assert r.returncode == 0, r.stderr
    assert "ERROR:" in r.stdout and name in r.stdout and "FIFO" in r.stdout, r.stdout


def test_deeply_nested_config_is_an_error_not_a_crash(tmp_path):
    d = copy_model(tmp_path)
    text = (d / "config.json").read_text().replace('"full_attention": {', '"full_attention": {"deep": ' +
                                                     "[" * 150000 + "]" * 150000 + ", ", 1)
    (d / "config.json").write_text(text)
    r = run_isolated(f"""
        import tessera
        try:
            tessera.Model.load({str(d)!r})
        except ValueError as e:
            print("ERROR:", e)
        """)
    assert r.returncode == 0, f"interpreter died with {r.returncode}: {r.stderr[-500:]}"
    assert "nests deeper" in r.stdout and "config.json" in r.stdout, r.stdout


def test_config_that_disagrees_with_the_checkpoint(tmp_path):
    def fewer_layers(cfg):
        cfg["num_hidden_layers"] = 3
        cfg["layer_types"] = cfg["layer_types"][:3]

    with pytest.raises(ValueError, match="num_hidden_layers"):
        tessera.Model.load(copy_model(tmp_path / "a", fewer_layers))
    with pytest.raises(ValueError, match="tie_word_embeddings.*lm_head.weight"):
        tessera.Model.load(copy_model(tmp_path / "b", lambda cfg: cfg.update(tie_word_embeddings=False)))


@pytest.mark.parametrize("kwargs, name", [
    (dict(max_context=2**70), "max_context"),
    (dict(max_batch=2**63), "max_batch"),
    (dict(max_chunk=-(2**64)), "max_chunk"),
    (dict(num_threads=2**40), "num_threads"),
    (dict(num_threads=-1), "num_threads"),
])
def test_load_integers_out_of_range_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        tessera.Model.load(TEXT_MODEL, **kwargs)


def test_generate_rejects_negative_and_huge_counts(model):
    ids = np.array([[2, 5, 7]])
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(ids, max_new_tokens=-1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(ids, max_new_tokens=2**64)
    with pytest.raises(ValueError, match="top_k"):
        model.generate(ids, max_new_tokens=1, top_k=2**70)
    with pytest.raises(ValueError, match="seed"):
        model.generate(ids, max_new_tokens=1, seed=-1)
    with pytest.raises(ValueError, match="stop_tokens"):
        model.generate(ids, max_new_tokens=1, stop_tokens=[2**40])
    assert model.generate(ids, max_new_tokens=0) == [[]]


def test_forward_token_ids_outside_int32_name_the_argument(model):
    with pytest.raises(ValueError, match="input_ids"):
        model.forward(np.array([[2, 2**40]]))
    with pytest.raises(ValueError, match="token_type_ids"):
        model.forward(np.array([[2, 3]]), token_type_ids=np.array([[0, 2**40]]))


def test_attention_head_dim_zero_is_a_clear_error():
    q = np.zeros((1, 2, 3, 0), np.float32)
    with pytest.raises(ValueError, match="head_dim"):
        tessera.attention(q, q, q)


@pytest.mark.parametrize("kwargs, name", [
    (dict(window=(2**40, 0)), "window"),
    (dict(window=(0, -(2**33))), "window"),
    (dict(num_threads=2**40), "num_threads"),
])
def test_attention_integers_out_of_range_name_the_argument(kwargs, name):
    q = np.zeros((1, 2, 3, 8), np.float32)
    with pytest.raises(ValueError, match=name):
        tessera.attention(q, q, q, **kwargs)
    if "window" in kwargs:
        with pytest.raises(ValueError, match=name):
            tessera.attention_bias(1, 3, 3, **kwargs)


def test_attention_bias_sizes_out_of_range_name_the_argument():
    with pytest.raises(ValueError, match="s_kv"):
        tessera.attention_bias(1, 3, 2**70)


def test_kv_attend_head_dim_zero_and_window_out_of_range():
    import tessera.kv as tkv
    store = tkv.DenseStore(1, 2, 8, 4)
    with pytest.raises(ValueError, match="head_dim"):
        tkv.attend(store, np.zeros((1, 2, 1, 0), np.float32))
    with pytest.raises(ValueError, match="window"):
        tkv.attend(store, np.zeros((1, 2, 1, 8), np.float32), window=(2**40, 0))


@pytest.mark.parametrize("make, name", [
    (lambda: tessera.kv.DenseStore(2**64, 1, 8, 16), "batch"),
    (lambda: tessera.kv.RingStore(1, 1, 8, 4, -2**64), "max_chunk"),
    (lambda: tessera.kv.ConcatStore(1, 2**70, 8), "kv_heads"),
    (lambda: tessera.kv.DenseStore(1, 1, 8, 16).rewind(0, 2**64), "n"),
    (lambda: tessera.kv.DenseStore(1, 1, 8, 16).write_pos(2**63), "b"),
    (lambda: tessera.kv.kv_memory_plan({"layers": [("full", 1, 8, 8)], "max_context": 2**64}), "max_context"),
])
def test_kv_integers_out_of_range_name_the_argument(make, name):
    with pytest.raises(ValueError, match=name):
        make()


@pytest.mark.parametrize("kwargs, name", [
    (dict(opset=2**40), "opset"), (dict(num_threads=-1), "num_threads"), (dict(is_causal=2**64), "is_causal"),
    (dict(q_num_heads=2**64, kv_num_heads=1), "q_num_heads"),
])
def test_onnx_attention_integers_out_of_range_name_the_argument(kwargs, name):
    q = np.zeros((1, 2, 3, 8), np.float32)
    with pytest.raises(ValueError, match=name):
        tessera.onnx.attention(q, q, q, **kwargs)


def test_onnx_gqa_and_scatter_integers_out_of_range_name_the_argument():
    q = np.zeros((1, 3, 16), np.float32)
    with pytest.raises(ValueError, match="num_heads"):
        tessera.onnx.group_query_attention(q, q, q, None, None, np.array([2], np.int32), 3, num_heads=2**64,
                                           kv_num_heads=2)
    with pytest.raises(ValueError, match="axis"):
        tessera.onnx.tensor_scatter(np.zeros((1, 2, 4, 8), np.float32), np.zeros((1, 2, 1, 8), np.float32),
                                    axis=2**64)
