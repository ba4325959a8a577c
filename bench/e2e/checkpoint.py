"""Random-weight checkpoints for the end-to-end benchmark (bench/e2e_peers.py).

Two shapes, written as Hugging Face checkpoints (config.json + model.safetensors, f32) with a
synthetic tokenizer of exactly `vocab` pieces (bench/PEERS.md "Tokenizer"):
- gemma3: Gemma-3-1B (`Gemma3ForCausalLM`): hidden 1152, 26 layers (5 sliding : 1 global),
  4 q heads / 1 kv head x 256, intermediate 6912, vocab 262144, window 512, rope 10k / 1M,
  query_pre_attn_scalar 256, tied embeddings.
- gemma4: Gemma-4-12B width, 6 layers (5 sliding + 1 global), as
  `Gemma4UnifiedForConditionalGeneration` text weights (the only Gemma 4 architecture both peers
  convert): hidden 3840, 16 q heads, sliding 8 kv heads x 256 window 1024, global 1 kv head x 512
  with attention_k_eq_v, intermediate 15360, vocab 262144, final softcap 30, tied embeddings.
  The vision tower is a tiny stand-in (no engine here runs it).
- gemma4_e2b: Gemma 4 E2B's text decoder at its real widths and depth (`Gemma4ForCausalLM`, the
  prefill-skip benchmark, bench/prefill_skip.py): hidden 1536, 35 layers (4 sliding : 1 global),
  8 q heads / 1 kv head, head_dim 256 (global 512), sliding window 512, intermediate 6144 doubled
  on the 20 KV-shared last layers (use_double_wide_mlp), per-layer embeddings 256 x 262144,
  vocab 262144, final softcap 30, tied embeddings. Written in bf16 (`dtype="bf16"`): in f32 its
  4.6 billion parameters would not fit the machine.
All set max_position_embeddings to 32768 (Gemma-3-1B's real value; Gemma 4's is 262144): the
onnxruntime-genai export holds RoPE cos/sin tables of that many positions, which would otherwise
add ~1 GiB of tables no run here uses.

Weights: names and shapes come from transformers' own model class built on the meta device (no
memory); matrices are N(0, 0.02^2) from a fixed seed (the embedding smaller: `embedding_std`), 1-D parameters (norm scales, layer
scalars) take the constant transformers initializes them to. Written streaming, tensor by tensor.
"""
import json
import os

import numpy as np

STD = 0.02
SEED = 1234
MAX_POS = 32768


def gemma3_config(layers=26, vocab=262144):
    types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
    if layers < 6:  # reduced (--quick): keep both kinds, last one global
        types = ["sliding_attention"] * (layers - 1) + ["full_attention"]
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": 1152, "num_hidden_layers": layers, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912, "vocab_size": vocab,
        "sliding_window": 512, "layer_types": types, "query_pre_attn_scalar": 256,
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        "final_logit_softcapping": None, "attn_logit_softcapping": None,
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
        "max_position_embeddings": MAX_POS, "tie_word_embeddings": True,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "dtype": "float32",
    }


def gemma4_config(layers=6, vocab=262144):
    types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
    types[-1] = "full_attention"
    text = {
        "model_type": "gemma4_unified_text", "hidden_size": 3840, "num_hidden_layers": layers,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
        "global_head_dim": 512, "num_global_key_value_heads": 1, "attention_k_eq_v": True,
        "intermediate_size": 15360, "vocab_size": vocab, "sliding_window": 1024, "layer_types": types,
        "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6, "max_position_embeddings": MAX_POS, "tie_word_embeddings": True,
        "num_kv_shared_layers": 0, "use_double_wide_mlp": False,
        "use_bidirectional_attention": "vision",
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "dtype": "float32",
    }
    vision = {"model_type": "gemma4_unified_vision", "mm_embed_dim": 16, "mm_posemb_size": 8,
              "patch_size": 2, "pooling_kernel_size": 1, "output_proj_dims": 3840, "dtype": "float32"}
    return {"architectures": ["Gemma4UnifiedForConditionalGeneration"], "model_type": "gemma4_unified",
            "text_config": text, "vision_config": vision, "audio_config": None,
            "tie_word_embeddings": True, "dtype": "float32"}


