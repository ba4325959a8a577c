"""Build tiny random Gemma 4 assistant drafters (gemma4_assistant) for tests/testdata/models/gemma4_text, plus goldens.

Writes tests/testdata/models/<name>/ for each drafter:
  config.json, model.safetensors   what save_pretrained writes (float32)
  draft_golden/*.npy               float32 arrays the C++ test reads (tests/speculative_test.cc)

gemma4_assistant       random weights (the checkpoint generator's scheme), hidden 48 != the main model's 64 so both
                       projections are exercised, 3 layers (sliding, full, full) reading main layers 3 and 1.
gemma4_assistant_copy  hidden 64, built so that it tends to propose the last seen token again (pre_projection passes
                       the main embedding through, its LM head is the main embedding, layers scaled down): the tiny
                       main model repeats tokens often, so its drafts are accepted sometimes, not always.

Goldens (docs/speculative.md, "One draft step"). For each case c of gemma4_assistant:
  case<c>_prompt [P]            prompt token ids
  case<c>_first [1]             the main model's greedy token after the prompt (the last seen token, position P)
  case<c>_draft_tokens [4]      the drafter's 4 greedy proposals
  case<c>_draft_logits [4, V]   its logits at each step
computed by transformers' Gemma4AssistantForCausalLM on the K/V and final hidden state of a fresh main-model forward
over the prompt; the script checks that transformers' own assisted generate() drafts exactly these in its first round.
gemma4_assistant_ordered  gemma4_assistant's shape with use_ordered_embeddings: 16 centroids of 32 tokens (a random
                       token_ordering permutation), the top 4 scored; the same goldens as gemma4_assistant (case0:
                       14-token prompt), where every unscored token's logit is the smallest scored one minus 1.
For gemma4_assistant_copy:
  assisted_tokens [32]          transformers' assisted generate() (greedy, 4 draft tokens, eos off) on the gemma4_text
                                golden's gen_prompt; checked equal to that golden's plain greedy gen_tokens

Usage: .venv/bin/python python/scripts/make_tiny_drafters.py [--ordered-only]
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import make_tiny_checkpoints as mtc  # noqa: E402

MAIN = os.path.join(REPO, "tests", "testdata", "models", "gemma4_text")
OUT = os.path.join(REPO, "tests", "testdata", "models")
K = 4
S, F = mtc.S, mtc.F


def text_config(hidden, layer_types):
    import transformers as T
    return T.Gemma4TextConfig(
        vocab_size=mtc.VOCAB, hidden_size=hidden, intermediate_size=96, num_hidden_layers=len(layer_types),
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, global_head_dim=64, sliding_window=8,
        layer_types=layer_types, hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
        final_logit_softcapping=4.0, attention_k_eq_v=False,
        rope_parameters={S: dict(rope_type="default", rope_theta=10_000.0),
                         F: dict(rope_type="proportional", partial_rotary_factor=0.25, rope_theta=1_000_000.0)},
        pad_token_id=mtc.PAD, eos_token_id=mtc.EOS, bos_token_id=mtc.BOS)


def build_drafter(hidden, layer_types, seed, **ordered):
    import torch
    import transformers as T
    cfg = T.Gemma4AssistantConfig(text_config=text_config(hidden, layer_types), backbone_hidden_size=64, **ordered)
    torch.manual_seed(seed)
    d = T.Gemma4AssistantForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32).eval()
    mtc.randomize(d, seed)
    if ordered:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            d.masked_embedding.token_ordering.copy_(torch.randperm(mtc.VOCAB, generator=g))
    return d


def golden_cases(main_m, d, plens, seed):
    """Four reference draft steps per prompt length, checked against transformers' assisted generate()."""
    import torch
    rng = np.random.default_rng(seed)
    arrays = {}
    for c, plen in enumerate(plens):
        prompt = [mtc.BOS] + [int(x) for x in rng.integers(mtc.TEXT_LO, mtc.VOCAB, size=plen - 1)]
        first, toks, logits = reference_drafts(main_m, d, prompt)
        _, seen = assisted(main_m, d, prompt, max_new=K + 2)
        got = torch.stack(seen[:K])
        assert torch.allclose(got, logits, atol=1e-5, rtol=0), float((got - logits).abs().max())
        arrays[f"case{c}_prompt"] = prompt
        arrays[f"case{c}_first"] = [first]
        arrays[f"case{c}_draft_tokens"] = toks
        arrays[f"case{c}_draft_logits"] = logits.numpy()
    return arrays


def make_ordered(main_m):
    d = build_drafter(48, [S, F, F], 7008, use_ordered_embeddings=True, num_centroids=16,
                      centroid_intermediate_top_k=4)
    save(d, "gemma4_assistant_ordered", golden_cases(main_m, d, [14], 7008))


