"""Shared pieces of the Python conformance tests, so each test file reads as what it checks.

  reference   plain numpy attention (masks, softcap, bias, GQA, bf16 rounding): the independent side
              of every attention comparison; it never calls Tessera.
  ort_graphs  onnx graphs of one Attention / GroupQueryAttention node and onnxruntime sessions.
  inputs      random inputs (q/k/v, GQA steps) with fixed generator streams.
  tolerances  the float32-vs-float32 bar and the comparison assertions.
  models      the tiny checkpoints: paths, goldens, safetensors rewriting.
  texts       the corpus the tokenizer tests encode.
"""