def gemma4_e2b_config(layers=35, vocab=262144):
    # google/gemma-4-E2B's text_config (transformers' Gemma4TextConfig defaults fill the rest: RoPE
    # 10k on sliding layers, proportional 0.25 at 1M on global ones; global layers keep 1 kv head).
    types = ["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(layers)]
    types[-1] = "full_attention"
    return {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
        "hidden_size": 1536, "num_hidden_layers": layers, "num_attention_heads": 8,
        "num_key_value_heads": 1, "head_dim": 256, "global_head_dim": 512, "attention_k_eq_v": False,
        "intermediate_size": 6144, "use_double_wide_mlp": True, "num_kv_shared_layers": 20 * layers // 35,
        "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": vocab, "vocab_size": vocab,
        "sliding_window": 512, "layer_types": types, "final_logit_softcapping": 30.0,
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "max_position_embeddings": MAX_POS,
        "tie_word_embeddings": True, "enable_moe_block": False,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "dtype": "bfloat16",
    }


def gemma4_26b_a4b_config(layers=30, vocab=262144):
    # Gemma 4 26B-A4B's text decoder (mixture of experts, docs/moe.md): hidden 2816, 16 q heads; sliding
    # layers 8 kv heads x 256 with window 1024, global layers 2 kv heads x 512 with attention_k_eq_v (5:1);
    # the dense MLP 2112 wide beside 128 experts of width 704, top 8; no PLE, no KV sharing.
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
    types[-1] = "full_attention"
    return {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
        "hidden_size": 2816, "num_hidden_layers": layers, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 256, "global_head_dim": 512, "num_global_key_value_heads": 2,
        "attention_k_eq_v": True, "intermediate_size": 2112, "enable_moe_block": True, "num_experts": 128,
        "top_k_experts": 8, "moe_intermediate_size": 704, "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0, "vocab_size": vocab, "sliding_window": 1024, "layer_types": types,
        "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
        "max_position_embeddings": MAX_POS, "tie_word_embeddings": True,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "dtype": "bfloat16",
    }


SHAPES = {"gemma3": gemma3_config, "gemma4": gemma4_config, "gemma4_e2b": gemma4_e2b_config,
          "gemma4_26b_a4b": gemma4_26b_a4b_config}


def special_ids(cfg):
    """Token ids a prompt must avoid: Gemma specials 0..15 and the multimodal markers."""
    ids = set(range(16))
    for k in ("boi_token_id", "eoi_token_id", "image_token_id", "video_token_id", "boa_token_id",
              "eoa_token_index", "audio_token_id"):
        if cfg.get(k) is not None:
            ids.add(int(cfg[k]))
    return ids


def prompt_ids(n, vocab, avoid, seed=7):
    """n random ids in [16, min(vocab, 255999)) outside `avoid` (the benches' prompts)."""
    rng = np.random.default_rng(seed)
    hi = min(vocab, 255999)
    out = []
    while len(out) < n:
        for t in rng.integers(16, hi, size=n).tolist():
            if t not in avoid:
                out.append(t)
    return out[:n]


def text_config(cfg):
    return cfg.get("text_config") or cfg


def _hf_config(cfg):
    from transformers import AutoConfig
    c = dict(cfg)
    mt = c.pop("model_type")
    c.pop("architectures", None)
    return AutoConfig.for_model(mt, **c)  # composite configs build their sub-configs from dicts


def _tiny(cfg):
    """Same architecture and layer list at a tiny width: its 1-D init values name the constants."""
    import copy
    t = copy.deepcopy(cfg)
    tc = text_config(t)
    tc.update(hidden_size=64, intermediate_size=96, vocab_size=512, num_attention_heads=2, head_dim=32,
              num_key_value_heads=1)
    if "global_head_dim" in tc:
        tc["global_head_dim"] = 64
    if tc.get("hidden_size_per_layer_input"):
        tc.update(hidden_size_per_layer_input=8, vocab_size_per_layer_input=512)
    if "vision_config" in t:
        t["vision_config"]["output_proj_dims"] = 64
    return t


def tensor_specs(cfg):
    """[(name, shape, init)] in state-dict order; init is a float constant or None (random)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    arch = cfg["architectures"][0]

    def build(c, device):
        hc = _hf_config(c)
        torch.manual_seed(0)
        with torch.device(device):
            if arch.endswith("ForCausalLM"):
                return AutoModelForCausalLM.from_config(hc, dtype=torch.float32)
            return AutoModelForImageTextToText.from_config(hc, dtype=torch.float32)

    big = build(cfg, "meta").state_dict()
    small = build(_tiny(cfg), "cpu").state_dict()
    specs = []
    tied = text_config(cfg).get("tie_word_embeddings", True)
    for name, t in big.items():
        if tied and name == "lm_head.weight":
            continue
        init = None
        s = small.get(name)
        if t.dim() <= 1 and s is not None and s.numel() and bool((s == s.flatten()[0]).all()):
            init = float(s.flatten()[0])
        specs.append((name, tuple(t.shape), init))
    return specs


def embedding_std(cfg):
    """Embedding std small enough that the layers, not the residual copy of the input token, pick
    the greedy token (with tied embeddings the copy's logit grows as std * hidden / sqrt(2 layers)
    against the layers' random ones): otherwise every engine just repeats the last prompt token and
    the greedy check compares nothing."""
    tc = text_config(cfg)
    return min(STD, 0.5 * np.sqrt(2 * tc["num_hidden_layers"]) / tc["hidden_size"])


def to_bf16(a):
    """f32 -> bf16 bits, rounded to nearest, ties to even (no NaNs here)."""
    u = a.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, specs, seed=SEED, emb_std=STD, dtype="f32"):
    """Stream f32 (or, dtype "bf16", f32 draws rounded to bf16) tensors into one safetensors file;
    returns bytes written per tensor name."""
    es = 2 if dtype == "bf16" else 4
    enc = to_bf16 if dtype == "bf16" else (lambda a: a)
    header, off = {}, 0
    for name, shape, _ in specs:
        n = int(np.prod(shape)) * es
        header[name] = {"dtype": "BF16" if dtype == "bf16" else "F32", "shape": list(shape),
                        "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    rng = np.random.default_rng(seed)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        for name, shape, init in specs:
            n = int(np.prod(shape))
            if init is not None:
                f.write(enc(np.full(n, init, dtype=np.float32)).tobytes())
                continue
            step = 1 << 24
            for i in range(0, n, step):
                m = min(step, n - i)
                a = rng.standard_normal(m, dtype=np.float32)
                a *= emb_std if name.endswith("embed_tokens.weight") else STD
                f.write(enc(a).tobytes())
    os.replace(tmp, path)
    return {name: int(np.prod(shape)) * es for name, shape, _ in specs}


def write_tokenizer(d, V, markers=None):
    """Synthetic Gemma-style tokenizer, exactly V ids (PEERS.md): specials 0-4, t5.., x, y, xy;
    markers ({id: piece}) replace t<id> with a control piece (a multimodal marker a peer looks up
    by its text, e.g. llama.cpp's Gemma 3 image wrapping `<start_of_image>`)."""
    from sentencepiece import sentencepiece_model_pb2 as spm
    special = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    pieces = special + [f"t{i}" for i in range(len(special), V - 3)] + ["x", "y", "xy"]
    markers = markers or {}
    for i, p in markers.items():
        pieces[i] = p
    m = spm.ModelProto()
    m.trainer_spec.model_type = spm.TrainerSpec.BPE
    m.trainer_spec.vocab_size = V
    m.trainer_spec.pad_id, m.trainer_spec.eos_id, m.trainer_spec.bos_id, m.trainer_spec.unk_id = 0, 1, 2, 3
    m.trainer_spec.byte_fallback = False
    m.normalizer_spec.add_dummy_prefix = False
    P = spm.ModelProto.SentencePiece
    kinds = {0: P.CONTROL, 1: P.CONTROL, 2: P.CONTROL, 3: P.UNKNOWN, 4: P.CONTROL}
    kinds.update({i: P.CONTROL for i in markers})
    for i, p in enumerate(pieces):
        sp = m.pieces.add()
        sp.piece, sp.score, sp.type = p, 0.0 if i < 5 else -float(i), kinds.get(i, P.NORMAL)
    with open(os.path.join(d, "tokenizer.model"), "wb") as f:
        f.write(m.SerializeToString())
    tj = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True}
                         for i, t in list(enumerate(special)) + sorted(markers.items())],
          "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
          "pre_tokenizer": None, "post_processor": None,
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}]},
          "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                    "ignore_merges": False, "vocab": {p: i for i, p in enumerate(pieces)},
                    "merges": [["x", "y"]]}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
                   "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
                   "add_bos_token": True, "add_eos_token": False}, f, indent=1)


