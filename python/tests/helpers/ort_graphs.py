"""onnx graphs and onnxruntime sessions for the peers of tessera.onnx: one node of ONNX Attention,
com.microsoft.GroupQueryAttention or TensorScatter, or a few nodes chained. Run on onnxruntime's
CPUExecutionProvider or the ONNX reference implementation (onnx.reference.ReferenceEvaluator)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

ATTENTION_INPUTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
ATTENTION_OUTPUTS = ("Y", "present_key", "present_value")
GQA_INPUTS = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
              "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink")
GQA_OUTPUTS = ("output", "present_key", "present_value")
GQA_OPSETS = (("", 21), ("com.microsoft", 1))


def value_info(name, array):
    """A graph input typed and shaped like `array`."""
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)


def float_outputs(names, elem_type=TensorProto.FLOAT):
    """Graph outputs of unspecified shape (float32 unless told); empty names (omitted outputs) skipped."""
    return [helper.make_tensor_value_info(n, elem_type, None) for n in names if n]


def make_model(nodes, inputs, outputs, opsets=(("", 24),), ir_version=11):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = ir_version
    return model


def session(model, log_severity=3):
    """A CPU session. 3 hides ORT's "in-place optimization not activated" warning; 4 also its error
    log, for inputs a test expects it to refuse."""
    so = ort.SessionOptions()
    so.log_severity_level = log_severity
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def single_node_model(op, input_order, feeds, outputs, opsets, domain="", output_type=TensorProto.FLOAT, **attrs):
    """One `op` node. `feeds` maps names of `input_order` to arrays; an absent or None input is
    omitted (an empty name, trailing ones dropped); so is an empty output name. Outputs are typed
    `output_type`. Returns (model, the feeds it takes)."""
    names = [n if feeds.get(n) is not None else "" for n in input_order]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, list(outputs), domain=domain,
                            **{k: v for k, v in attrs.items() if v is not None})
    model = make_model([node], [value_info(n, feeds[n]) for n in names if n], float_outputs(outputs, output_type),
                       opsets, ir_version=10)
    return model, {n: feeds[n] for n in names if n}


def attention_model(opset, feeds, attrs, outputs=ATTENTION_OUTPUTS):
    """ONNX Attention of `opset`; feeds keyed by ATTENTION_INPUTS; attrs None = absent; outputs
    ATTENTION_OUTPUTS, or with "qk_matmul_output" fourth. Outputs have Q's type."""
    out_type = helper.np_dtype_to_tensor_dtype(feeds["Q"].dtype)
    return single_node_model("Attention", ATTENTION_INPUTS, feeds, outputs, (("", opset),), output_type=out_type,
                             **attrs)


def run_attention_ort(opset, feeds, attrs, outputs=ATTENTION_OUTPUTS):
    model, f = attention_model(opset, feeds, attrs, outputs)
    return session(model).run(None, f)


def run_attention_reference(opset, feeds, attrs, outputs=ATTENTION_OUTPUTS):
    model, f = attention_model(opset, feeds, attrs, outputs)
    return ReferenceEvaluator(model).run(None, f)


def run_gqa_ort(query, key, value, past_key, past_value, seqlens_k, total, attention_bias=None, extra=None,
                **attrs):
    """com.microsoft.GroupQueryAttention on onnxruntime: (output, present_key, present_value), and
    output_qk with a qk_output attribute. `extra` adds inputs by name (cos_cache, sin_cache,
    position_ids, head_sink). Outputs have the query's type."""
    feeds = {"query": query, "key": key, "value": value, "past_key": past_key, "past_value": past_value,
             "seqlens_k": np.asarray(seqlens_k, np.int32), "total_sequence_length": np.array(total, np.int32),
             "attention_bias": attention_bias, **(extra or {})}
    outputs = GQA_OUTPUTS + (("output_qk",) if attrs.get("qk_output") else ())
    model, f = single_node_model("GroupQueryAttention", GQA_INPUTS, feeds, outputs, GQA_OPSETS,
                                 domain="com.microsoft", output_type=helper.np_dtype_to_tensor_dtype(query.dtype),
                                 **attrs)
    return session(model).run(None, f)
