"""Rewrites a decoder's com.microsoft.GroupQueryAttention nodes to com.tessera.TesseraGroupQueryAttention
(docs/onnxruntime.md) and adds the image-block input, so a decoder exported the usual way (e.g. by
onnxruntime-genai's model builder) runs a multimodal prefill with the exact image mask in
onnxruntime, keeping GQA's shared buffers and kernels.

    python -m tessera.ort_rewrite decoder.onnx decoder_tessera.onnx [--block-input block_ids]

The new graph input `block_ids` is int32 [batch_size, sequence_length] (like input_ids): 0 for a
text token, the image's block id (> 0) for each token of an image. Every GQA node reads it. Nodes
using what the Tessera operator does not take (position_ids, attention_bias, head_sink,
smooth_softmax, qk_output, non-float32 caches) are refused by name rather than rewritten.
Sliding layers keep their caches as exported: with sliding_window_cache = 1 (the model builder's
sliding layers) past/present are window-sized buffers the operator evicts itself, exactly as
GroupQueryAttention does (docs/onnxruntime.md, "Windowed caches").
"""
from __future__ import annotations

import argparse
import sys

import onnx
from onnx import TensorProto, helper

DOMAIN = "com.tessera"
OP = "TesseraGroupQueryAttention"
# GroupQueryAttention's inputs the Tessera op takes, in the same positions (0-8).
KEPT_INPUTS = 9
REFUSED_INPUTS = {9: "position_ids", 10: "attention_bias", 11: "head_sink"}
KEPT_ATTRS = {"num_heads", "kv_num_heads", "local_window_size", "scale", "softcap", "do_rotary",
              "rotary_interleaved", "sliding_window_cache"}
# Attributes accepted (with these values) and dropped: their "off" values.
NEUTRAL_ATTRS = {"smooth_softmax": (-1, 0), "qk_output": (0,), "causal": (1,)}


def _refuse(node, what):
    raise ValueError(f"GroupQueryAttention node {node.name!r}: {what}; TesseraGroupQueryAttention "
                     "does not take it (docs/onnxruntime.md)")


def _attention_node(node, block_input):
    for i, name in REFUSED_INPUTS.items():
        if len(node.input) > i and node.input[i]:
            _refuse(node, f"input {name} ({node.input[i]!r}) is used")
    if len(node.output) > 3 and node.output[3]:
        _refuse(node, f"output output_qk ({node.output[3]!r}) is used")
    attrs = []
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if a.name in KEPT_ATTRS:
            attrs.append(a)
        elif a.name in NEUTRAL_ATTRS:
            if value not in NEUTRAL_ATTRS[a.name]:
                _refuse(node, f"attribute {a.name} = {value}")
        else:
            _refuse(node, f"attribute {a.name} = {value}")
    inputs = list(node.input[:KEPT_INPUTS]) + [""] * (KEPT_INPUTS - min(len(node.input), KEPT_INPUTS))
    new = helper.make_node(OP, inputs + [block_input], list(node.output[:3]), name=node.name, domain=DOMAIN)
    new.attribute.extend(attrs)
    return new


def _float_cache_check(graph, node):
    types = {v.name: v.type.tensor_type.elem_type for v in list(graph.input) + list(graph.value_info)}
    for name in node.input[3:5]:
        if name and types.get(name, TensorProto.FLOAT) != TensorProto.FLOAT:
            _refuse(node, f"cache {name!r} is {TensorProto.DataType.Name(types[name])}, not float32")


def _block_input(graph, name):
    """int32 [batch, sequence] graph input, with input_ids' dims when the graph has input_ids."""
    dims = ["batch_size", "sequence_length"]
    for v in graph.input:
        if v.name == "input_ids" and len(v.type.tensor_type.shape.dim) == 2:
            dims = [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
    return helper.make_tensor_value_info(name, TensorProto.INT32, dims)


def rewrite(model: onnx.ModelProto, block_input: str = "block_ids") -> onnx.ModelProto:
    """A copy of `model` whose GroupQueryAttention nodes are TesseraGroupQueryAttention nodes
    reading the new graph input `block_input`. Raises ValueError for a node it cannot rewrite,
    and when the model has no GroupQueryAttention node or already has an input of that name."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    if any(v.name == block_input for v in graph.input):
        raise ValueError(f"the model already has an input named {block_input!r}")
    count = 0
    for i, node in enumerate(graph.node):
        if node.op_type == "GroupQueryAttention" and node.domain == "com.microsoft":
            _float_cache_check(graph, node)
            graph.node[i].CopyFrom(_attention_node(node, block_input))
            count += 1
    if count == 0:
        raise ValueError("the model has no com.microsoft.GroupQueryAttention node to rewrite")
    graph.input.append(_block_input(graph, block_input))
    if not any(o.domain == DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", help="decoder .onnx (external data beside it is read)")
    ap.add_argument("dst", help="rewritten .onnx (external data, if any, written beside it)")
    ap.add_argument("--block-input", default="block_ids", help="name of the new int32 [batch, sequence] input")
    args = ap.parse_args(argv)
    model = onnx.load(args.src)
    try:
        rewritten = rewrite(model, args.block_input)
    except ValueError as e:
        print(f"{args.src}: {e}", file=sys.stderr)
        return 2
    large = rewritten.ByteSize() > 1_800_000_000
    onnx.save(rewritten, args.dst, save_as_external_data=large,
              location=f"{args.dst.rsplit('/', 1)[-1]}.data" if large else None)
    n = sum(1 for nd in rewritten.graph.node if nd.op_type == OP)
    print(f"{args.dst}: {n} GroupQueryAttention nodes rewritten to {DOMAIN}.{OP}, input {args.block_input!r} added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
