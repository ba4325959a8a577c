"""GGUF models (docs/gguf-models.md): the tiny transformers checkpoints of tests/testdata/models,
converted by llama.cpp's own convert_hf_to_gguf.py, run by Tessera with the logits of the same
checkpoint loaded from safetensors:

- f32 GGUF: bit-identical logits (the converter's Gemma 3 norm shift 1 + w is done in f32, the
  value Tessera's RMSNorm forms itself from w, so the stored value is used with offset 0);
- f16 / bf16 GGUF: bit-identical to the safetensors checkpoint converted as the converter converts
  (every matrix to the type, vectors kept f32);
- q8_0 GGUF: prefill within one 8-bit step of the largest logit of the checkpoint holding the same
  weights dequantized by gguf-py, with its top-1 wherever the margin exceeds twice that; against
  llama.cpp on the same file: prefill at least as close (KL) to the f32 model, and few-token steps
  (the int8 row-dot, as decode) closer to llama.cpp's than either is to the dequantized model;
- llama.cpp (llama-cpp-python, the peers venv) on the same f32 GGUF gives Tessera's greedy tokens.

The converter and gguf-py come from the llama-cpp-python sdist (bench/setup_peers.sh;
TESSERA_PEERS_DIR overrides bench/.peers); without them these tests skip, saying so.

What a GGUF does not hold (Gemma 3's query_pre_attn_scalar and layer pattern) is inferred as
llama.cpp infers it; test_gemma3_inferred_values checks the inference against the HF config. The
fixtures whose configs the file can represent are used as they are; gemma3_text and gemma3 get the
two values llama.cpp assumes (query_pre_attn_scalar = head_dim, every 6th layer full) in a copy.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from helpers.models import BUILD_DIR, MODELS_DIR, REPO, load_golden, load_tensors, write_f32_tensors

import tessera

PEERS = os.environ.get("TESSERA_PEERS_DIR", os.path.join(REPO, "bench", ".peers"))
SDIST = os.path.join(PEERS, "llama-sdist", "vendor", "llama.cpp")
CONVERTER = os.path.join(SDIST, "convert_hf_to_gguf.py")
PEERS_PY = os.path.join(PEERS, "venv", "bin", "python")

# The converter runs under this interpreter and imports torch (python/requirements-peers.txt), which
# scripts/setup.sh leaves out on a disk without room for it.
needs_converter = pytest.mark.skipif(
    not os.path.exists(CONVERTER) or importlib.util.find_spec("torch") is None,
    reason=f"llama.cpp's converter ({CONVERTER}: bash bench/setup_peers.sh) or the torch it imports is missing")
needs_llama_cpp = pytest.mark.skipif(
    not os.path.exists(PEERS_PY), reason=f"llama-cpp-python's venv not found at {PEERS_PY} (bash bench/setup_peers.sh)")

# Text-only prompt ids: 3-9 are avoided (gemma4 / gemma4_unified configs make some of them image,
# audio or video placeholders, which the multimodal safetensors model embeds as pad).
PROMPT = [2, 215, 432, 118, 165, 82, 17, 19, 300, 301, 302, 44, 97, 260, 511, 12]
ALL = ["gemma3_text", "gemma3", "gemma4_text", "gemma4", "gemma4_unified", "gemma4_moe"]
# Each converted to every type: the Gemma 3 norm shift, Gemma 4 PLE + KV sharing + double-wide
# MLP, and Gemma 4 attention_k_eq_v.
TYPED = ["gemma3_text", "gemma4_text", "gemma4_unified"]


def gguf_py():
    sys.path.insert(0, os.path.join(SDIST, "gguf-py"))
    import gguf  # noqa: PLC0415 -- the sdist's gguf-py, the converter's own
    return gguf


def write_tokenizer(d, vocab):
    sys.path.insert(0, os.path.join(REPO, "bench", "e2e"))
    from checkpoint import write_tokenizer as w  # noqa: PLC0415 -- the benchmark's synthetic tokenizer
    w(d, vocab)


def text_config(cfg):
    return cfg.get("text_config", cfg)


def make_hf(root, name, faithful=True):
    """A copy of a fixture that the converter takes: a tokenizer of exactly vocab_size pieces, and
    (Gemma 4 without experts) the expert_intermediate_size key its converter looks up. faithful: Gemma 3 configs get
    query_pre_attn_scalar = head_dim and every 6th layer full, the values a GGUF implies."""
    d = os.path.join(root, name + ("" if faithful else "_asis"))
    if os.path.exists(os.path.join(d, "READY")):
        return d
    os.makedirs(d, exist_ok=True)
    shutil.copyfile(os.path.join(MODELS_DIR, name, "model.safetensors"), os.path.join(d, "model.safetensors"))
    with open(os.path.join(MODELS_DIR, name, "config.json")) as f:
        cfg = json.load(f)
    tc = text_config(cfg)
    if name.startswith("gemma4"):
        if tc.get("moe_intermediate_size") is None:  # (a MoE config's width is found under its own name)
            tc.setdefault("expert_intermediate_size", None)
    elif faithful:
        tc["query_pre_attn_scalar"] = tc["head_dim"]
        n = tc["num_hidden_layers"]
        tc["layer_types"] = ["sliding_attention" if i % 6 < 5 else "full_attention" for i in range(n)]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_tokenizer(d, tc["vocab_size"])
    open(os.path.join(d, "READY"), "w").close()
    return d


def convert(hf, outtype):
    out = hf + f".{outtype}.gguf"
    if not os.path.exists(out):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(SDIST, "gguf-py"), SDIST]))
        r = subprocess.run([sys.executable, CONVERTER, hf, "--outtype", outtype, "--outfile", out + ".part"],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        os.replace(out + ".part", out)
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("gguf_models"))


def logits(path, **kw):
    m = tessera.Model.load(path, dtype="auto", max_context=64, **kw)
    return m, m.forward(np.asarray([PROMPT]))[0]


def describe(m):
    return dict(vocab=m.vocab_size, hidden=m.hidden_size, layers=m._impl._layers, eos=list(m._impl.eos_token_ids),
                scale=m._impl._attention_scale, softcap=m._impl._final_softcap)


@needs_converter
@pytest.mark.parametrize("name", ALL)
def test_f32_gguf_logits_bit_identical(work, name):
    hf = make_hf(work, name)
    ref_model, ref = logits(hf)
    model, got = logits(convert(hf, "f32"))
    assert model._impl._is_gguf and model.model_type == name.split("_")[0] + "_text"
    want, have = describe(ref_model), describe(model)
    if not name.endswith("_text"):
        # A multimodal checkpoint's image-block mask rules and eos list are its wrapper's; the GGUF
        # holds the text decoder (its eos ids: the tokenizer's).
        for d in (want, have):
            d.pop("eos")
            for layer in d["layers"]:
                layer.pop("mask")
    assert have == want
    np.testing.assert_array_equal(got, ref)


@needs_converter
def test_moe_f32_gguf_matches_transformers(work):
    """The bit-identity above shares the weight binder with the safetensors load; this compares the
    MoE GGUF with transformers' own logits (the checkpoint's goldens), the conformance tolerance."""
    from test_model_conformance import assert_logits_close  # noqa: PLC0415
    z = load_golden("gemma4_moe")
    m = tessera.Model.load(convert(make_hf(work, "gemma4_moe"), "f32"), max_batch=2, max_context=64, max_chunk=32)
    assert_logits_close(m, z, m.forward(z["input_ids"], z["attention_mask"]), z["logits"])


@needs_converter
def test_gemma3_inferred_values(work):
    """A Gemma 3 GGUF holds neither query_pre_attn_scalar nor (from this converter) the layer
    pattern: Tessera assumes llama.cpp's values and says so. Against the HF config of the fixture,
    which differs in both, exactly those two differ; with them set (test above) all agrees."""
    hf = make_hf(work, "gemma3_text", faithful=False)
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    model = tessera.Model.load(convert(hf, "f32"), max_context=64)
    notes = "\n".join(model.inferred)
    assert "query_pre_attn_scalar = 32" in notes and "every 6th layer full" in notes
    assert model._impl._attention_scale == pytest.approx(32 ** -0.5, rel=1e-7)
    assert cfg["query_pre_attn_scalar"] == 24  # the fixture's: not what llama.cpp (or we) can know
    kinds = [l["kind"] for l in model._impl._layers]
    assert kinds == ["sliding"] * 5 + ["full"]
    assert [t.split("_")[0] for t in cfg["layer_types"]] == ["sliding", "sliding", "full"] * 2  # the fixture's
    ref = describe(tessera.Model.load(hf, max_context=64))
    got = describe(model)
    for key in ("vocab", "hidden", "eos", "softcap"):
        assert got[key] == ref[key]
    strip = lambda ls: [{k: v for k, v in l.items() if k not in ("kind", "window", "mask", "rotary_pairs")} for l in ls]
    assert strip(got["layers"]) == strip(ref["layers"])
    # The faithful copy (same weights) reads back the same inferred values without a difference.
    assert tessera.Model.load(make_hf(work, "gemma3_text"), max_context=64)._impl._attention_scale == \
        model._impl._attention_scale


def to_bf16(a):
    """Round-to-nearest-even to bf16, returned as the raw uint16 (gguf-py and Tessera round so)."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((b + (0x7FFF + ((b >> 16) & 1))) >> 16).astype(np.uint16)


