"""Speculative decoding with a Gemma 4 assistant drafter (docs/speculative.md) through the Python API, on the tiny
gemma4_text checkpoint and the drafters of python/scripts/make_tiny_drafters.py: greedy tokens equal plain decoding's
and transformers' assisted generate() (run here), for several numbers of proposals and prompts; what is refused."""
import os

import pytest

import tessera
from helpers.models import MODELS_DIR, load_golden

MAIN = os.path.join(MODELS_DIR, "gemma4_text")
DRAFTERS = ["gemma4_assistant_copy", "gemma4_assistant", "gemma4_assistant_ordered"]


def prompts():
    z = load_golden("gemma4_text")
    gen = [int(t) for t in z["gen_prompt"][0]]
    return [gen, gen[:4], [2] + [int(t) for t in z["input_ids"][0][1:17]]]  # 10, 4 and 17 tokens (window 8)


def transformers_assisted(drafter, prompt, k, n):
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    main = T.Gemma4ForCausalLM.from_pretrained(MAIN, attn_implementation="eager", dtype=torch.float32).eval()
    d = T.Gemma4AssistantForCausalLM.from_pretrained(os.path.join(MODELS_DIR, drafter), attn_implementation="eager",
                                                     dtype=torch.float32).eval()
    d.generation_config.num_assistant_tokens = k
    d.generation_config.num_assistant_tokens_schedule = "constant"
    gc = T.GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=0, eos_token_id=None, pad_token_id=0,
                            num_beams=1)
    with torch.no_grad():
        seq = main.generate(torch.tensor([prompt]), assistant_model=d, generation_config=gc)
    return [int(t) for t in seq[0, len(prompt):]]


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_greedy_equals_plain_and_transformers(drafter):
    plain = tessera.Model.load(MAIN, max_context=64, max_chunk=16)
    spec = tessera.Model.load(MAIN, max_context=64, max_chunk=16, draft=os.path.join(MODELS_DIR, drafter),
                              draft_tokens=4)
    assert spec.has_draft and not plain.has_draft
    for prompt in prompts():
        want = plain.generate([prompt], max_new_tokens=24, stop_tokens=[])[0]
        assert transformers_assisted(drafter, prompt, 4, 24) == want
        for k in (None, 1, 3, 6):
            got, reasons = spec.generate([prompt], max_new_tokens=24, stop_tokens=[], draft_tokens=k,
                                         return_finish_reasons=True)
            assert got[0] == want, (prompt, k)
            assert reasons == ["length"]
        streamed = list(spec.generate([prompt], max_new_tokens=24, stop_tokens=[], stream=True))
        assert [t for _, t in streamed] == want


def test_refusals():
    spec = tessera.Model.load(MAIN, max_context=64, max_chunk=16,
                              draft=os.path.join(MODELS_DIR, "gemma4_assistant_copy"))
    with pytest.raises(Exception, match="one prompt"):
        spec.generate([[2, 5, 9], [2, 7, 8]], max_new_tokens=4, stop_tokens=[])
    assert len(spec.generate([[2, 5, 9]], max_new_tokens=4, temperature=0.8, stop_tokens=[])[0]) == 4
    assert len(spec.generate([[2, 5, 9], [2, 7, 8]], max_new_tokens=4, stop_tokens=[], draft_tokens=0)) == 2
    with pytest.raises(Exception, match="drafter"):
        tessera.Model.load(MAIN, max_context=64).generate([[2, 5, 9]], max_new_tokens=4, draft_tokens=2)
    with pytest.raises(Exception, match="gemma4_assistant"):
        tessera.Model.load(MAIN, max_context=64, draft=os.path.join(MODELS_DIR, "gemma4_text"))
    with pytest.raises(ValueError, match="draft_tokens"):
        tessera.Model.load(MAIN, max_context=64, max_chunk=4, draft=os.path.join(MODELS_DIR, "gemma4_assistant"),
                           draft_tokens=4)


@pytest.mark.parametrize("draft_quantize", ["q8_0", "q4_0"])
def test_quantized_drafter_and_main(draft_quantize):
    """The CPU user's setup: the main model and the drafter quantized at load. The tokens are still
    the quantized main model's own greedy tokens; a type the drafter does not take is refused."""
    plain = tessera.Model.load(MAIN, max_context=64, max_chunk=16, quantize="q4_0")
    spec = tessera.Model.load(MAIN, max_context=64, max_chunk=16, quantize="q4_0", draft_tokens=3,
                              draft=os.path.join(MODELS_DIR, "gemma4_assistant_copy"), draft_quantize=draft_quantize)
    for prompt in prompts():
        want = plain.generate([prompt], max_new_tokens=24, stop_tokens=[])[0]
        assert spec.generate([prompt], max_new_tokens=24, stop_tokens=[])[0] == want, prompt
    with pytest.raises(ValueError, match="draft_quantize"):
        tessera.Model.load(MAIN, max_context=64, draft=os.path.join(MODELS_DIR, "gemma4_assistant_copy"),
                           draft_quantize="q4_k_m")
