"""Hugging Face transformers mask conventions -> Tessera structured-mask arguments (Gemma 3 / Gemma 4).

Everything here is exact: the arguments returned by `gemma_mask_args` make `tessera.attention_bias` equal,
element for element, to the 4-D mask transformers builds for the same layer (pinned transformers version,
see python/requirements-peers.txt; goldens in tests/testdata/masks, test python/tests/test_transformers_masks.py).

What transformers does (5.24.0; q and k are *cache indices*: q = q_offset + i, k = kv_offset + j):
  valid(k)      = attention_mask_2d[b, k] (zero-padded on the right when shorter than the keys)
  causal        : k <= q                       window(W): q - k < W   (sliding_window_overlay)
  block(q, k)   : block_id[q] >= 0 and block_id[q] == block_id[k]   (blockwise_overlay)
  block ids     : each maximal run of image tokens gets an id (Gemma 3: token_type_ids == 1;
                  Gemma 4: mm_token_type_ids in {1 image, 2 video}; 0 text, 3 audio are never in a block).
                  An image run directly followed by a video run is ONE block.
  gemma3 (Gemma3Model, token_type_ids given)    full: causal | block      sliding: (causal | block) & window
  gemma3 text model, use_bidirectional_attention full: every valid key    sliding: |q - k| < W
  gemma4, use_bidirectional_attention == None   full: causal              sliding: causal & window
  gemma4 / gemma4_unified, "vision" (+ mm_token_type_ids)
                                                full: causal              sliding: (causal | block) & window
  gemma4 / gemma4_unified, "all"                full: every valid key     sliding: |q - k| <= W
gemma4_unified "vision" is the rule generation uses (Gemma4UnifiedForConditionalGeneration.create_masks_for_generate
-> create_masks_for_vision_model, the same as gemma4). Gemma4UnifiedModel.forward, when it builds the mask itself
(a forward with a 2-D attention_mask, and `generate` with the default dynamic cache), composes it differently:
  gemma4_unified_forward, "vision"              full: causal | block      sliding: (causal & window) | block
That one is reproduced only for comparison (model="gemma4_unified_forward"); see docs/attention.md.
W is `config.sliding_window` *as stored on the config object* (for "all" / bidirectional Gemma 3 the config
already halved it: W_config = W_checkpoint // 2 + 1).  Every form is finally ANDed with valid(k).
"""
from __future__ import annotations

import numpy as np

__all__ = ["MODELS", "GEMMA3_BLOCK_TYPES", "GEMMA4_BLOCK_TYPES", "blocks_from_token_types", "padding_args",
           "gemma_mask_args", "max_block_length"]

MODELS = ("gemma3", "gemma4", "gemma4_unified", "gemma4_unified_forward")
GEMMA3_BLOCK_TYPES = (1,)     # token_type_ids: 1 = image soft token
GEMMA4_BLOCK_TYPES = (1, 2)   # mm_token_type_ids: 1 = image, 2 = video (0 = text, 3 = audio)
_I32_MAX = np.iinfo(np.int32).max
_I32_MIN = np.iinfo(np.int32).min


def blocks_from_token_types(token_type_ids, block_types) -> np.ndarray:
    """Block ids [B, S] int32: each maximal run of tokens whose type is in `block_types` gets its own id
    (0, 1, 2, ... numbered per row, exactly transformers' `get_block_sequence_ids_for_mask`); -1 elsewhere.

    Adjacent runs of different block types (image then video) form one run, as in transformers."""
    t = np.asarray(token_type_ids)
    if t.ndim == 1:
        t = t[None, :]
    if t.ndim != 2:
        raise ValueError(f"token_type_ids must be [B, S], got shape {t.shape}")
    inb = np.isin(t, np.asarray(list(block_types)))
    prev = np.zeros_like(inb)
    prev[:, 1:] = inb[:, :-1]
    ids = np.cumsum(inb & ~prev, axis=1) - 1
    return np.where(inb, ids, -1).astype(np.int32)