def write_converted_safetensors(src_dir, dst_dir, dtype):
    """The checkpoint converted as convert_hf_to_gguf.py converts: matrices and expert stacks to dtype,
    1-D tensors and the MoE router (ffn_gate_inp) kept f32."""
    with open(os.path.join(src_dir, "model.safetensors"), "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body, out_header, off = [], {}, 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        s, e = meta["data_offsets"]
        a = np.frombuffer(data[8 + n + s:8 + n + e], dtype=np.float32).reshape(meta["shape"])
        if a.ndim >= 2 and not name.endswith("router.proj.weight"):
            raw = to_bf16(a).tobytes() if dtype == "bf16" else a.astype(np.float16).tobytes()
            kind = "BF16" if dtype == "bf16" else "F16"
        else:
            raw, kind = a.tobytes(), "F32"
        out_header[name] = {"dtype": kind, "shape": meta["shape"], "data_offsets": [off, off + len(raw)]}
        body.append(raw)
        off += len(raw)
    hb = json.dumps(out_header).encode()
    hb += b" " * (-len(hb) % 8)
    os.makedirs(dst_dir, exist_ok=True)
    shutil.copyfile(os.path.join(src_dir, "config.json"), os.path.join(dst_dir, "config.json"))
    with open(os.path.join(dst_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(body))
    return dst_dir


@needs_converter
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", TYPED + ["gemma4_moe"])
def test_half_gguf_logits_equal_converted_checkpoint(work, name, dtype):
    hf = make_hf(work, name)
    ref_dir = write_converted_safetensors(hf, os.path.join(work, f"{name}_{dtype}_st"), dtype)
    _, ref = logits(ref_dir)
    _, got = logits(convert(hf, dtype))
    np.testing.assert_array_equal(got, ref)


@needs_converter
def test_bf16_moe_gguf_at_matmul_precision_bf16(work):
    """llama.cpp's converter keeps the router (ffn_gate_inp) f32 in a bf16 GGUF: precision bf16 refuses
    it by name (it used to stop the process in the GEMM), and converting on load (dtype bfloat16) then
    gives the logits of the checkpoint the converter's types describe, loaded the same way."""
    hf = make_hf(work, "gemma4_moe")
    g = convert(hf, "bf16")
    with pytest.raises(ValueError, match="matmul precision bf16 needs bf16 weights, got f32 for router.proj of "
                                         "layer 0"):
        tessera.Model.load(g, dtype="auto", max_context=64, matmul_precision="bfloat16")
    ref_dir = write_converted_safetensors(hf, os.path.join(work, "gemma4_moe_bf16_st"), "bf16")
    got = {}
    for name, path in (("gguf", g), ("checkpoint", ref_dir)):  # (both hold the router f32, as the converter does)
        m = tessera.Model.load(path, dtype="bfloat16", max_context=64, matmul_precision="bfloat16")
        got[name] = m.forward(np.asarray([PROMPT]))[0]
    np.testing.assert_array_equal(got["gguf"], got["checkpoint"])


def dequantized_checkpoint(hf, gguf_file, dst, experts=False):
    """hf's checkpoint with every matrix replaced by gguf_file's, dequantized by gguf-py (with experts:
    the stacked expert tensors too)."""
    gguf = gguf_py()
    from gguf.quants import dequantize  # noqa: PLC0415
    r = gguf.GGUFReader(gguf_file)
    deq = {t.name: dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)]) for t in r.tensors}
    layer = {"self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k",
             "self_attn.v_proj.weight": "attn_v", "self_attn.o_proj.weight": "attn_output",
             "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down",
             "per_layer_input_gate.weight": "inp_gate", "per_layer_projection.weight": "proj"}
    if experts:
        layer.update({"experts.gate_up_proj": "ffn_gate_up_exps", "experts.down_proj": "ffn_down_exps"})
    glob = {"embed_tokens.weight": "token_embd", "embed_tokens_per_layer.weight": "per_layer_token_embd",
            "per_layer_model_projection.weight": "per_layer_model_proj"}
    w = dict(load_tensors(os.path.join(hf, "model.safetensors")))
    replaced = 0
    for k in list(w):
        prefix = next((p for p in ("model.language_model.", "language_model.model.", "model.") if k.startswith(p)), "")
        rest = k[len(prefix):]
        g = glob.get(rest)
        if g is None and rest.startswith("layers."):
            i, suffix = rest[len("layers."):].split(".", 1)
            g = f"blk.{i}.{layer[suffix]}" if suffix in layer else None
        if g is not None:
            assert deq[g + ".weight"].shape == w[k].shape
            w[k] = deq[g + ".weight"].astype(np.float32)
            replaced += 1
    assert replaced > 0
    os.makedirs(dst, exist_ok=True)
    shutil.copyfile(os.path.join(hf, "config.json"), os.path.join(dst, "config.json"))
    write_f32_tensors(os.path.join(dst, "model.safetensors"), w)
    return dst


