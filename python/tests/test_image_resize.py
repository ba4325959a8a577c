"""Resampling: tessera's resize against PIL's Image.resize (bit-exact) for 8-bit RGB, bilinear and
bicubic, up and down, on random sizes and real photos; the double-precision reference within 1."""

import numpy as np
import pytest

import tessera
from image_fixtures import photo, pil_rgb

_t = tessera._tessera
Image = pytest.importorskip("PIL.Image")

FILTERS = {"bilinear": 2, "bicubic": 3}


def pil_resize(a, h, w, name):
    return np.array(Image.fromarray(a).resize((w, h), resample=FILTERS[name]))


def _random_cases(n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        h, w = rng.integers(1, 120, 2)
        th, tw = rng.integers(1, 160, 2)
        yield int(h), int(w), int(th), int(tw), int(rng.integers(0, 2**31))


@pytest.mark.parametrize("name", FILTERS)
def test_random_sizes_bit_exact(name):
    for h, w, th, tw, seed in _random_cases(150, 7 if name == "bicubic" else 8):
        a = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
        ours = _t.resize_image(a, th, tw, name)
        np.testing.assert_array_equal(ours, pil_resize(a, th, tw, name), err_msg=f"{h}x{w} -> {th}x{tw}")


@pytest.mark.parametrize("name", FILTERS)
@pytest.mark.parametrize("photo_name", ["astronaut.png", "chelsea.png", "rocket.jpg", "camera.png"])
@pytest.mark.parametrize("target", [(224, 224), (896, 896), (48, 1100), (333, 97), (1, 1)])
def test_photos_bit_exact(name, photo_name, target):
    a = pil_rgb(photo(photo_name))
    np.testing.assert_array_equal(_t.resize_image(a, *target, name), pil_resize(a, *target, name))


@pytest.mark.parametrize("name", FILTERS)
def test_one_axis_and_identity(name):
    a = np.random.default_rng(1).integers(0, 256, (40, 50, 3), dtype=np.uint8)
    for th, tw in [(40, 77), (13, 50), (40, 50)]:
        np.testing.assert_array_equal(_t.resize_image(a, th, tw, name), pil_resize(a, th, tw, name))


@pytest.mark.parametrize("name", FILTERS)
def test_reference_within_one_level(name):
    # One pass: fixed point vs double differs only in rounding, so by at most 1. Two passes: a 1
    # from the first pass is carried through the second, and bicubic's weights sum to more than 1
    # in magnitude (negative lobes), so there the bound is 2; bilinear's stay within 1.
    worst_one, worst_two = 0, 0
    for h, w, th, tw, seed in _random_cases(60, 11):
        a = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
        for size, is_one in [((h, tw), True), ((th, w), True), ((th, tw), False)]:
            fast = _t.resize_image(a, *size, name).astype(int)
            ref = _t.resize_image(a, *size, name, reference=True).astype(int)
            d = int(np.abs(fast - ref).max())
            worst_one, worst_two = (max(worst_one, d), worst_two) if is_one else (worst_one, max(worst_two, d))
    assert worst_one <= 1
    assert worst_two <= (2 if name == "bicubic" else 1)


def test_bad_arguments():
    a = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ValueError, match="target size"):
        _t.resize_image(a, 0, 4)
    with pytest.raises(ValueError, match="unknown resample filter"):
        _t.resize_image(a, 2, 2, "lanczos")


@pytest.mark.parametrize("name", FILTERS)
def test_pass_order_boundary(name):
    # Pillow picks which pass runs first from how many rows and columns go; either side of its
    # boundary (rows lost == 2 x columns lost) and the up/down mixes.
    a = np.random.default_rng(5).integers(0, 256, (90, 70, 3), dtype=np.uint8)
    for th, tw in [(50, 50), (49, 50), (51, 50), (50, 51), (50, 49), (30, 100), (120, 30), (100, 100), (20, 69), (89, 1)]:
        np.testing.assert_array_equal(_t.resize_image(a, th, tw, name), pil_resize(a, th, tw, name), err_msg=f"{th}x{tw}")
