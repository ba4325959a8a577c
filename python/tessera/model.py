"""tessera.Model: run a Gemma 3 / Gemma 4 text model from a Hugging Face checkpoint (config.json +
safetensors) or a GGUF file (llama.cpp's converter and quantizer; docs/gguf-models.md)."""
from __future__ import annotations

import json
import os
import queue
import threading

import numpy as np

from . import _tessera
from ._args import INT32, INT64, THREADS, UINT64, int_arg, int_values
from ._images import ImagesMixin

__all__ = ["Model"]

_PRECISIONS = {"float32": "f32", "bfloat16": "bf16", "int8": "int8"}


class Model(ImagesMixin):
    """A loaded checkpoint. Use `Model.load(path)`: a checkpoint directory or a .gguf file.

    Batches are numpy arrays [B, S] with an optional 2-D `attention_mask` (1 = real token); each
    row's real tokens must be contiguous (left or right padding). Rows are run from position 0
    whatever their padding (RoPE attention depends only on relative positions, so logits equal a
    left-padded transformers run). Image soft tokens: `image_embeds` [N, hidden] holds one row per
    image placeholder token, in batch-row-major order (as transformers scatters them); image blocks
    come from `token_type_ids` (Gemma 3) or `mm_token_type_ids` (Gemma 4).
    """

    def __init__(self, impl, path=None):
        self._impl = impl
        self._path = None if path is None else str(path)
        self._tokenizer = None
        self._config = None

    @classmethod
    def load(cls, path, dtype="float32", max_batch=1, max_context=4096, max_chunk=None, kv_dtype="float32",
             num_threads=0, mode="unified", attention_precision="float32", matmul_precision="float32",
             repack=True, quantize=None, draft=None, draft_tokens=4, draft_quantize=None):
        """dtype: convert weights on load ("float32", "bfloat16", "float16") or "auto" (keep stored).
        A GGUF's block-quantized matrices (q8_0, q4_k, ...) are kept as stored whatever dtype says;
        its f32/f16/bf16 ones convert like a checkpoint's.
        max_chunk: prefill chunk (default min(256, max_context)); an image block must fit in one.
        mode: "unified" (structured masks, in-place cache), "bias" (dense bias + concat cache, the
        exporter fallback) or "split" (bias prefill, hand-over, unified decode); same tokens, different
        cost. bias/split need rows of equal length.
        attention_precision: "float32", or "bfloat16" to round q and the softmax weights to bf16 in
        attention (a bf16 model's operands; twice the arithmetic rate on CPUs with AVX-512-BF16);
        needs kv_dtype="bfloat16".
        matmul_precision: "float32" (weights stored as f32 are repacked once at load into the f32
        panels the GEMM reads, which takes longer than mapping them; converted ones are not), or
        "bfloat16" to round every Linear's input to bf16 (a bf16 model's matmul operands; on CPUs
        with AVX-512-BF16 every Linear then runs on its dot product at twice the FMA rate, over the
        weights repacked once at load); needs bf16 weights (dtype="bfloat16", or "auto" on a bf16
        checkpoint); or "int8": block-quantized weights (a GGUF, or quantize=) multiply Linear inputs
        rounded to one int8 per block in prefill as decode does (llama.cpp's numerics; half the
        integer products of "float32"'s prefill, which keeps two bytes per input; on CPUs with
        AVX-512 VNNI); other weights as "float32".
        repack: False reads the weights as stored (mapped, or as converted) instead of repacking
        them at load: the load is faster (no fresh copy to write), prefill slower (the GEMM packs its
        blocks per call; bench/BENCHMARKS.md "Repacking at load"). `Model.repacked` tells which was done.
        A weight holding NaN or inf (or overflowing the dtype it is converted to) raises ValueError
        naming the tensor and element.
        quantize: "q8_0", "q4_0", "q4_k_m" or "q5_k_m" quantizes a checkpoint directory's matrices at load into
        the blocks `tessera.quantize` would write to a GGUF (docs/quantizing.md); None: as stored.
        draft: a Gemma 4 assistant checkpoint directory (model_type gemma4_assistant) loaded beside
        the model: generate then decodes speculatively, draft_tokens proposals verified per step
        (docs/speculative.md), one row at a time. Greedy: the tokens are exactly those without it;
        sampling: distributed exactly as without it (the distribution-preserving acceptance rule).
        draft_quantize: "q8_0" or "q4_0" quantizes the drafter's matrices at load (a cheaper draft
        step; its proposals may change, the output does not); None: as stored."""
        max_batch = int_arg("max_batch", max_batch, 1, INT64[1])
        max_context = int_arg("max_context", max_context, 1, INT64[1])
        max_chunk = min(256, max_context) if max_chunk is None else int_arg("max_chunk", max_chunk, 1, INT64[1])
        if max_chunk > max_context:
            raise ValueError(f"need max_chunk <= max_context, got max_chunk={max_chunk}, max_context={max_context}")
        num_threads = int_arg("num_threads", num_threads, *THREADS)
        draft_tokens = int_arg("draft_tokens", draft_tokens, 1, INT64[1])
        return cls(_tessera._Model(str(path), str(dtype), max_batch, max_context, max_chunk,
                                   str(kv_dtype), num_threads, str(mode),
                                   _PRECISIONS.get(attention_precision, str(attention_precision)),
                                   _PRECISIONS.get(matmul_precision, str(matmul_precision)), bool(repack),
                                   "" if quantize is None else str(quantize),
                                   "" if draft is None else os.fspath(draft), draft_tokens,
                                   "" if draft_quantize is None else str(draft_quantize)), path)

    @property
    def tokenizer(self):
        """The tokenizer (encode(text, add_bos) / decode(ids)), read on first use: the checkpoint's
        tokenizer.model (else its tokenizer.json), or the vocabulary a GGUF file carries."""
        if self._tokenizer is None and self._impl._is_gguf:
            self._tokenizer = self._impl._gguf_tokenizer(self._path)
        return super().tokenizer

    # GGUF only: each value the file does not hold and how it was inferred (docs/gguf-models.md).
    inferred = property(lambda self: list(self._impl._inferred))
    vocab_size = property(lambda self: self._impl.vocab_size)
    hidden_size = property(lambda self: self._impl.hidden_size)
    model_type = property(lambda self: self._impl.model_type)
    # Whether the Linear weights were repacked at load into the GEMM's panels (see load's repack).
    repacked = property(lambda self: self._impl.repacked)
    # Whether a drafter was loaded beside the model (load's draft).
    has_draft = property(lambda self: self._impl.has_draft)

    def _rows(self, input_ids, attention_mask, token_types, image_embeds):
        ids = np.asarray(input_ids)
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"input_ids must be an integer array [B, S], got {ids.dtype} {ids.shape}")
        int_values("input_ids", ids, *INT32)  # the C++ side takes int32 ids; it checks the vocab
        B, S = ids.shape
        mask = np.ones((B, S), dtype=bool) if attention_mask is None else np.asarray(attention_mask).astype(bool)
        if mask.shape != (B, S):
            raise ValueError(f"attention_mask has shape {mask.shape}, expected {(B, S)}")
        types = None if token_types is None else np.asarray(token_types)
        if types is not None and types.shape != (B, S):
            raise ValueError(f"token type ids have shape {types.shape}, expected {(B, S)}")
        if types is not None:
            int_values("token_type_ids", types, *INT32)
        spans, tokens, type_rows = [], [], []
        for b in range(B):
            idx = np.flatnonzero(mask[b])
            if idx.size == 0:
                raise ValueError(f"row {b} has no tokens")
            if idx[-1] - idx[0] + 1 != idx.size:
                raise ValueError(f"row {b} of attention_mask has holes; only left or right padding is supported")
            spans.append((int(idx[0]), int(idx[-1]) + 1))
            tokens.append(ids[b, idx[0]:idx[-1] + 1].astype(np.int64).tolist())
            if types is not None:
                type_rows.append(types[b, idx[0]:idx[-1] + 1].astype(np.int64).tolist())
        embeds = []
        if image_embeds is not None:
            e = np.ascontiguousarray(image_embeds, dtype=np.float32)
            if e.ndim != 2:
                raise ValueError(f"image_embeds must be [N, hidden], got {e.shape}")
            # Rows are consumed by placeholder tokens in batch-row-major order (padding excluded);
            # the C++ side checks each row's count against its placeholders.
            counts = [self._placeholders(t) for t in tokens]
            if sum(counts) != e.shape[0]:
                raise ValueError(f"image_embeds has {e.shape[0]} rows but the batch has {sum(counts)} image "
                                 f"placeholder tokens")
            start = 0
            for c in counts:
                embeds.append(np.ascontiguousarray(e[start:start + c]))
                start += c
        return spans, tokens, type_rows, embeds

    def _placeholders(self, row_tokens):
        ids = set(self._impl._soft_token_ids)
        return sum(1 for t in row_tokens if t in ids)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mm_token_type_ids=None,
                image_embeds=None, pixel_values=None, image_position_ids=None):
        """A fresh prefill; returns logits [B, S, vocab] float32 (zeros at padding positions).
        pixel_values (with image_position_ids for Gemma 4), as transformers' processors make them,
        are encoded here instead of giving image_embeds."""
        types = mm_token_type_ids if mm_token_type_ids is not None else token_type_ids
        if pixel_values is not None:
            if image_embeds is not None:
                raise ValueError("give image_embeds or pixel_values, not both")
            image_embeds = self.encode_pixels(pixel_values, image_position_ids)
        spans, tokens, type_rows, embeds = self._rows(input_ids, attention_mask, types, image_embeds)
        packed = self._impl._forward(tokens, type_rows, embeds)
        B, S = np.asarray(input_ids).reshape(len(tokens), -1).shape
        out = np.zeros((B, S, packed.shape[-1]), dtype=np.float32)
        for b, (lo, hi) in enumerate(spans):
            out[b, lo:hi] = packed[b, :hi - lo]
        return out

    def generate(self, input_ids=None, max_new_tokens=32, attention_mask=None, token_type_ids=None,
                 mm_token_type_ids=None, image_embeds=None, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 stop_tokens=None, on_token=None, stream=False, return_finish_reasons=False, prompt=None,
                 images=None, image_tokens=0, pixel_values=None, image_position_ids=None, draft_tokens=None):
        """Generates up to max_new_tokens per row (greedy when temperature == 0); stops after an
        end-of-sequence token (the config's eos ids unless stop_tokens is given). Returns a list of
        token-id lists, one per row (with return_finish_reasons, also a list of "stop", "length",
        "context" or "cancelled"). Each row samples with its own generator seeded by `seed`, so a
        row's tokens do not depend on the rows beside it.

        Streaming: on_token(row, token) is called as each token is chosen; returning False stops
        that row, an exception stops every row and is raised here. stream=True instead returns an
        iterator of (row, token) pairs as they are produced; closing it early (break) stops the
        generation. Logits holding NaN or inf (from NaN image_embeds, say) raise ValueError naming
        the step and row rather than yield a token (docs/reliability.md).

        prompt: text instead of input_ids (encoded with the model's tokenizer, with BOS: the
        checkpoint's tokenizer.model, or a GGUF's own vocabulary).
        images: paths or uint8 arrays (a list per row when B > 1), encoded by the checkpoint's
        processor and vision encoder; each image marker in the row (Gemma 3: <start_of_image>;
        Gemma 4: <|image|>) takes one image in order, and without markers the images go first.
        image_tokens: the Gemma 4 soft-token budget per image (70 ... 1120; 0: the config's).
        pixel_values / image_position_ids: processed pixels (as in forward) instead of image_embeds.
        draft_tokens: proposals per speculative step with the drafter given to load (None: load's
        draft_tokens when it had a drafter, else plain decoding; 0: plain decoding). Speculative
        decoding takes one row."""
        input_ids = self._prompt_ids(input_ids, prompt)
        if pixel_values is not None:
            if image_embeds is not None:
                raise ValueError("give image_embeds or pixel_values, not both")
            image_embeds = self.encode_pixels(pixel_values, image_position_ids)
        types = mm_token_type_ids if mm_token_type_ids is not None else token_type_ids
        max_new_tokens = int_arg("max_new_tokens", max_new_tokens, 0, INT64[1])
        top_k = int_arg("top_k", top_k, 0, INT64[1])
        seed = int_arg("seed", seed, *UINT64)
        stop = (list(self._impl.eos_token_ids) if stop_tokens is None
                else [int_arg("stop_tokens", t, *INT32) for t in stop_tokens])
        if on_token is not None and not callable(on_token):
            raise TypeError(f"on_token must be callable, got {type(on_token).__name__}")
        if stream and on_token is not None:
            raise ValueError("give on_token or stream=True, not both")
        if images is not None and (image_embeds is not None or types is not None):
            raise ValueError("images are laid out here: give them without image_embeds or token types")
        _, tokens, type_rows, embeds = self._rows(input_ids, attention_mask, types, image_embeds)
        if images is not None:
            tokens, type_rows, embeds = self._with_images(tokens, images, image_tokens)
        draft_tokens = -1 if draft_tokens is None else int_arg("draft_tokens", draft_tokens, 0, INT64[1])
        args = (tokens, type_rows, embeds, max_new_tokens, float(temperature), top_k, float(top_p), seed, stop,
                draft_tokens)
        if stream:
            return self._stream(args)
        rows, reasons = self._impl._generate(*args, on_token=on_token)
        return (rows, reasons) if return_finish_reasons else rows

    def _stream(self, args):
        # The C++ loop runs on a helper thread (GIL released while it computes) and hands each token
        # to this generator through a queue; closing the generator sets the cancel flag.
        q = queue.SimpleQueue()
        cancel = _tessera._Cancel()
        end = object()
        result = {}

        def run():
            try:
                self._impl._generate(*args, on_token=lambda row, tok: q.put((row, tok)), cancel=cancel)
            except BaseException as e:  # noqa: BLE001 -- re-raised in the consumer's thread
                result["error"] = e
            finally:
                q.put(end)

        worker = threading.Thread(target=run, name="tessera-generate", daemon=True)
        worker.start()
        try:
            while (item := q.get()) is not end:
                yield item
        finally:
            cancel.set()
            worker.join()
        if "error" in result:
            raise result["error"]