# Short random text sequences (ids 10..499; BOS first) for the int8 row-dot comparison.
ROWDOT_SEQS = [[2] + np.random.default_rng(i).integers(10, 500, 10).tolist() for i in range(24)]


def few_token_logits(path, seqs):
    """Logits at every position of each sequence, each position computed as the last of its own
    prefix: steps of fewer tokens than the quantized Linear's GEMM takes (ops/linear.cc), so every
    quantized matrix is read by the int8 row-dot, the decode path, which rounds each input to int8
    per block. [sequences, positions, vocab]."""
    m = tessera.Model.load(path, dtype="auto", max_context=64)
    return np.asarray([[m.forward(np.asarray([seq[: i + 1]]))[0, -1] for i in range(len(seq))] for seq in seqs])


def margins(x):
    top2 = np.sort(x, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


@needs_converter
@pytest.mark.parametrize("name", TYPED)
def test_q8_0_gguf_prefill_logits(work, name):
    hf = make_hf(work, name)
    q8 = convert(hf, "q8_0")
    _, got = logits(q8)
    _, deq = logits(dequantized_checkpoint(hf, q8, os.path.join(work, f"{name}_q8_deq")))
    # The weights are exactly gguf-py's dequantization of the file. A prefill of 16 tokens takes the
    # quantized Linear's GEMM: on dequantized blocks in f32 (only the summation order differs), or on
    # CPUs with AVX-512 VNNI the int8 GEMM, whose inputs are two int8 bytes per value (within 2^-15
    # of each 32-value block's largest magnitude, docs/quantization.md); the bound allows more: one
    # 8-bit step (1/127) of the largest logit. (Decode's row-dot rounds each Linear input to one
    # int8 per block, an effect that compounds over the layers: compared with llama.cpp's, which
    # rounds the same way, in test_llama_cpp_q8_0.)
    bound = np.abs(deq).max() / 127
    assert np.abs(got - deq).max() <= bound
    # Top-1 agrees with the model the file encodes wherever its margin exceeds twice the bound.
    sure = margins(deq) > 2 * bound
    assert sure.any() and (got.argmax(-1) == deq.argmax(-1))[sure].all()


@needs_converter
def test_q8_0_moe_gguf_logits(work):
    """Gemma 4 MoE at q8_0 (the experts stacked as [E, 2I, H] / [E, H, I] Q8_0 tensors, each
    expert's slice whole rows of blocks): the logits of the checkpoint holding gguf-py's
    dequantization of the file, quantized on load again, bit for bit; values on the block grid
    quantize back to the same blocks (test_quantize_moe.py), so every expert's blocks as bound from
    the file are gguf-py's. The dense prefill bound above does not hold for MoE (docs/moe.md: the
    experts' small groups take the int8 row-dot, and this tiny checkpoint's routing flips); the
    model is nearer (KL) the model its blocks encode than the f32 model is."""
    hf = make_hf(work, "gemma4_moe")
    q8 = convert(hf, "q8_0")
    deq_dir = dequantized_checkpoint(hf, q8, os.path.join(work, "gemma4_moe_q8_deq"), experts=True)
    orig = load_tensors(os.path.join(hf, "model.safetensors"))
    deqw = load_tensors(os.path.join(deq_dir, "model.safetensors"))
    stacks = [k for k in orig if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    assert len(stacks) == 8 and all(np.abs(deqw[k] - orig[k]).max() > 0 for k in stacks)  # the file's, not the original's
    _, got = logits(q8)
    _, requantized = logits(deq_dir, quantize="q8_0")
    np.testing.assert_array_equal(got, requantized)
    _, deq = logits(deq_dir)
    _, f32 = logits(hf)
    assert np.abs(got - deq).max() > 0  # the quantized path ran
    assert kl(deq, got) < kl(deq, f32), (kl(deq, got), kl(deq, f32))


@needs_converter
@pytest.mark.parametrize("name", ["gemma3_text", "gemma4_unified"])
def test_q8_0_gguf_at_matmul_precision_bf16(work, name):
    hf = make_hf(work, name)
    q8 = convert(hf, "q8_0")
    _, got = logits(q8, matmul_precision="bfloat16")
    deq_dir = dequantized_checkpoint(hf, q8, os.path.join(work, f"{name}_q8_deq"))
    _, deq = logits(deq_dir)
    # Quantized matrices accept precision bf16 (weights and Linear inputs rounded to bf16, f32 sums;
    # the embedding lookup stays exact). Its effect on these tiny random models is measured on the same
    # weights stored as bf16 at precision bf16 (where the embedding rows are rounded too); the
    # quantized path must stay within twice that, and agree on top-1 wherever the margin is wider.
    m = tessera.Model.load(deq_dir, dtype="bfloat16", max_context=64, matmul_precision="bfloat16")
    ref = m.forward(np.asarray([PROMPT]))[0]
    effect = np.abs(ref - deq).max()
    print(f"max |got - deq| = {np.abs(got - deq).max():.3g}, bf16 effect {effect:.3g}, "
          f"max |logit| {np.abs(deq).max():.3g}")
    assert np.abs(got - deq).max() <= 2 * effect
    sure = margins(deq) > 4 * effect
    assert sure.any() and (got.argmax(-1) == deq.argmax(-1))[sure].all()


# The one-byte int8 GEMM runs on CPUs with AVX-512 VNNI (ops/quant_gemm.h); elsewhere precision
# int8's Q8_0 prefill takes the dequantized f32 panels, which keep the activations exact (Q4_0
# there takes the row-dot, tested bit for bit against decode in tests/linear_quant_test.cc).
def _has_vnni():
    with open("/proc/cpuinfo") as f:
        return "avx512_vnni" in f.read() and os.environ.get("TESSERA_SIMD") not in ("avx2", "generic")


VNNI = _has_vnni()


@needs_converter
@pytest.mark.skipif(not VNNI, reason="no AVX-512 VNNI: precision int8's prefill is the f32 panels' here")
@pytest.mark.parametrize("name", TYPED)
def test_q8_0_gguf_at_matmul_precision_int8(work, name):
    """Precision int8 rounds the prefill's Linear inputs to one int8 per block as the decode row-dot
    does (llama.cpp's numerics): its 16-token prefill must agree with the same positions computed
    in chunks of 8 tokens (fewer than the quantized GEMM takes: every matrix read by the row-dot)
    more closely than either agrees with the model the file encodes, and precision f32's prefill
    (two bytes per input) must be closer to that model than precision int8's."""
    hf = make_hf(work, name)
    q8 = convert(hf, "q8_0")
    deq_dir = dequantized_checkpoint(hf, q8, os.path.join(work, f"{name}_q8_deq"))
    _, deq = logits(deq_dir)
    _, int8 = logits(q8, matmul_precision="int8")
    _, two = logits(q8)
    _, steps = logits(q8, max_chunk=8)
    between, int8_kl, steps_kl = kl(steps, int8), kl(deq, int8), kl(deq, steps)
    print(f"{name}: KL int8 prefill vs steps {between:.3e}; vs dequantized: int8 {int8_kl:.3e}, "
          f"steps {steps_kl:.3e}, f32 prefill {kl(deq, two):.3e}")
    assert between < min(int8_kl, steps_kl), (between, int8_kl, steps_kl)
    assert kl(deq, two) < int8_kl


def kl(p_logits, q_logits):
    """Mean over positions (every leading axis) of KL(softmax p || softmax q)."""
    lp = p_logits - p_logits.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    lq = q_logits - q_logits.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    return float((np.exp(lp) * (lp - lq)).sum(-1).mean())


# One token per batch: llama.cpp 0.3.36 segfaults multiplying a multi-token batch by these tiny
# q8_0 matrices (its q8_0 GEMM path); one at a time it runs, and the logits are the same positions'.
LLAMA_DRIVER = r"""
import json, sys
import numpy as np
from llama_cpp import Llama
path, seqs, n = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
llm = Llama(model_path=path, n_ctx=64, n_threads=2, logits_all=True, verbose=False, n_batch=1, n_ubatch=1)
logits, tokens = [], []
for ids in seqs:
    llm.reset()
    llm.eval(ids)
    logits.append([np.asarray(llm.scores[i]).tolist() for i in range(len(ids))])
    out = []
    for _ in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        llm.eval([t])
    tokens.append(out)
print(json.dumps({"tokens": tokens, "logits": logits}))
"""


def llama_cpp_run(path, n=16, seqs=None):
    """llama.cpp's greedy tokens after each sequence (default: PROMPT) and its logits at every position."""
    seqs = [PROMPT] if seqs is None else seqs
    r = subprocess.run([PEERS_PY, "-c", LLAMA_DRIVER, path, json.dumps(seqs), str(n)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if len(seqs) == 1:
        return out["tokens"][0], np.asarray(out["logits"][0], dtype=np.float32)
    return out["tokens"], np.asarray(out["logits"], dtype=np.float32)


# gemma4_text is left out: llama.cpp aborts loading its KV-shared layers (bench/PEERS.md).
@needs_converter
@needs_llama_cpp
@pytest.mark.parametrize("name", ["gemma3_text", "gemma3", "gemma4_unified", "gemma4_moe"])
def test_llama_cpp_same_greedy_tokens(work, name):
    path = convert(make_hf(work, name), "f32")
    want, _ = llama_cpp_run(path)
    m = tessera.Model.load(path, dtype="auto", max_context=64)
    got = m.generate(np.asarray([PROMPT]), max_new_tokens=len(want), stop_tokens=[])[0]
    assert got == want


@needs_converter
@needs_llama_cpp
@pytest.mark.parametrize("name", ["gemma3_text", "gemma3", "gemma4_unified"])
def test_llama_cpp_q8_0(work, name):
    """The same q8_0 file in both engines (KL divergence over the positions). Prefill: Tessera's
    GEMM multiplies the dequantized blocks by f32 inputs (or by inputs rounded to two int8 bytes
    per value, the int8 GEMM), so it is at least as close to the f32 model as llama.cpp, which
    rounds the activations to one byte. Few-token steps (the decode path): both round
    the activations to int8 blocks, and agree with each other more than with the model the file
    encodes (its weights dequantized by gguf-py)."""
    hf = make_hf(work, name)
    q8 = convert(hf, "q8_0")
    deq_dir = dequantized_checkpoint(hf, q8, os.path.join(work, f"{name}_q8_deq"))
    _, f32 = logits(hf)
    _, ours = logits(q8)
    _, theirs = llama_cpp_run(q8, n=0)  # one token per step: llama.cpp's decode path at every position
    assert kl(f32, ours) <= kl(f32, theirs), (kl(f32, ours), kl(f32, theirs))
    ref, ours_decode = few_token_logits(deq_dir, ROWDOT_SEQS), few_token_logits(q8, ROWDOT_SEQS)
    _, theirs_decode = llama_cpp_run(q8, n=0, seqs=ROWDOT_SEQS)
    # Both engines round the inputs the same way there (q8_0 activation blocks): they must agree
    # with each other more closely than either agrees with the unrounded computation.
    ours_kl, theirs_kl, between = kl(ref, ours_decode), kl(ref, theirs_decode), kl(theirs_decode, ours_decode)
    print(f"{name} row-dot KL vs dequantized: tessera {ours_kl:.3e}, llama.cpp {theirs_kl:.3e}; between {between:.3e}")
    assert between < min(ours_kl, theirs_kl), (between, ours_kl, theirs_kl)


@needs_converter
@needs_llama_cpp
def test_llama_cpp_q8_0_moe(work):
    """llama.cpp runs the q8_0 MoE file, and Tessera's prefill is at least as close (KL) to the f32
    model. (The few-token comparison of test_llama_cpp_q8_0 is not made: on this checkpoint the two
    engines' row-dot outputs are further apart than each is from the dequantized model, docs/moe.md.)"""
    hf = make_hf(work, "gemma4_moe")
    q8 = convert(hf, "q8_0")
    _, f32 = logits(hf)
    _, ours = logits(q8)
    _, theirs = llama_cpp_run(q8, n=0)
    assert kl(f32, ours) <= kl(f32, theirs), (kl(f32, ours), kl(f32, theirs))


@needs_converter
def test_prompt_uses_the_gguf_tokenizer(work):
    path = convert(make_hf(work, "gemma3_text"), "f32")
    m = tessera.Model.load(path, max_context=64)
    ids = m.tokenizer.encode("t7 t9xy", True)
    assert ids[0] == 2
    r = subprocess.run([os.path.join(BUILD_DIR, "tessera"), "run", "--model", path, "--prompt", "t7 t9",
                        "--max-new-tokens", "4", "--no-stop"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@needs_converter
def test_errors_name_the_file_and_what_is_wrong(work, tmp_path):
    gguf = gguf_py()
    src = convert(make_hf(work, "gemma3_text"), "f32")
    reader = gguf.GGUFReader(src)

    def rewrite(path, arch="gemma3", drop_tensor=None, reshape=None, bad_key=None):
        w = gguf.GGUFWriter(str(path), arch)
        for key, field in reader.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":
                continue
            if key == bad_key:
                w.add_string(key, "not a number")
                continue
            vtype = field.types[0]
            if vtype == gguf.GGUFValueType.ARRAY:
                w.add_array(key, field.contents())
            else:
                w.add_key_value(key, field.contents(), vtype)
        for t in reader.tensors:
            if t.name == drop_tensor:
                continue
            data = np.asarray(t.data)
            if t.name == reshape:
                data = data.reshape(-1)[: data.size // 2].reshape(data.shape[0] // 2, -1)
            w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return str(path)

    cases = [
        (dict(arch="llama"), r"general.architecture = \"llama\" is not supported"),
        (dict(arch="clip"), r"mmproj"),
        (dict(drop_tensor="blk.1.ffn_up.weight"), r"tensor blk.1.ffn_up.weight is missing"),
        (dict(reshape="blk.0.attn_q.weight"), r"tensor blk.0.attn_q.weight .* has shape \[64, 64\], expected \[128, 64\]"),
        (dict(bad_key="gemma3.block_count"), r"gemma3.block_count"),
    ]
    for i, (kw, pattern) in enumerate(cases):
        path = rewrite(tmp_path / f"bad{i}.gguf", **kw)
        with pytest.raises(ValueError, match=pattern) as e:
            tessera.Model.load(path, max_context=64)
        assert path in str(e.value) or "bad" in str(e.value)
