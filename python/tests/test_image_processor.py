"""Processors: tessera's Gemma 3 / Gemma 4 / Gemma 4 unified preprocessing against transformers'
processors on real photos, several budgets and aspect ratios (extreme ones cropped from photos),
plus the size arithmetic and config reading."""

import json

import numpy as np
import pytest

import tessera
from image_fixtures import photo, pil_rgb

_t = tessera._tessera
Image = pytest.importorskip("PIL.Image")
pytest.importorskip("transformers")

PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "retina.jpg", "camera.png", "logo.png"]
BUDGETS = [70, 140, 280, 560, 1120]


def _crops():
    """(name, HWC uint8) inputs: whole photos and crops of extreme aspect ratio or tiny size."""
    for name in PHOTOS:
        yield name, pil_rgb(photo(name))
    a = pil_rgb(photo("astronaut.png"))
    yield "40x500", a[:40, :500]
    yield "500x40", a[:500, :40]
    yield "7x512", a[:7, :512]
    yield "300x301", a[:300, :301]
    yield "48x48", a[:48, :48]
    yield "17x23", a[:17, :23]


CROPS = list(_crops()) if pytest.importorskip("skimage") else []


def _gemma3_reference():
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    # The settings of a released Gemma 3 checkpoint's preprocessor_config.json.
    return Gemma3ImageProcessorPil(size={"height": 896, "width": 896}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                   resample=2, rescale_factor=1 / 255)


@pytest.mark.parametrize("case", CROPS, ids=lambda c: c[0])
def test_gemma3_matches_transformers(case):
    _, a = case
    ours = _t.ImageProcessor.from_dict({}, "gemma3").process(a)
    ref = _gemma3_reference()(Image.fromarray(a), return_tensors="np")["pixel_values"][0]
    assert ours["pixels"].shape == (3, 896, 896) and ours["soft_tokens"] == 256
    np.testing.assert_array_equal(ours["pixels"], ref)


def _gemma4_pil(budget):
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    return Gemma4ImageProcessorPil(max_soft_tokens=budget)


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("case", CROPS, ids=lambda c: c[0])
def test_gemma4_matches_transformers_pil(case, budget):
    _, a = case
    proc = _t.ImageProcessor.from_dict({}, "gemma4")
    ref = _gemma4_pil(budget)(Image.fromarray(a), return_tensors="np")
    ours = proc.process(a, budget)
    np.testing.assert_array_equal(ours["pixels"], ref["pixel_values"][0])
    np.testing.assert_array_equal(ours["positions"], ref["image_position_ids"][0])
    assert ours["soft_tokens"] == int(ref["num_soft_tokens_per_image"][0])
    assert proc.soft_tokens(*a.shape[:2], budget) == ours["soft_tokens"]
    assert ours["valid_rows"] == ours["soft_tokens"] * 9


def test_target_size_matches_transformers_math():
    from transformers.models.gemma4.image_processing_pil_gemma4 import get_aspect_ratio_preserving_size

    proc = _t.ImageProcessor.from_dict({}, "gemma4")
    rng = np.random.default_rng(0)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 5000, (400, 2))]
    sizes += [(1, 1), (1, 20000), (20000, 1), (47, 48), (48, 47), (3, 10000), (10000, 3), (768, 768), (1, 47)]
    for h, w in sizes:
        for budget in BUDGETS:
            try:
                expected = get_aspect_ratio_preserving_size(h, w, 16, budget * 9, 3)
            except ValueError as e:
                with pytest.raises(ValueError, match="0 x 0|exceeds"):
                    proc.target_size(h, w, budget)
                continue
            assert proc.target_size(h, w, budget) == expected, (h, w, budget)


def test_budget_must_be_supported():
    proc = _t.ImageProcessor.from_dict({}, "gemma4")
    with pytest.raises(ValueError, match="70, 140, 280, 560, 1120"):
        proc.soft_tokens(100, 100, 100)
    with pytest.raises(ValueError, match="max_soft_tokens 71"):
        _t.ImageProcessor.from_dict({"max_soft_tokens": 71}, "gemma4")
    g3 = _t.ImageProcessor.from_dict({}, "gemma3")
    assert g3.soft_tokens(10, 20) == 256
    with pytest.raises(ValueError, match="always 256"):
        g3.soft_tokens(10, 20, 280)


def _pixel_gap(ours, ref, rows):
    d = np.abs(ours[:rows].astype(np.float64) - ref[:rows].astype(np.float64)) * 255
    return float(d.max()), float(d.mean())


@pytest.mark.parametrize("budget", [140, 280, 1120])
def test_gemma4_unified_close_to_torchvision_processor(budget):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from transformers.models.gemma4_unified.image_processing_gemma4_unified import Gemma4UnifiedImageProcessor

    ref_proc = Gemma4UnifiedImageProcessor(max_soft_tokens=budget)
    proc = _t.ImageProcessor.from_dict({}, "gemma4_unified")
    worst_max, means = 0.0, []
    for _, a in CROPS:
        ref = ref_proc(Image.fromarray(a), return_tensors="pt")
        ours = proc.process(a, budget)
        assert ours["soft_tokens"] == int(ref["num_soft_tokens_per_image"][0])
        np.testing.assert_array_equal(ours["positions"], ref["image_position_ids"][0].numpy())
        assert ours["pixels"].shape == tuple(ref["pixel_values"][0].shape)
        n = ours["valid_rows"]
        np.testing.assert_array_equal(ours["pixels"][n:], 0)
        mx, mean = _pixel_gap(ours["pixels"], ref["pixel_values"][0].to(torch.float32).numpy(), n)
        worst_max, means = max(worst_max, mx), means + [mean]
    # torchvision's antialiased bicubic is not PIL's (its own fixed point and rounding): measured on
    # these inputs (docs/images.md) the gap is 2 levels at most and about 0.006 of a level on
    # average per image; the bounds leave margin over that.
    print(f"unified vs torchvision, budget {budget}: max {worst_max:.3f} levels, mean {max(means):.4f}")
    assert worst_max <= 3.0 + 1e-3
    assert max(means) < 0.02


