"""The tiny random-weight checkpoints' specs (make_tiny_checkpoints.py builds and records them): the token ids of
their vocabulary and, per checkpoint, its architecture, config and seeds."""

# Token ids of the tiny vocabularies (vocab 512). Text tokens are drawn from [TEXT_LO, vocab).
PAD, EOS, BOS, BOI, EOI, IMAGE, VIDEO, AUDIO, BOA = 0, 1, 2, 3, 4, 5, 6, 7, 8
TEXT_LO = 16
VOCAB = 512

S = "sliding_attention"
F = "full_attention"

# name -> spec. "seed" seeds the weights and the batch inputs, "gen_seed" the text tokens of the generation prompt
# (picked among a dozen so that the 32 greedy tokens are not one repeated token and the top-1/top-2 logit gap
# stays >= ~0.01 at every step); layer types are explicit.
MODELS = {
    # (a) Gemma3ForCausalLM. query_pre_attn_scalar != head_dim, linear RoPE scaling on the full layers (as the
    # 4B/12B/27B checkpoints), final logit softcapping set (the 1B/270M text checkpoints leave it null; the
    # code path exists in Gemma3ForCausalLM).
    "gemma3_text": dict(
        arch="Gemma3ForCausalLM", seed=1001, gen_seed=10_006,
        text=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=8,
                  layer_types=[S, S, F, S, S, F], query_pre_attn_scalar=24, final_logit_softcapping=6.0,
                  rope_parameters={F: dict(rope_type="linear", factor=8.0, rope_theta=1_000_000.0),
                                   S: dict(rope_type="default", rope_theta=10_000.0)},
                  pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS),
    ),
    # (b) Gemma3ForConditionalGeneration (SigLIP tower + projector, 9 soft tokens per image), sliding window 6 <
    # image block 9. final_logit_softcapping stays null: Gemma3ForConditionalGeneration never applies it.
    "gemma3": dict(
        arch="Gemma3ForConditionalGeneration", seed=2002, gen_seed=10_006,
        text=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=5,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=6,
                  layer_types=[S, S, F, S, F], query_pre_attn_scalar=32,
                  rope_parameters={F: dict(rope_type="linear", factor=8.0, rope_theta=1_000_000.0),
                                   S: dict(rope_type="default", rope_theta=10_000.0)},
                  pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS),
        vision=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                    image_size=12, patch_size=2, vision_use_head=False),
        top=dict(mm_tokens_per_image=9, image_token_index=IMAGE, boi_token_index=BOI, eoi_token_index=EOI),
        image_tokens=9,
    ),
    # (c) Gemma4ForCausalLM, E2B/E4B style: per-layer embeddings (PLE), KV sharing (last 3 of 7 layers),
    # double-wide MLP on the shared layers, global_head_dim 64 != head_dim 32, proportional RoPE on full layers.
    # Layer types S F S S | F S F: the shared layers 4 (F), 5 (S), 6 (F) read layer 1 (last non-shared F) and
    # layer 3 (last non-shared S) -- not simply "the previous layer".
    "gemma4_text": dict(
        arch="Gemma4ForCausalLM", seed=3003, gen_seed=10_006,
        text=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=7,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, global_head_dim=64, sliding_window=8,
                  layer_types=[S, F, S, S, F, S, F], hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB,
                  num_kv_shared_layers=3, use_double_wide_mlp=True, attention_k_eq_v=False,
                  final_logit_softcapping=5.0,
                  rope_parameters={S: dict(rope_type="default", rope_theta=10_000.0),
                                   F: dict(rope_type="proportional", partial_rotary_factor=0.25,
                                           rope_theta=1_000_000.0)},
                  pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS),
    ),
    # (d) Gemma4UnifiedForConditionalGeneration (encoder-free vision embedder, 8 soft tokens per image = 8 patches),
    # attention_k_eq_v on full layers with num_global_key_value_heads=1 and global_head_dim 64, sliding window 4 <
    # image block 8, use_bidirectional_attention="vision".
    "gemma4_unified": dict(
        arch="Gemma4UnifiedForConditionalGeneration", seed=4004, gen_seed=10_004,
        text=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, global_head_dim=64,
                  num_global_key_value_heads=1, attention_k_eq_v=True, sliding_window=4,
                  layer_types=[S, S, F, S, S, F], use_bidirectional_attention="vision", final_logit_softcapping=5.0,
                  rope_parameters={S: dict(rope_type="default", rope_theta=10_000.0),
                                   F: dict(rope_type="proportional", partial_rotary_factor=0.25,
                                           rope_theta=1_000_000.0)},
                  pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS),
        vision=dict(patch_size=2, pooling_kernel_size=1, mm_embed_dim=16, output_proj_dims=16, mm_posemb_size=8),
        top=dict(image_token_id=IMAGE, video_token_id=VIDEO, audio_token_id=AUDIO, boi_token_id=BOI,
                 eoi_token_id=EOI, boa_token_id=BOA),
        image_grid=(2, 4),   # (rows, cols) of patches -> 8 soft tokens
        image_tokens=8,
    ),
    # (e) Gemma4ForConditionalGeneration, E2B/E4B style with images: per-layer embeddings (image placeholders take
    # the pad token's PLE row), KV sharing (last 3 of 6 layers: S F S | F S F, the shared layers 3 (F), 4 (S),
    # 5 (F) read layers 1 and 2, so a shared sliding layer attends to an image block bidirectionally with K/V it did
    # not compute), sliding window 4 < image block 8, use_bidirectional_attention="vision". Gemma 4 vision tower:
    # 2x2-pixel patches on a 4x8 patch grid, one encoder layer with 2-D axial RoPE, 2x2 average pooling -> 8 soft
    # tokens per image (2x4), then embed_vision (scale-free RMSNorm + projection to the text width).
    "gemma4": dict(
        arch="Gemma4ForConditionalGeneration", seed=5005, gen_seed=10_008,
        text=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, global_head_dim=64, sliding_window=4,
                  layer_types=[S, F, S, F, S, F], hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB,
                  num_kv_shared_layers=3, use_double_wide_mlp=False, attention_k_eq_v=False,
                  use_bidirectional_attention="vision", final_logit_softcapping=5.0,
                  rope_parameters={S: dict(rope_type="default", rope_theta=10_000.0),
                                   F: dict(rope_type="proportional", partial_rotary_factor=0.25,
                                           rope_theta=1_000_000.0)},
                  pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS),
        vision=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=2, head_dim=8, patch_size=2, pooling_kernel_size=2,
                    position_embedding_size=16),
        top=dict(image_token_id=IMAGE, video_token_id=VIDEO, audio_token_id=AUDIO, boi_token_id=BOI,
                 eoi_token_id=EOI, boa_token_id=BOA),
        image_grid=(2, 4),   # (rows, cols) of soft tokens; the patch grid is pooling_kernel_size times larger
        image_tokens=8,
    ),
    # (f) Gemma4ForCausalLM with the mixture-of-experts block (26B-A4B style, docs/moe.md): 8 experts, top 2, expert
    # width 32 beside the dense MLP's 64; attention_k_eq_v with num_global_key_value_heads 1 and global_head_dim 64
    # on the full layers, no PLE, no KV sharing. The router's weights are wide (randomize) so that the k-th and
    # (k+1)-th probabilities of every routing are far apart compared with float32 noise.
    "gemma4_moe": dict(
        arch="Gemma4ForCausalLM", seed=6009, gen_seed=10_004,
        text=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, global_head_dim=64,
                  num_global_key_value_heads=1, attention_k_eq_v=True, sliding_window=8, layer_types=[S, F, S, F],
                  hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=8, top_k_experts=2,
                  moe_intermediate_size=32, final_logit_softcapping=5.0,
                  rope_parameters={S: dict(rope_type="default", rope_theta=10_000.0),
                                   F: dict(rope_type="proportional", partial_rotary_factor=0.25,
                                           rope_theta=1_000_000.0)},
                  pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS),
    ),
}
