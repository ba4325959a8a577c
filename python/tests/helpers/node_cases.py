"""The ONNX backend node tests (onnx.backend.test.case.node, shipped with the onnx package) of the
operators tessera.onnx implements: Attention (opsets 23-25) and TensorScatter (opset 24). Each case
is one node with its inputs and the outputs onnx's reference implementation expects; it runs
through tessera.onnx and is judged by onnx's own comparison (Runner.assert_similar_outputs with the
case's rtol/atol, two bfloat16 ulps for bfloat16 outputs, and the exact output dtype).

classify(case) -> ("pass" | "refuse" | "generic" | "fail", detail): "refuse" is a ValueError from
tessera.onnx (an input or attribute it does not implement, said by name); "generic" is Python's own
TypeError (an unknown keyword: a refusal that does not say why); anything else that goes wrong is a
failure. strict_dtype=False casts Tessera's outputs to the expected dtype first (how builds that
returned float32 for 16-bit inputs were counted)."""
from __future__ import annotations

import functools
import warnings

import numpy as np
from onnx import helper

import tessera

OPS = ("Attention", "TensorScatter")
ATTENTION_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
ATTENTION_ATTRS = ("is_causal", "q_num_heads", "kv_num_heads", "scale", "softcap", "qk_matmul_output_mode",
                   "softmax_precision", "left_window_size", "right_window_size")


@functools.lru_cache(maxsize=1)
def cases():
    """The node test cases whose graph holds one of OPS (the _expanded variants, which hold the
    function body instead, are not ours)."""
    from onnx.backend.test.case import node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = node.collect_testcases(None)
    return tuple(c for c in found if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in OPS)


def _feeds(case):
    """node input name -> array (omitted inputs absent), the node, its attributes and opset."""
    n = case.model.graph.node[0]
    inputs, _ = case.data_sets[0]
    names = [name for name in n.input if name]
    by_name = dict(zip(names, inputs))
    slots = {slot: by_name[name] for slot, name in zip(ATTENTION_INPUTS if n.op_type == "Attention" else
                                                       ("past_cache", "update", "write_indices"), n.input) if name}
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    opset = next(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
    return n, slots, attrs, opset


def run(case):
    """Tessera's outputs for the node's requested (non-empty) outputs, in order."""
    n, slots, attrs, opset = _feeds(case)
    if n.op_type == "TensorScatter":
        mode = attrs.get("mode", b"linear")
        return [tessera.onnx.tensor_scatter(slots["past_cache"], slots["update"], slots.get("write_indices"),
                                            axis=attrs.get("axis", -2),
                                            mode=mode.decode() if isinstance(mode, bytes) else mode)]
    kw = {k: v for k, v in attrs.items() if k in ATTENTION_ATTRS}
    unknown = set(attrs) - set(ATTENTION_ATTRS)
    if unknown:
        raise AssertionError(f"node attributes this runner does not map: {sorted(unknown)}")
    wanted = [i for i, name in enumerate(n.output) if name]
    if 3 in wanted:
        kw["qk_matmul_output_mode"] = attrs.get("qk_matmul_output_mode", 0)
    else:
        kw.pop("qk_matmul_output_mode", None)
    got = tessera.onnx.attention(*(slots.get(s) for s in ATTENTION_INPUTS), opset=opset, **kw)
    return [got[i] for i in wanted]


def classify(case, strict_dtype=True):
    from onnx.backend.test.runner import Runner
    _, expected = case.data_sets[0]
    try:
        got = [np.asarray(g) for g in run(case)]
    except ValueError as e:
        return "refuse", str(e).splitlines()[0]
    except TypeError as e:
        return "generic", f"TypeError: {e}"
    except Exception as e:  # noqa: BLE001 - any other error is a failure of the adapter
        return "fail", f"{type(e).__name__}: {e}"
    if not strict_dtype:
        got = [g.astype(e.dtype) for g, e in zip(got, expected)]
    try:
        Runner.assert_similar_outputs(list(expected), got, rtol=case.rtol, atol=case.atol)
    except AssertionError as e:
        return "fail", str(e).strip().splitlines()[0:6]
    return "pass", ""
