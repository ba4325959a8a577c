"""Bad image input through the public entry points: each a ValueError naming what is wrong; and
encoding from several threads at once."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import tessera
from helpers.models import MODELS_DIR, copy_config, read_safetensors

DEMO = os.path.join(os.path.dirname(MODELS_DIR), "..", "..", "models", "demo-gemma4-unified")
PHOTO = os.path.join(DEMO, "astronaut.jpg")


@pytest.fixture(scope="module")
def demo():
    return tessera.Model.load(DEMO, max_context=256, max_chunk=128)


def test_files_that_are_not_images(demo, tmp_path):
    text = tmp_path / "notes.jpg"
    text.write_text("not an image at all")
    with pytest.raises(ValueError, match="notes.jpg.*not a JPEG or PNG"):
        demo.encode_images([str(text)])
    with pytest.raises(ValueError, match="missing.png"):
        demo.encode_images([str(tmp_path / "missing.png")])
    data = open(PHOTO, "rb").read()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="cut.jpg"):
        demo.encode_images([str(cut)])
    with pytest.raises(ValueError, match="images\\[0\\]"):
        demo.encode_images([np.zeros((4, 4, 3), np.float32)])


def test_zero_size_and_bad_arrays(demo):
    with pytest.raises(ValueError):
        demo.encode_images([np.zeros((0, 5, 3), np.uint8)])
    with pytest.raises(ValueError):
        demo.encode_images([np.zeros((5, 5, 2), np.uint8)])


def test_budget_the_processor_does_not_allow(demo):
    with pytest.raises(ValueError, match="image_tokens must be one of"):
        demo.encode_images([PHOTO], image_tokens=100)


def test_images_that_do_not_fit_the_context():
    small = tessera.Model.load(DEMO, max_context=96, max_chunk=96)
    with pytest.raises(ValueError, match="context|max_context"):
        small.generate([[2, 10, 11]], 4, images=[PHOTO, PHOTO])


def test_image_markers_that_do_not_match_the_images(demo):
    image = demo._impl._special_ids["image"]
    with pytest.raises(ValueError, match="3 image markers.*2 images|image soft tokens"):
        demo.generate([[2, image, 10, image, 11, image]], 4, images=[PHOTO, PHOTO])


def test_checkpoint_without_vision_weights(tmp_path):
    header, base, data = read_safetensors(os.path.join(DEMO, "model.safetensors"))
    keep = {k: v for k, v in header.items() if k == "__metadata__" or "vision" not in k}
    assert len(keep) < len(header)
    chunks, offset, new = [], 0, {}
    for k, v in keep.items():
        if k == "__metadata__":
            new[k] = v
            continue
        a, b = v["data_offsets"]
        chunks.append(data[base + a:base + b])
        new[k] = dict(v, data_offsets=[offset, offset + b - a])
        offset += b - a
    blob = json.dumps(new).encode()
    dst = tmp_path / "no_vision"
    copy_config(DEMO, dst)
    with open(dst / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob + b"".join(chunks))
    m = tessera.Model.load(dst, max_context=256, max_chunk=128)
    with pytest.raises(ValueError, match="vision"):
        m.encode_images([PHOTO])
    # the text path still runs
    assert len(m.generate([[2, 10, 11]], 2, stop_tokens=[])[0]) == 2


def test_threads_encode_at_once(demo):
    """The encoder is made once under the model's lock (here by whichever of four threads comes
    first), then runs outside it: threads encoding at the same time get what a single caller gets."""
    import threading
    want = demo.encode_images([PHOTO])[0]
    fresh = tessera.Model.load(DEMO, max_context=256, max_chunk=128)
    got, errors = [None] * 4, []

    def work(i):
        try:
            got[i] = fresh.encode_images([PHOTO])[0]
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for g in got:
        np.testing.assert_array_equal(g, want)
