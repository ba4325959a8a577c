"""Images through the whole model against transformers.

From the committed goldens (transformers' own forward / generate with pixel_values, see
python/scripts/make_tiny_checkpoints.py): the vision path's soft tokens, the logits of a padded
batch of two and 32 greedy tokens, all from pixels.

Live (torch + transformers + PIL + scikit-image): image files through Tessera's decoder, processor,
encoder and prompt layout, against transformers' processor + model on the same photographs, several
images per prompt and a batch of two rows with different images.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import tessera
from helpers.models import MODELS_DIR, load_golden
from test_model_conformance import REL_TOL, assert_logits_close

MULTIMODAL = ["gemma3", "gemma4", "gemma4_unified"]


def pixel_kwargs(z, prefix=""):
    kw = {"pixel_values": z[prefix + "pixel_values"]}
    if prefix + "image_position_ids" in z:
        kw["image_position_ids"] = z[prefix + "image_position_ids"]
    return kw


def type_kwargs(z, prefix=""):
    return {k: z[prefix + k] for k in ("token_type_ids", "mm_token_type_ids") if prefix + k in z}


@pytest.fixture(scope="module", params=MULTIMODAL)
def case(request):
    name = request.param
    model = tessera.Model.load(os.path.join(MODELS_DIR, name), max_batch=2, max_context=64, max_chunk=32)
    return name, model, load_golden(name)


def rel_err(got, ref):
    return np.abs(got - ref).max() / np.abs(ref).max()


def test_soft_tokens_from_pixels_match_get_image_features(case):
    name, model, z = case
    for prefix in ("", "gen_"):
        got = model.encode_pixels(**pixel_kwargs(z, prefix))
        ref = z[prefix + "image_embeds"]
        assert got.shape == ref.shape
        assert rel_err(got, ref) <= REL_TOL, f"{name} {prefix}image_embeds: {rel_err(got, ref):.2e}"


def test_logits_from_pixels_match_transformers(case):
    name, model, z = case
    got = model.forward(z["input_ids"], z["attention_mask"], **type_kwargs(z), **pixel_kwargs(z))
    assert_logits_close(model, z, got, z["logits"])


def test_greedy_tokens_from_pixels_match_transformers(case):
    name, model, z = case
    out = model.generate(z["gen_prompt"], 32, stop_tokens=[], **type_kwargs(z, "gen_"), **pixel_kwargs(z, "gen_"))
    assert out[0] == z["gen_tokens"].tolist()


def test_text_only_checkpoint_refuses_images():
    m = tessera.Model.load(os.path.join(MODELS_DIR, "gemma4_text"), max_context=64)
    with pytest.raises(ValueError, match="text-only"):
        m.encode_images([np.zeros((8, 8, 3), np.uint8)])


# ------------------------------------------------------------------------------------------------------------------
# Live: files -> Tessera's whole image path vs transformers' processor + model
# ------------------------------------------------------------------------------------------------------------------

# Processor settings matching each tiny tower (its patch size, merge and position table).
TINY_PROCESSOR = {
    "gemma3": {"image_processor_type": "Gemma3ImageProcessor", "size": {"height": 12, "width": 12},
               "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
               "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True},
    "gemma4": {"image_processor_type": "Gemma4ImageProcessor", "patch_size": 2, "pooling_kernel_size": 2,
               "max_soft_tokens": 70, "resample": 3, "do_rescale": True, "rescale_factor": 1 / 255},
    "gemma4_unified": {"image_processor_type": "Gemma4UnifiedImageProcessor", "patch_size": 2,
                       "pooling_kernel_size": 1, "max_soft_tokens": 70, "resample": 3, "do_rescale": True,
                       "rescale_factor": 1 / 255},
}


def photos(tmp_path):
    """Square crops (the tiny towers' position tables are small) of scikit-image's photographs, of
    several sizes, saved as PNG and JPEG files."""
    pytest.importorskip("PIL")
    skdata = pytest.importorskip("skimage.data")
    from PIL import Image
    out = []
    for i, (img, side) in enumerate([(skdata.astronaut(), 300), (skdata.coffee(), 400), (skdata.chelsea(), 280),
                                     (skdata.camera(), 200)]):
        h, w = img.shape[:2]
        crop = img[(h - side) // 2:(h - side) // 2 + side, (w - side) // 2:(w - side) // 2 + side]
        path = tmp_path / f"photo{i}.{'jpg' if i % 2 else 'png'}"
        Image.fromarray(crop).save(path)
        out.append(str(path))
    return out


def hf_processor(name):
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
    cfg = {k: v for k, v in TINY_PROCESSOR[name].items() if k != "image_processor_type"}
    if name == "gemma3":
        return Gemma3ImageProcessorPil(**cfg)
    if name == "gemma4":
        return Gemma4ImageProcessorPil(**cfg)
    pytest.importorskip("torchvision")
    from transformers.models.gemma4_unified.image_processing_gemma4_unified import Gemma4UnifiedImageProcessor
    return Gemma4UnifiedImageProcessor(**cfg)


def hf_generate(name, ckpt, ids, types, pixels, n):
    import torch
    import transformers
    cls = getattr(transformers, {"gemma3": "Gemma3ForConditionalGeneration", "gemma4": "Gemma4ForConditionalGeneration",
                                 "gemma4_unified": "Gemma4UnifiedForConditionalGeneration"}[name])
    model = cls.from_pretrained(ckpt, dtype=torch.float32).eval()
    kw = {"token_type_ids" if name == "gemma3" else "mm_token_type_ids": torch.tensor([types])}
    kw.update({k: torch.tensor(np.asarray(v)) for k, v in pixels.items() if k not in ("num_soft_tokens_per_image", "num_crops")})
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None, **kw)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("name", MULTIMODAL)
def test_image_files_generate_as_transformers(name, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    files = photos(tmp_path)
    ckpt = tmp_path / name
    shutil.copytree(os.path.join(MODELS_DIR, name), ckpt)
    (ckpt / "preprocessor_config.json").write_text(json.dumps(TINY_PROCESSOR[name]))
    m = tessera.Model.load(ckpt, max_batch=2, max_context=512, max_chunk=256)
    ids = m._impl._special_ids
    marker = ids["boi"] if name == "gemma3" else ids["image"]
    text = [ids["bos"], 17, 23, marker, 31, 37, marker, 41]  # two images between text
    from PIL import Image
    pil = [Image.open(f).convert("RGB") for f in files]
    proc = hf_processor(name)
    for row_images in (pil[:2], pil[2:]):
        px = proc(row_images, return_tensors="np")
        n_soft = ([m._read_config().get("mm_tokens_per_image", 256)] * len(row_images) if name == "gemma3"
                  else list(np.asarray(px["num_soft_tokens_per_image"]).reshape(-1)))
        layout, types = [], []
        k = 0
        for t in text:  # the processor's expansion: boi, soft x n, eoi (no "\n\n" without a tokenizer)
            if t == marker:
                seq = [ids["boi"]] + [ids["image"]] * int(n_soft[k]) + [ids["eoi"]]
                k += 1
            else:
                seq = [t]
            layout += seq
            types += [1 if s == ids["image"] else 0 for s in seq]
        want = hf_generate(name, ckpt, layout, types, px, 16)
        paths = files[:2] if row_images is pil[:2] else files[2:]
        if name == "gemma4_unified":
            # transformers' unified processor resizes with torchvision, not PIL: compare the model
            # path on its pixels, and the file path on the layout it makes.
            got = m.generate([layout], 16, stop_tokens=[], mm_token_type_ids=[types],
                             pixel_values=px["pixel_values"], image_position_ids=px["image_position_ids"])
            assert got[0] == want
            continue
        got = m.generate(np.asarray([text]), 16, stop_tokens=[], images=paths)
        assert got[0] == want, f"{name}: tokens from files differ from transformers"


@pytest.mark.parametrize("name", ["gemma4"])
def test_batch_of_two_rows_with_different_images(name, tmp_path):
    """Each row of a padded batch generates what it generates alone (rows never see each other)."""
    files = photos(tmp_path)
    ckpt = tmp_path / name
    shutil.copytree(os.path.join(MODELS_DIR, name), ckpt)
    (ckpt / "preprocessor_config.json").write_text(json.dumps(TINY_PROCESSOR[name]))
    m = tessera.Model.load(ckpt, max_batch=2, max_context=512, max_chunk=256)
    image = m._impl._special_ids["image"]
    rows = [[2, 17, image, 31], [2, image, 19, 23, image, 29, 31]]
    imgs = [[files[0]], [files[1], files[3]]]
    width = max(map(len, rows))
    ids = np.array([[0] * (width - len(r)) + r for r in rows])
    mask = np.array([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    both = m.generate(ids, 12, attention_mask=mask, stop_tokens=[], images=imgs)
    for r in range(2):
        alone = m.generate(np.array([rows[r]]), 12, stop_tokens=[], images=imgs[r])
        assert both[r] == alone[0]
