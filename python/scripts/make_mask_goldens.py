"""Record the attention masks transformers builds for Gemma 3 / Gemma 4 multimodal models (goldens).

For every case a tiny randomly initialised model of the real class (Gemma3ForConditionalGeneration,
Gemma3ForCausalLM, Gemma4ForConditionalGeneration, Gemma4UnifiedForConditionalGeneration) is built with eager
attention and run forward on the case's token ids / token types / 2-D padding mask (prefill, optionally in
chunks with a DynamicCache, then decode steps without token types, as `generate` does). A forward pre-hook on
every attention module records the 4-D float mask the model hands to eager attention, so the goldens are what
the models actually use, built by their own code (create_masks_for_vision_model / create_masks_for_generate /
create_causal_mask / create_sliding_window_causal_mask).

Where a model builds a different mask in its plain forward than in generation (gemma4_unified: see
python/tessera/hf.py), path "generate" records the generation masks: each step's forward gets the dict the
model class's `create_masks_for_generate` returns for that step, as `generate` passes it. Path "forward" lets the
forward build its own. One case instead calls the public static `create_masks_for_generate` once, without a
cache (path "create_masks_for_generate").

Usage: .venv/bin/python python/scripts/make_mask_goldens.py [--out tests/testdata/masks] [--check]
The test python/tests/test_transformers_masks.py imports this file for its live comparison.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "tests", "testdata", "masks")
IMAGE, VIDEO, AUDIO, TEXT = 5, 6, 8, 7   # token ids used in the tiny vocabularies


def _run(row):
    """Token types from a compact string: '.' text, 'i' image, 'v' video, 'a' audio (Gemma 4 values)."""
    return [{".": 0, "i": 1, "v": 2, "a": 3}[c] for c in row]


def _mask(row):
    return [1 if c == "1" else 0 for c in row]


def _seg(*parts):
    """Row string from (char, count) pairs, for the long cases."""
    return "".join(c * n for c, n in parts)


# Each case: hf (model class key), tessera_model (tessera.hf model argument), bidirectional (text config flag),
# window (sliding_window passed to the config), types / attn (rows, same length), chunks (prefill chunk
# end offsets, the last one = sequence length; default one chunk), decode (decode steps after prefill),
# path ("forward" | "generate" | "create_masks_for_generate", default "forward").
CASES = [
    dict(name="gemma3_w4_pad", hf="gemma3", tessera_model="gemma3", bidirectional=False, window=4,
         types=["iiiiii..iii.iiiii.iiii",      # block at start and end, two images one text token apart
                "...iiiii.iiiiii.......",      # left padding below
                "..iiiiiii.ii...iiiii.."],     # right padding below
         attn=["1111111111111111111111",
               "0001111111111111111111",
               "1111111111111111110000"]),
    dict(name="gemma3_w9_pad", hf="gemma3", tessera_model="gemma3", bidirectional=False, window=9,
         types=[".iiii..iiiii.ii.iiiiii", "iiiiiiii....iii.......", "......iiiii.......iiii"],
         attn=["0000001111111111111111", "1111111111111110000000", "1111111111111111111111"]),
    dict(name="gemma3_nomask", hf="gemma3", tessera_model="gemma3", bidirectional=False, window=3,
         types=["iiii....iii.", "..iiiiiiii.."], attn=None),
    dict(name="gemma3_chunked", hf="gemma3", tessera_model="gemma3", bidirectional=False, window=5,
         types=["..iiiiiii....iii.iiiiii.", "....iiii..iiiiiiiii....."],
         attn=["111111111111111111111111", "000011111111111111111111"], chunks=[9, 15, 24], decode=3),
    dict(name="gemma3_text_bidirectional", hf="gemma3_text", tessera_model="gemma3", bidirectional=True, window=8,
         types=None, attn=["0001111111111111", "1111111111100000", "1111111111111111"]),
    dict(name="gemma4_vision_w4", hf="gemma4", tessera_model="gemma4", bidirectional="vision", window=4,
         types=["iiiiiivvvv..aaa..iiii", "...iiiii.iiiiii..vvvv", "..vvvvv.iiiiiiiiiii.."],
         attn=["111111111111111111111", "000111111111111111111", "111111111111111111000"]),
    dict(name="gemma4_vision_w12", hf="gemma4", tessera_model="gemma4", bidirectional="vision", window=12,
         types=[".iiiiiii..vvvvvv.iii.", "iiiiiiiiaaaa.vvv....."], attn=["000001111111111111111",
                                                                        "111111111111111110000"]),
    dict(name="gemma4_vision_chunked", hf="gemma4", tessera_model="gemma4", bidirectional="vision", window=5,
         types=["..iiiiiii....vvv.iiiiii.", "....iiii..iiiiiiiii....."],
         attn=["111111111111111111111111", "000011111111111111111111"], chunks=[10, 24], decode=2),
    dict(name="gemma4_noflag", hf="gemma4", tessera_model="gemma4", bidirectional=None, window=4,
         types=["iiiiiivvvv..aaa..iiii", "...iiiii.iiiiii..vvvv"],
         attn=["111111111111111111111", "000111111111111111100"]),
    dict(name="gemma4_all", hf="gemma4", tessera_model="gemma4", bidirectional="all", window=7,
         types=["iiii..vvv...", "..iiiii....."], attn=["001111111111", "111111111000"]),
    dict(name="gemma4_unified_vision_w4", hf="gemma4_unified", tessera_model="gemma4_unified",
         bidirectional="vision", window=4, path="generate",
         types=["iiiiiivvvv..aaa..iiii", "...iiiii.iiiiii..vvvv", "..vvvvv.iiiiiiiiiii.."],
         attn=["111111111111111111111", "000111111111111111111", "111111111111111111000"]),
    # The same inputs through Gemma4UnifiedModel.forward's own mask: not what generation uses (kept to pin the
    # difference; test_transformers_masks.py checks the two stay different).
    dict(name="gemma4_unified_forward_w4", hf="gemma4_unified", tessera_model="gemma4_unified_forward",
         bidirectional="vision", window=4, path="forward",
         types=["iiiiiivvvv..aaa..iiii", "...iiiii.iiiiii..vvvv", "..vvvvv.iiiiiiiiiii.."],
         attn=["111111111111111111111", "000111111111111111111", "111111111111111111000"]),
    dict(name="gemma4_unified_vision_w16", hf="gemma4_unified", tessera_model="gemma4_unified",
         bidirectional="vision", window=16, path="generate",
         types=["..iiiiii..vvvvv..iii.", "iiiiiii..........iii."],
         attn=["000111111111111111111", "111111111111111111100"], decode=2),
    dict(name="gemma4_unified_chunked", hf="gemma4_unified", tessera_model="gemma4_unified",
         bidirectional="vision", window=5, path="generate",
         types=["..iiiiiii....vvv.iiiiii.", "....iiii..iiiiiiiii....."],
         attn=["111111111111111111111111", "000011111111111111111111"], chunks=[10, 24], decode=2),
    # Longer rows (several 64-key tiles) so the tiled kernels see empty / full / partial tiles and holes.
    dict(name="gemma3_long", hf="gemma3", tessera_model="gemma3", bidirectional=False, window=48,
         types=[_seg((".", 10), ("i", 64), (".", 6), ("i", 64), (".", 56)),
                _seg((".", 40), ("i", 100), (".", 60))],
         attn=[_seg(("1", 180), ("0", 20)), _seg(("0", 37), ("1", 163))]),
    dict(name="gemma4_vision_long", hf="gemma4", tessera_model="gemma4", bidirectional="vision", window=32,
         types=[_seg((".", 5), ("i", 70), ("v", 50), (".", 3), ("a", 20), (".", 52)),
                _seg(("i", 80), (".", 10), ("i", 80), (".", 30))],
         attn=[_seg(("0", 70), ("1", 130)), _seg(("1", 50), ("0", 10), ("1", 120), ("0", 20))], chunks=[120, 200],
         decode=1),
    dict(name="gemma4_unified_long", hf="gemma4_unified", tessera_model="gemma4_unified", bidirectional="vision",
         window=32, path="generate", types=[_seg((".", 7), ("i", 70), (".", 3), ("v", 40), (".", 40)), _seg(("i", 100), (".", 60))],
         attn=[_seg(("0", 13), ("1", 147)), _seg(("1", 150), ("0", 10))]),
    dict(name="gemma4_unified_static_generate", hf="gemma4_unified", tessera_model="gemma4_unified",
         bidirectional="vision", window=4, path="create_masks_for_generate",
         types=["iiiiiivvvv..aaa..iiii", "...iiiii.iiiiii..vvvv"],
         attn=["111111111111111111111", "000111111111111111100"]),
]


def versions():
    import torch
    import transformers
    return {"transformers": transformers.__version__, "torch": torch.__version__}


def build_model(hf, bidirectional, window, attn_implementation="eager"):
    """Tiny random model of the real class: 2 layers, [sliding, full]."""
    import torch
    import transformers as T
    common = dict(vocab_size=32, hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=8, sliding_window=window,
                  layer_types=["sliding_attention", "full_attention"], use_bidirectional_attention=bidirectional)
    torch.manual_seed(0)
    if hf in ("gemma3", "gemma3_text"):
        tc = T.Gemma3TextConfig(**common)
        if hf == "gemma3_text":
            cfg, cls = tc, T.Gemma3ForCausalLM
        else:
            vc = T.SiglipVisionConfig(hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      image_size=8, patch_size=4)
            cfg = T.Gemma3Config(text_config=tc, vision_config=vc, mm_tokens_per_image=4, image_token_id=IMAGE)
            cls = T.Gemma3ForConditionalGeneration
    elif hf in ("gemma4", "gemma4_unified"):
        tok = dict(image_token_id=IMAGE, video_token_id=VIDEO, audio_token_id=AUDIO, boi_token_id=9, eoi_token_id=10,
                   boa_token_id=11)
        if hf == "gemma4":
            tc = T.Gemma4TextConfig(global_head_dim=8, hidden_size_per_layer_input=4, vocab_size_per_layer_input=32,
                                    **common)
            cfg = T.Gemma4Config(text_config=tc, vision_config=None, audio_config=None, **tok)
            cls = T.Gemma4ForConditionalGeneration
        else:
            tc = T.Gemma4UnifiedTextConfig(global_head_dim=8, **common)
            cfg = T.Gemma4UnifiedConfig(text_config=tc, vision_config=None, audio_config=None, **tok)
            cls = T.Gemma4UnifiedForConditionalGeneration
    else:
        raise ValueError(hf)
    model = cls._from_config(cfg, attn_implementation=attn_implementation).eval()
    return model


def _capture(model):
    """Pre-hooks on every attention module: records {layer_type: mask} of the next forward."""
    text_cfg = model.config.get_text_config()
    store = {}
    for name, mod in model.named_modules():
        if name.endswith("self_attn") and hasattr(mod, "layer_idx"):
            kind = text_cfg.layer_types[mod.layer_idx].replace("_attention", "")

            def hook(m, args, kwargs, kind=kind):
                assert "attention_mask" in kwargs, "attention mask not passed by keyword"
                mask = kwargs["attention_mask"]
                mask = None if mask is None else mask.detach().clone()
                if kind in store and not _same(store[kind], mask):
                    raise AssertionError(f"two {kind} layers got different masks")
                store[kind] = mask
            mod.register_forward_pre_hook(hook, with_kwargs=True)
    return store


def _same(a, b):
    import torch
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


def _generation_masks(model, kw, cache, a, b, type_key):
    """The mask dict `generate` hands the forward for the step of positions [a, b) (token types only in
    prefill: generate drops them afterwards)."""
    import torch
    B = kw["input_ids"].shape[0]
    return type(model).create_masks_for_generate(
        config=model.config, inputs_embeds=torch.empty(B, b - a, 0), attention_mask=kw["attention_mask"],
        cache=cache, position_ids=torch.arange(a, b)[None], **{type_key: kw.get(type_key)})


def _sizes(cache, layer_idx, q_len, q_offset):
    if cache is None:
        return q_offset, q_offset + q_len
    kv_len, kv_off = cache.get_mask_sizes(q_len, layer_idx)
    return int(kv_off), int(kv_len)


def hf_masks(case):
    """Runs transformers for one case. Returns (inputs, steps, sliding_window): inputs holds attention_mask /
    token_type_ids over the whole sequence (decode tokens appended as text), steps one entry per forward call
    with the masks per layer kind (float [B, 1, S_q, S_kv] as given to eager attention, dtype-min where
    masked), sliding_window the text config's value (halved by the config for bidirectional "all")."""
    import torch
    from transformers import DynamicCache
    model = build_model(case["hf"], case["bidirectional"], case["window"])
    text_cfg = model.config.get_text_config()
    kinds = {t.replace("_attention", ""): text_cfg.layer_types.index(t) for t in set(text_cfg.layer_types)}
    types = None if case["types"] is None else torch.tensor([_run(r) for r in case["types"]])
    B = len(case["types"] if case["types"] is not None else case["attn"])
    S = len((case["types"] or case["attn"])[0])
    decode = case.get("decode", 0)
    if types is None:
        types_full = torch.zeros(B, S + decode, dtype=torch.long)
    else:
        types_full = torch.cat([types, torch.zeros(B, decode, dtype=torch.long)], 1)
    ids = torch.where(types_full == 1, IMAGE, torch.where(types_full == 2, VIDEO,
                      torch.where(types_full == 3, AUDIO, TEXT)))
    attn = None if case["attn"] is None else torch.tensor([_mask(r) for r in case["attn"]])
    attn_full = None if attn is None else torch.cat([attn, torch.ones(B, decode, dtype=torch.long)], 1)
    type_key = "token_type_ids" if case["hf"] == "gemma3" else "mm_token_type_ids"
    steps = []

    if case.get("path", "forward") == "create_masks_for_generate":
        embeds = torch.zeros(B, S, 0)
        masks = type(model).create_masks_for_generate(
            config=model.config, inputs_embeds=embeds, attention_mask=attn, cache=None,
            position_ids=torch.arange(S)[None], **{type_key: types})
        masks = {k.replace("_attention", ""): v for k, v in masks.items()}
        steps.append(dict(q_offset=0, q_len=S, total=S, token_types_passed=True, decode=False, hf_masks=masks,
                          sizes={k: (0, S) for k in masks}))
    else:
        store = _capture(model)
        bounds = case.get("chunks") or [S]
        assert bounds[-1] == S, "the last chunk must end at the sequence length"
        spans = [(a, b) for a, b in zip([0] + bounds[:-1], bounds)] + [(S + d, S + d + 1) for d in range(decode)]
        generate = case.get("path", "forward") == "generate"
        # generate's masks are made before the forward, against the cache the forward then fills
        cache = DynamicCache(config=model.config.get_text_config()) if generate else None
        for a, b in spans:
            prefill = b <= S
            sizes = {k: _sizes(cache if a > 0 else None, li, b - a, a) for k, li in kinds.items()}
            kw = dict(input_ids=ids[:, a:b], attention_mask=None if attn_full is None else attn_full[:, :b],
                      use_cache=True)
            if cache is not None:
                kw["cache"] = cache
            if prefill and types is not None and case["hf"] != "gemma3_text":
                kw[type_key] = types_full[:, :b]     # from the start of the sequence, as generate does
            if generate:
                kw["attention_mask"] = _generation_masks(model, kw, cache, a, b, type_key)
            store.clear()
            with torch.no_grad():
                out = model(**kw)
            cache = out.cache
            steps.append(dict(q_offset=a, q_len=b - a, total=b, token_types_passed=type_key in kw,
                              decode=not prefill, hf_masks=dict(store), sizes=sizes))

    for st in steps:
        for k, m in st["hf_masks"].items():
            kv_off, kv_len = st["sizes"][k]
            if m is not None:
                assert m.dtype == torch.float32 and tuple(m.shape) == (B, 1, st["q_len"], kv_len), (k, m.shape)
                assert kv_off + kv_len == st["total"], "keys must end at the current token"
    inputs = dict(attention_mask=None if attn_full is None else attn_full.numpy().astype(np.int8),
                  token_type_ids=types_full.numpy().astype(np.int8) if types is not None else None)
    return inputs, steps, int(text_cfg.sliding_window)