def make_checkpoint(d, cfg, log=print, dtype="f32", markers=None):
    """Writes d/{config.json, model.safetensors, tokenizer*} unless d/READY exists (weights in f32, or
    bf16 with dtype "bf16"; markers: write_tokenizer's). Returns info: weight bytes (text decoder only: what an engine reads per
    decode step, tied lm_head = embedding)."""
    ready = os.path.join(d, "READY")
    if os.path.exists(ready):
        with open(ready) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    specs = tensor_specs(cfg)
    hc = _hf_config(cfg)
    hc.save_pretrained(d)  # transformers' own serialization of the config
    with open(os.path.join(d, "config.json")) as f:
        saved = json.load(f)
    if "text_config" in saved:
        # llama.cpp's Gemma4 converter looks this up without `optional` (PEERS.md)
        saved["text_config"].setdefault("expert_intermediate_size", None)
    saved["architectures"] = cfg["architectures"]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(saved, f, indent=2)
    total = sum(int(np.prod(s)) * (2 if dtype == "bf16" else 4) for _, s, _ in specs)
    log(f"writing {d}/model.safetensors ({total / 2**30:.2f} GiB {dtype}, {len(specs)} tensors)")
    sizes = write_safetensors(os.path.join(d, "model.safetensors"), specs, emb_std=embedding_std(cfg), dtype=dtype)
    write_tokenizer(d, text_config(cfg)["vocab_size"], markers)
    text = sum(n for k, n in sizes.items() if not any(v in k for v in ("vision", "audio", "embed_vision")))
    info = {"total_bytes": total, "text_weight_bytes": text}
    with open(ready, "w") as f:
        json.dump(info, f)
    return info