def make_copy_drafter(main):
    """Random, then: x = main embedding (first half of pre_projection = identity), small layer outputs, the LM head
    tied to a copy of the main embedding: logits ~ e(t) . e(v), largest at v = t."""
    import torch
    d = build_drafter(64, [S, F], 6006)
    with torch.no_grad():
        H = 64
        d.pre_projection.weight.zero_()
        d.pre_projection.weight[:, :H] = torch.eye(H)
        d.pre_projection.weight[:, H:] = 0.05 * torch.randn(H, H, generator=torch.Generator().manual_seed(1)) / 8
        for layer in d.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.1)
            layer.mlp.down_proj.weight.mul_(0.1)
            layer.layer_scalar.fill_(1.0)
        d.model.norm.weight.fill_(1.0)
        d.model.embed_tokens.weight.copy_(main.model.embed_tokens.weight)
    return d


def main_model():
    import torch
    import transformers as T
    return T.Gemma4ForCausalLM.from_pretrained(MAIN, attn_implementation="eager", dtype=torch.float32).eval()


def reference_drafts(main, drafter, prompt):
    """Our rule, on transformers' modules: K/V of positions < s and the final hidden state at s - 1, query at s."""
    import torch
    ids = torch.tensor([prompt])
    with torch.no_grad():
        o = main(ids, output_hidden_states=True, return_shared_kv_states=True, use_cache=False)
        first = int(o.logits[0, -1].argmax())
        kv = {k: (v[0], v[1]) for k, v in o.shared_kv_states.items()}
        g = o.hidden_states[-1][:, -1:]
        tok = torch.tensor([[first]])
        pos = torch.tensor([[len(prompt)]])
        toks, logits = [], []
        for _ in range(K):
            x = torch.cat([main.model.embed_tokens(tok), g], dim=-1)
            out = drafter(inputs_embeds=x, position_ids=pos, shared_kv_states=kv, attention_mask=None)
            logits.append(out.logits[0, 0].clone())
            tok = out.logits.argmax(-1)
            toks.append(int(tok))
            g = out.last_hidden_state
    return first, toks, torch.stack(logits)


def assisted(main, drafter, prompt, max_new):
    """transformers' assisted generate(); also returns the logits its drafter produced, in order."""
    import torch
    from transformers import GenerationConfig
    seen = []
    orig = drafter.forward

    def hook(*a, **kw):
        out = orig(*a, **kw)
        seen.append(out.logits[0, 0].detach().clone())
        return out
    drafter.forward = hook
    drafter.generation_config.num_assistant_tokens = K
    drafter.generation_config.num_assistant_tokens_schedule = "constant"
    gc = GenerationConfig(do_sample=False, max_new_tokens=max_new, min_new_tokens=0, eos_token_id=None,
                          pad_token_id=mtc.PAD, bos_token_id=mtc.BOS, num_beams=1)
    with torch.no_grad():
        seq = main.generate(torch.tensor([prompt]), assistant_model=drafter, generation_config=gc)
    drafter.forward = orig
    return [int(t) for t in seq[0, len(prompt):]], seen


def save(model, name, arrays):
    path = os.path.join(OUT, name)
    mtc.save_checkpoint(model, path)
    gd = os.path.join(path, "draft_golden")
    os.makedirs(gd, exist_ok=True)
    for f in os.listdir(gd):
        os.remove(os.path.join(gd, f))
    for k, v in arrays.items():
        np.save(os.path.join(gd, k + ".npy"), np.asarray(v, dtype=np.float32))
    with open(os.path.join(gd, "meta.json"), "w") as f:
        json.dump({"versions": mtc.versions(), "draft_tokens": K}, f, indent=1, sort_keys=True)
        f.write("\n")


def main():
    main_m = main_model()
    make_ordered(main_m)
    if "--ordered-only" in sys.argv:
        return
    d = build_drafter(48, [S, F, F], 7007)
    # 14 > W + 1 = 9: the sliding layers see only the last W + 1 positions; 6: they see all.
    save(d, "gemma4_assistant", golden_cases(main_m, d, [14, 6], 7007))

    golden = np.load(os.path.join(MAIN, "golden.npz"))
    prompt = [int(t) for t in golden["gen_prompt"][0]]
    cd = make_copy_drafter(main_m)
    toks, _ = assisted(main_m, cd, prompt, max_new=len(golden["gen_tokens"]))
    assert toks == [int(t) for t in golden["gen_tokens"]], (toks, golden["gen_tokens"])
    save(cd, "gemma4_assistant_copy", {"assisted_tokens": toks})
    print("wrote", os.path.join(OUT, "gemma4_assistant"), os.path.join(OUT, "gemma4_assistant_copy"))


if __name__ == "__main__":
    main()