def max_block_length(block_ids) -> int:
    """Largest span (last index - first index + 1) of one block id >= 0 within a row; 0 without blocks.
    For ids from `blocks_from_token_types` this is the length of the longest image run."""
    b = np.asarray(block_ids)
    if b.ndim == 1:
        b = b[None, :]
    best = 0
    idx = np.arange(b.shape[1])
    for row in b:
        m = row >= 0
        if not m.any():
            continue
        ids, first = np.unique(row[m], return_index=True)
        last = np.zeros(ids.max() + 1, dtype=np.int64)
        np.maximum.at(last, row[m], idx[m])
        best = max(best, int((last[ids] - idx[m][first] + 1).max()))
    return best


def padding_args(valid, kv_offset=0, *, causal=True):
    """Keys from a bool validity matrix [B, S_kv] (slot j holds position kv_offset + j).

    Returns (k_pos [B, S_kv] int32, kv_valid [B] int32, hole [B, S_kv] bool). Trailing invalid slots (right
    padding) are cut by kv_valid. Invalid slots *before* a row's last valid slot (left padding, holes) keep
    their slot but get a position no query can see: with `causal`, int32 max. A causal pair needs
    k_pos <= q_pos, and q_pos < int32 max for every real query, so the only other way to be visible is
    the block overlay; the caller sets k_block = -1 on those slots (`hole`), which removes it. The result
    is therefore exactly "valid(k) AND ...", whatever the window. Without `causal` the position is int32
    min and the caller must bound window_left (q_pos - int32 min >= 2**31 > any window_left)."""
    valid = np.asarray(valid, dtype=bool)
    B, S = valid.shape
    k_pos = np.broadcast_to(np.arange(S, dtype=np.int64) + int(kv_offset), (B, S)).copy()
    any_valid = valid.any(axis=1)
    last = np.where(any_valid, S - np.argmax(valid[:, ::-1], axis=1), 0)
    hole = ~valid & (np.arange(S)[None, :] < last[:, None])
    k_pos[hole] = _I32_MAX if causal else _I32_MIN
    return k_pos.astype(np.int32), last.astype(np.int32), hole


def _take(a, start, n, fill):
    """Columns [start, start + n) of a [B, T] array, padded with `fill` past T (transformers pads
    attention_mask with 0 and block ids with -1 when they are shorter than the keys)."""
    out = np.full((a.shape[0], n), fill, dtype=a.dtype)
    src = a[:, start:start + n]
    out[:, :src.shape[1]] = src
    return out


