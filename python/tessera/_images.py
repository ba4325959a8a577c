"""Images for tessera.Model: files or arrays to soft tokens, prompts laid out around them
(docs/images.md). Mixed into Model; the work is done by the C++ engine."""
from __future__ import annotations

import json
import os

import numpy as np

from ._args import INT32, int_arg

_BUDGETS = (70, 140, 280, 560, 1120)


def _as_image_list(images):
    if isinstance(images, (str, os.PathLike, np.ndarray)):
        return [images]
    return list(images)


class ImagesMixin:
    def _read_config(self):
        if self._config is None:
            with open(os.path.join(self._path, "config.json"), encoding="utf-8") as f:
                self._config = json.load(f)
        return self._config

    @property
    def tokenizer(self):
        """The checkpoint's tokenizer.model, else its tokenizer.json (encode(text, add_bos) /
        encode_with_special_tokens(text) / decode(ids)); read on first use."""
        if self._tokenizer is None:
            from . import _tessera
            self._tokenizer = _tessera._Tokenizer.from_checkpoint_dir(str(self._path))
        return self._tokenizer

    def encode_images(self, images, image_tokens=0):
        """Images (paths, or uint8 arrays [H, W] / [H, W, C] with C = 1, 3 or 4) to soft tokens:
        a list of float32 arrays [tokens, hidden], one per image. image_tokens: the Gemma 4 soft-token
        budget (70, 140, 280, 560, 1120); 0 takes the checkpoint's processor config."""
        rows, counts = self._encode(images, image_tokens)
        return np.split(rows, np.cumsum(counts)[:-1]) if counts else []

    def _encode(self, images, image_tokens):
        image_tokens = int_arg("image_tokens", image_tokens, 0, INT32[1])
        if image_tokens and image_tokens not in _BUDGETS:
            raise ValueError(f"image_tokens must be one of {_BUDGETS} (or 0 for the config's), got {image_tokens}")
        rows, counts = self._impl._encode_images(_as_image_list(images), image_tokens)
        return rows, list(counts)

    def encode_pixels(self, pixel_values, image_position_ids=None):
        """The vision encoder alone on processed pixels, as transformers' processors make them:
        Gemma 3 pixel_values [B, 3, H, W]; Gemma 4 / Gemma 4 unified pixel_values [B, patches, dim]
        with image_position_ids [B, patches, 2] ((-1, -1) marks padding). Returns the soft tokens of
        every image, concatenated: [N, hidden] float32 (transformers' get_image_features)."""
        pv = [np.ascontiguousarray(np.asarray(p), dtype=np.float32) for p in pixel_values]
        cfg = self._read_config()
        vision = cfg.get("vision_config") or {}
        if image_position_ids is None:
            if cfg.get("model_type") != "gemma3":
                raise ValueError("image_position_ids is needed for Gemma 4 pixel_values")
            pos = [None] * len(pv)
            soft = [int(cfg.get("mm_tokens_per_image", 256))] * len(pv)
        else:
            pos = [np.ascontiguousarray(np.asarray(p), dtype=np.int32) for p in image_position_ids]
            if len(pos) != len(pv):
                raise ValueError(f"{len(pv)} pixel_values but {len(pos)} image_position_ids")
            k2 = 1 if cfg.get("model_type") == "gemma4_unified" else int(vision.get("pooling_kernel_size", 3)) ** 2
            soft = [int(np.sum(~np.all(p == -1, axis=-1))) // k2 for p in pos]
        return self._impl._encode_pixels(pv, pos, soft)

    def _double_newline(self):
        # Gemma 3's processor frames each image with a blank line (two newlines, one token in Gemma's
        # vocabulary); its id comes from the tokenizer.
        has_tokenizer = any(os.path.exists(os.path.join(self._path, f)) for f in ("tokenizer.model", "tokenizer.json"))
        if self.model_type != "gemma3" or not has_tokenizer:
            return None
        ids = self.tokenizer.encode("\n\n", False)
        return ids[0] if len(ids) == 1 else None

    def _with_images(self, tokens, images, image_tokens):
        """Per-row token lists and images -> (tokens, token types, image rows) for the engine."""
        per_row = [images] if len(tokens) == 1 and not _is_nested(images) else list(images)
        if len(per_row) != len(tokens):
            raise ValueError(f"images: {len(per_row)} lists for {len(tokens)} rows")
        newline = self._double_newline()
        out_tokens, out_types, out_rows = [], [], []
        for row, imgs in zip(tokens, per_row):
            imgs = _as_image_list(imgs)
            rows, counts = self._encode(imgs, image_tokens) if imgs else (np.zeros((0, self.hidden_size), np.float32), [])
            t, ty = self._impl._layout_images(row, counts, newline)
            out_tokens.append(list(t))
            out_types.append(list(ty))
            out_rows.append(rows)
        return out_tokens, out_types, out_rows

    def _prompt_ids(self, input_ids, prompt):
        if (input_ids is None) == (prompt is None):
            raise ValueError("give exactly one of input_ids and prompt")
        if prompt is None:
            return input_ids
        return np.asarray([self.tokenizer.encode(str(prompt), True)], dtype=np.int64)


def _is_nested(images):
    return (isinstance(images, (list, tuple)) and len(images) > 0
            and all(isinstance(i, (list, tuple)) for i in images))