@pytest.mark.parametrize("budget", [280])
def test_gemma4_pil_vs_torchvision_processor_gap(budget):
    """For the report: how far transformers' own two Gemma 4 processors are apart (we match PIL's)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor

    tv = Gemma4ImageProcessor(max_soft_tokens=budget)
    proc = _t.ImageProcessor.from_dict({}, "gemma4")
    worst_max, means = 0.0, []
    for _, a in CROPS:
        ref = tv(Image.fromarray(a), return_tensors="pt")
        ours = proc.process(a, budget)
        mx, mean = _pixel_gap(ours["pixels"], ref["pixel_values"][0].to(torch.float32).numpy(), ours["valid_rows"])
        worst_max, means = max(worst_max, mx), means + [mean]
    print(f"gemma4 PIL-exact vs torchvision, budget {budget}: max {worst_max:.3f} levels, mean {max(means):.4f}")
    assert worst_max <= 3.0 + 1e-3


def test_from_checkpoint_reads_configs(tmp_path):
    g4 = tmp_path / "g4"
    g4.mkdir()
    (g4 / "processor_config.json").write_text(json.dumps({
        "image_processor": {"image_processor_type": "Gemma4ImageProcessor", "max_soft_tokens": 560, "patch_size": 16,
                            "pooling_kernel_size": 3, "resample": 3, "do_normalize": False,
                            "rescale_factor": 0.00392156862745098},
        "image_seq_length": 280}))
    p = _t.ImageProcessor.from_checkpoint(str(g4), "gemma4")
    assert p.soft_tokens(768, 768) == _t.ImageProcessor.from_dict({}, "gemma4").soft_tokens(768, 768, 560)
    assert p.target_size(1000, 1000) == _t.ImageProcessor.from_dict({}, "gemma4").target_size(1000, 1000, 560)
    g3 = tmp_path / "g3"
    g3.mkdir()
    (g3 / "preprocessor_config.json").write_text(json.dumps({
        "size": {"height": 448, "width": 448}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_seq_length": 64, "resample": 2, "do_pan_and_scan": None}))
    p3 = _t.ImageProcessor.from_checkpoint(str(g3), "gemma3")
    out = p3.process(np.zeros((10, 10, 3), np.uint8))
    assert out["pixels"].shape == (3, 448, 448) and out["soft_tokens"] == 64
    np.testing.assert_array_equal(out["pixels"], -1.0)
    empty = tmp_path / "none"
    empty.mkdir()
    assert _t.ImageProcessor.from_checkpoint(str(empty), "gemma3").soft_tokens(5, 5) == 256


@pytest.mark.parametrize("fields,message", [
    ({"resample": 1}, "'resample'"),
    ({"size": {"height": 10, "width": 20}}, "square"),
    ({"image_mean": [0.5, 0.5]}, "image_mean"),
    ({"do_pan_and_scan": True}, "do_pan_and_scan"),
    ({"image_std": [0.5, 0.0, 0.5]}, "nonzero std"),
    ({"patch_size": "16"}, "'patch_size'"),
])
def test_bad_config_fields_named(fields, message):
    with pytest.raises(ValueError, match=message):
        _t.ImageProcessor.from_dict(fields, "gemma4" if "patch_size" in fields else "gemma3")


def test_do_resize_off_is_honoured():
    p = _t.ImageProcessor.from_dict({"do_resize": False}, "gemma4")
    a = np.random.default_rng(0).integers(0, 256, (96, 144, 3), dtype=np.uint8)
    out = p.process(a)
    assert out["valid_rows"] == 6 * 9 and out["soft_tokens"] == 6
    expected = (a.astype(np.float64) * (1 / 255)).astype(np.float32)
    np.testing.assert_array_equal(out["pixels"][10].reshape(16, 16, 3), expected[16:32, 16:32])  # row 1, col 1
    with pytest.raises(ValueError, match="do_resize is off"):
        p.process(a[:95])


def test_unified_layout_is_merged_patches():
    # A 96x96 image at any budget stays 96x96 (a whole 2x2 grid of 48-pixel merged patches).
    p = _t.ImageProcessor.from_dict({"do_resize": False}, "gemma4_unified")
    a = np.random.default_rng(2).integers(0, 256, (96, 144, 3), dtype=np.uint8)
    out = p.process(a, 70)
    assert out["pixels"].shape == (70, 48 * 48 * 3) and out["valid_rows"] == 6 and out["soft_tokens"] == 6
    expected = (a.astype(np.float64) * (1 / 255)).astype(np.float32)
    np.testing.assert_array_equal(out["pixels"][4].reshape(48, 48, 3), expected[48:96, 48:96])
    np.testing.assert_array_equal(out["positions"][:6], [[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 1]])
    np.testing.assert_array_equal(out["positions"][6:], -1)


def test_process_accepts_path_and_gray(tmp_path):
    p = _t.ImageProcessor.from_dict({}, "gemma4")
    path = photo("camera.png")
    by_path = p.process(path)
    by_array = p.process(np.array(Image.open(path)))
    np.testing.assert_array_equal(by_path["pixels"], by_array["pixels"])