def gemma_mask_args(attention_mask=None, token_type_ids=None, *, model, layer, sliding_window=None,
                    bidirectional=None, batch=None, q_len=None, q_offset=0, kv_offset=0, kv_len=None) -> dict:
    """Keyword arguments for `tessera.attention_bias` / `tessera.attention` reproducing transformers' mask.

    attention_mask: 2-D [B, T] padding mask over the whole sequence so far (past + current tokens, 1 = real
        token), or None (no padding). token_type_ids: [B, T'] from the *start* of the sequence (Gemma 3
        `token_type_ids`, Gemma 4 `mm_token_type_ids`), or None (decode steps: transformers passes none).
    model: one of MODELS, "gemma3" | "gemma4" | "gemma4_unified" | "gemma4_unified_forward" (module docstring).
    layer: "full" | "sliding" (HF layer_types "full_attention" / "sliding_attention" are accepted).
    sliding_window: `config.sliding_window` of the text config (needed for sliding layers).
    bidirectional: the text config's `use_bidirectional_attention`: Gemma 3 False/True (True is only honoured
        by the text-only Gemma3TextModel, e.g. EmbeddingGemma; pass False for Gemma3ForConditionalGeneration),
        Gemma 4 None / "vision" / "all".
    q_offset, q_len: queries are cache positions q_offset .. q_offset + q_len - 1 (default: the rest of T).
    kv_offset, kv_len: key slot j holds position kv_offset + j (transformers' cache.get_mask_sizes;
        a DynamicSlidingWindowLayer has kv_offset > 0); default kv_len = q_offset + q_len - kv_offset.

    Returns dict(q_pos, k_pos, kv_valid, causal, window, q_block, k_block, blocks_ignore_window).
    gemma4_unified_forward "vision" sliding layers are (causal & window) | block: blocks_ignore_window=True.
    """
    layer = {"full_attention": "full", "sliding_attention": "sliding"}.get(layer, layer)
    if layer not in ("full", "sliding"):
        raise ValueError(f"layer must be 'full' or 'sliding', got {layer!r}")
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}")
    if model == "gemma3" and bidirectional not in (None, False, True):
        raise ValueError(f"gemma3 use_bidirectional_attention is a bool, got {bidirectional!r}")
    if model != "gemma3" and bidirectional not in (None, "vision", "all"):
        raise ValueError(f"gemma4 use_bidirectional_attention is None, 'vision' or 'all', got {bidirectional!r}")
    W = None
    if layer == "sliding":
        if sliding_window is None or int(sliding_window) < 1:
            raise ValueError(f"a sliding layer needs sliding_window >= 1, got {sliding_window!r}")
        W = int(sliding_window)

    am = None if attention_mask is None else np.asarray(attention_mask)
    tt = None if token_type_ids is None else np.asarray(token_type_ids)
    if am is not None and am.ndim != 2:
        raise ValueError(f"attention_mask must be 2-D [B, T], got shape {am.shape}")
    if tt is not None and tt.ndim != 2:
        raise ValueError(f"token_type_ids must be 2-D [B, T], got shape {tt.shape}")
    B = batch if batch is not None else (am.shape[0] if am is not None else (tt.shape[0] if tt is not None else None))
    if B is None:
        raise ValueError("batch is needed when neither attention_mask nor token_type_ids is given")
    if q_len is None:
        total = am.shape[1] if am is not None else (tt.shape[1] if tt is not None else None)
        if total is None:
            raise ValueError("q_len is needed when neither attention_mask nor token_type_ids is given")
        q_len = total - q_offset
    if kv_len is None:
        kv_len = q_offset + q_len - kv_offset
    q_len, kv_len, q_offset, kv_offset = int(q_len), int(kv_len), int(q_offset), int(kv_offset)
    if q_len < 0 or kv_len < 0 or q_offset < 0 or kv_offset < 0:
        raise ValueError("q_len, kv_len, q_offset, kv_offset must be >= 0")

    # Which rule applies (see the module docstring).
    bidir_all = (model == "gemma3" and bidirectional is True) or bidirectional == "all"
    use_blocks = False
    block_types = GEMMA3_BLOCK_TYPES if model == "gemma3" else GEMMA4_BLOCK_TYPES
    if tt is not None and not bidir_all:
        if model == "gemma3":
            use_blocks = True
        elif bidirectional == "vision":
            use_blocks = layer == "sliding" or model == "gemma4_unified_forward"
    causal = not bidir_all
    if layer == "full":
        window = (-1, -1)
    elif bidir_all:
        # Gemma3TextModel: (k <= q & q - k < W) | |q - k| < W;  Gemma 4 "all": |q - k| <= W (inclusive).
        window = (W - 1, W - 1) if model == "gemma3" else (W, W)
    else:
        # HF's window only bounds keys *before* the query; block keys after it stay visible, so the right
        # side is unbounded whenever a block overlay exists (causal already bounds it otherwise).
        window = (W - 1, -1) if use_blocks else (W - 1, 0)

    q_pos = np.broadcast_to(np.arange(q_len, dtype=np.int32) + q_offset, (B, q_len)).copy()
    valid = (np.ones((B, kv_len), dtype=bool) if am is None
             else _take(am.astype(bool), kv_offset, kv_len, False))
    k_pos, kv_valid, hole = padding_args(valid, kv_offset, causal=causal)
    if hole.any() and not causal and window[0] < 0:
        window = (_I32_MAX, window[1])  # excludes the int32-min hole positions; real keys are never that far
    out = dict(q_pos=q_pos, k_pos=k_pos, kv_valid=kv_valid, causal=causal, window=window,
               blocks_ignore_window=False)
    if not use_blocks:
        out.update(q_block=None, k_block=None)
        return out
    blocks = blocks_from_token_types(tt, block_types)
    q_block = _take(blocks, q_offset, q_len, -1)
    k_block = _take(blocks, kv_offset, kv_len, -1)
    k_block[hole] = -1
    out.update(q_block=q_block, k_block=k_block)
    if model == "gemma4_unified_forward" and layer == "sliding":
        # (causal & window) | block: the block overlay bypasses the window. Holes have block -1 and an
        # unreachable position, so they stay invisible.
        out.update(window=(W - 1, 0), blocks_ignore_window=True)
    return out