def bf16_copy(hf, out, log=print):
    """out/: hf's checkpoint with every F32 tensor rounded to nearest-even bf16 and stored as BF16
    (config.json says bfloat16; tokenizer files linked), unless out/READY exists: the same model
    at bf16 for the engines that map bf16 weights. Streams tensor by tensor."""
    ready = os.path.join(out, "READY")
    if os.path.exists(ready):
        return out
    os.makedirs(out, exist_ok=True)
    src = os.path.join(hf, "model.safetensors")
    with open(src, "rb") as f:
        hlen = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(hlen))
    data = np.memmap(src, dtype=np.uint8, mode="r", offset=8 + hlen)
    meta = header.pop("__metadata__", {"format": "pt"})
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    new, off = {}, 0
    for k in names:
        t = header[k]
        n = (t["data_offsets"][1] - t["data_offsets"][0]) // (4 if t["dtype"] == "F32" else 1)
        size = n * 2 if t["dtype"] == "F32" else n
        new[k] = {"dtype": "BF16" if t["dtype"] == "F32" else t["dtype"], "shape": t["shape"],
                  "data_offsets": [off, off + size]}
        off += size
    new["__metadata__"] = meta
    hb = json.dumps(new, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    log(f"writing {out}/model.safetensors ({off / 2**30:.2f} GiB bf16)")
    tmp = os.path.join(out, "model.safetensors.part")
    with open(tmp, "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        for k in names:
            a, b = header[k]["data_offsets"]
            if header[k]["dtype"] != "F32":
                f.write(data[a:b].tobytes())
                continue
            step = 1 << 26
            for i in range(a, b, step):
                f.write(to_bf16(np.frombuffer(data[i:min(b, i + step)].tobytes(), dtype=np.float32)).tobytes())
    os.replace(tmp, os.path.join(out, "model.safetensors"))
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    for c in (cfg, cfg.get("text_config") or {}):
        for key in ("dtype", "torch_dtype"):
            if key in c:
                c[key] = "bfloat16"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in os.listdir(hf):
        if name.startswith("tokenizer") and not os.path.lexists(os.path.join(out, name)):
            os.symlink(os.path.join(hf, name), os.path.join(out, name))
    with open(ready, "w") as f:
        f.write("bf16 copy\n")
    return out