def to_numpy_float(mask, B, q_len, kv_len):
    """HF eager mask -> float32 numpy; None (transformers skipped the mask: nothing masked) -> zeros."""
    if mask is None:
        return np.zeros((B, 1, q_len, kv_len), dtype=np.float32), True
    return mask.numpy().astype(np.float32), False


def case_arrays(case):
    """Runs transformers and returns the dict of arrays stored in the golden npz."""
    inputs, steps, sliding_window = hf_masks(case)
    B = len(case["types"] if case["types"] is not None else case["attn"])
    meta = dict(name=case["name"], hf=case["hf"], tessera_model=case["tessera_model"],
                bidirectional=case["bidirectional"], path=case.get("path", "forward"),
                checkpoint_sliding_window=case["window"], prefill_len=len((case["types"] or case["attn"])[0]),
                steps=[], **versions())
    meta["sliding_window"] = sliding_window   # as stored on the config (halved for "all")
    fmin = float(np.finfo(np.float32).min)
    arrays = {}
    for s, st in enumerate(steps):
        smeta = dict(q_offset=st["q_offset"], q_len=st["q_len"], total=st["total"],
                     token_types_passed=st["token_types_passed"], decode=st["decode"], layers={})
        for k in sorted(st["hf_masks"]):
            kv_off, kv_len = st["sizes"][k]
            f, was_none = to_numpy_float(st["hf_masks"][k], B, st["q_len"], kv_len)
            assert np.all((f == 0) | (f == fmin)), "eager mask must only hold 0 and float32 min"
            arrays[f"s{s}_{k}_float"] = f
            arrays[f"s{s}_{k}_bool"] = f == 0
            smeta["layers"][k] = dict(kv_offset=kv_off, kv_len=kv_len, hf_mask_was_none=was_none)
        meta["steps"].append(smeta)
    if inputs["attention_mask"] is not None:
        arrays["attention_mask"] = inputs["attention_mask"]
    if inputs["token_type_ids"] is not None:
        arrays["token_type_ids"] = inputs["token_type_ids"]
    arrays["batch"] = np.array(B)
    arrays["meta"] = np.array(json.dumps(meta))
    return arrays


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    bad = 0
    for case in CASES:
        arrays = case_arrays(case)
        path = os.path.join(args.out, case["name"] + ".npz")
        if args.check:
            with np.load(path) as old:
                same = set(old.files) == set(arrays) and all(
                    np.array_equal(old[k], arrays[k]) for k in arrays if k != "meta")
            print(("ok   " if same else "DIFF ") + path)
            bad += not same
        else:
            np.savez_compressed(path, **arrays)
            print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
