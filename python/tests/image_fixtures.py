"""Shared inputs of the image tests: the photographs bundled with scikit-image, read by path."""

import glob
import os

import pytest


def photo_paths():
    """Every bundled PNG/JPEG photograph of skimage's data folder (empty without skimage)."""
    try:
        import skimage
    except ImportError:
        return []
    root = os.path.join(os.path.dirname(skimage.__file__), "data")
    return sorted(glob.glob(os.path.join(root, "*.png")) + glob.glob(os.path.join(root, "*.jpg")))


def photo(name):
    """One bundled photo's path; skips when skimage (or the file) is absent."""
    for p in photo_paths():
        if os.path.basename(p) == name:
            return p
    pytest.skip(f"skimage data file {name} not available")


def pil_rgb(path):
    """What transformers' load_image makes of a file: exif_transpose, then convert('RGB')."""
    import numpy as np
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        return np.array(ImageOps.exif_transpose(im).convert("RGB"))
