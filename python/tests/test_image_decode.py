"""Decoding: tessera's JPEG/PNG decoder against PIL (bit-exact) on real photos and on every PNG
colour type / JPEG colour space PIL writes, EXIF orientation, and refusal of bad input."""

import io
import os
import struct
import zlib

import numpy as np
import pytest

import tessera
from image_fixtures import photo_paths, pil_rgb

_t = tessera._tessera
Image = pytest.importorskip("PIL.Image")


@pytest.mark.parametrize("path", photo_paths(), ids=os.path.basename)
def test_photo_decodes_like_pil(path):
    with Image.open(path) as im:
        mode = im.mode
    if mode == "I;16":
        with pytest.raises(ValueError, match="16-bit grayscale"):
            _t.load_image(path)
        return
    ours = _t.load_image(path)
    assert ours.dtype == np.uint8 and ours.shape[2] == 3
    np.testing.assert_array_equal(ours, pil_rgb(path), err_msg=f"{path} ({mode})")


def test_bundled_photos_present():
    pytest.importorskip("skimage")
    names = {os.path.basename(p) for p in photo_paths()}
    assert {"astronaut.png", "camera.png", "logo.png", "rocket.jpg", "retina.jpg"} <= names


def _rng_image(h, w, seed=0):
    rng = np.random.default_rng(seed)
    # Smooth content (JPEG-like) plus noise, so subsampling and IDCT rounding both matter.
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256], -1)
    return np.clip(base + rng.integers(-40, 40, (h, w, 3)), 0, 255).astype(np.uint8)


def _save(tmp_path, im, name, **kw):
    p = tmp_path / name
    im.save(p, **kw)
    return str(p)


JPEG_CASES = [
    ("RGB", dict(quality=90)),
    ("RGB", dict(quality=50, subsampling=0)),  # 4:4:4
    ("RGB", dict(quality=75, subsampling=1)),  # 4:2:2
    ("RGB", dict(quality=95, subsampling=2, progressive=True)),
    ("L", dict(quality=85)),
    ("CMYK", dict(quality=90)),
]


@pytest.mark.parametrize("mode,kw", JPEG_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("size", [(37, 53), (64, 64), (1, 9)])
def test_jpeg_variants_like_pil(tmp_path, mode, kw, size):
    im = Image.fromarray(_rng_image(*size)).convert(mode)
    path = _save(tmp_path, im, "x.jpg", **kw)
    np.testing.assert_array_equal(_t.load_image(path), pil_rgb(path))


def _png_cases():
    rgb = _rng_image(23, 31, 1)
    rgba = np.concatenate([rgb, rgb[..., :1]], -1)
    yield "RGB", Image.fromarray(rgb), {}
    yield "RGBA", Image.fromarray(rgba, "RGBA"), {}
    yield "L", Image.fromarray(rgb[..., 0]), {}
    yield "LA", Image.fromarray(rgba[..., [0, 3]], "LA"), {}
    yield "1", Image.fromarray(rgb[..., 0] > 128), {}
    yield "P", Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=200), {}
    yield "P-tRNS", Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=16), {"transparency": 3}
    yield "P-4bit", Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=16), {"bits": 4}
    yield "L-tRNS", Image.fromarray(rgb[..., 0]), {"transparency": 7}
    yield "RGB-tRNS", Image.fromarray(rgb), {"transparency": (1, 2, 3)}


@pytest.mark.parametrize("case", list(_png_cases()), ids=lambda c: c[0])
def test_png_colour_types_like_pil(tmp_path, case):
    _, im, kw = case
    path = _save(tmp_path, im, "x.png", **kw)
    np.testing.assert_array_equal(_t.load_image(path), pil_rgb(path))


def _png_bytes(width, height, bit_depth, colour_type, raw_rows, interlace=0):
    """A PNG written by hand (PIL writes neither 16-bit RGB nor interlaced files)."""

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, interlace)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw_rows)) + chunk(b"IEND", b"")


def _adam7_rows(pixels, bpp):
    """The filter-0 scanlines of Adam7's seven passes over an [H, W, C] array."""
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    out = b""
    for x0, y0, dx, dy in passes:
        sub = pixels[y0::dy, x0::dx]
        if sub.size:
            for row in sub:
                out += b"\x00" + row.tobytes()
    return out


def test_png_16bit_rgb_and_interlaced_like_pil(tmp_path):
    rng = np.random.default_rng(3)
    rgb16 = rng.integers(0, 65536, (13, 17, 3), dtype=np.uint16).astype(">u2")
    raw = b"".join(b"\x00" + r.tobytes() for r in rgb16)
    p16 = tmp_path / "rgb16.png"
    p16.write_bytes(_png_bytes(17, 13, 16, 2, raw))
    np.testing.assert_array_equal(_t.load_image(str(p16)), pil_rgb(str(p16)))
    rgb = _rng_image(19, 21, 4)
    pint = tmp_path / "interlaced.png"
    pint.write_bytes(_png_bytes(21, 19, 8, 2, _adam7_rows(rgb, 3), interlace=1))
    np.testing.assert_array_equal(_t.load_image(str(pint)), pil_rgb(str(pint)))
    np.testing.assert_array_equal(_t.load_image(str(pint)), rgb)


def test_png_16bit_gray_refused(tmp_path):
    p = tmp_path / "g16.png"
    Image.fromarray(np.arange(12, dtype=np.uint16).reshape(3, 4) * 5000).save(p)
    with pytest.raises(ValueError, match="16-bit grayscale PNG is not supported"):
        _t.load_image(str(p))


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("fmt", ["jpg", "png"])
def test_exif_orientation_like_exif_transpose(tmp_path, orientation, fmt):
    im = Image.fromarray(_rng_image(20, 33, orientation))
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = _save(tmp_path, im, "o." + fmt, exif=exif.tobytes())
    ours = _t.load_image(path)
    expected = pil_rgb(path)
    assert ours.shape == expected.shape
    np.testing.assert_array_equal(ours, expected)


def _jpeg_bytes():
    b = io.BytesIO()
    Image.fromarray(_rng_image(64, 48)).save(b, "JPEG", quality=90)
    return b.getvalue()


def _png_file_bytes():
    b = io.BytesIO()
    Image.fromarray(_rng_image(64, 48)).save(b, "PNG")
    return b.getvalue()


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "is empty"),
        (b"GIF89a not supported", "not a JPEG or PNG file"),
        (b"\x00" * 100, "not a JPEG or PNG file"),
        (_jpeg_bytes()[:400], "corrupt or truncated JPEG"),
        (_jpeg_bytes()[: len(_jpeg_bytes()) // 2], "corrupt or truncated JPEG"),
        (_png_file_bytes()[:60], "corrupt or truncated PNG"),
        (_png_file_bytes()[: len(_png_file_bytes()) // 2], "corrupt or truncated PNG"),
        (b"\xff\xd8\xff\xe0" + b"\x00" * 50, "corrupt or truncated JPEG"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "corrupt or truncated PNG"),
    ],
    ids=["empty", "gif", "zeros", "jpeg-header-only", "jpeg-half", "png-header-only", "png-half", "jpeg-garbage",
         "png-garbage"],
)
def test_bad_files_refused_naming_the_file(tmp_path, content, message):
    p = tmp_path / "bad.img"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=message) as e:
        _t.load_image(str(p))
    assert str(p) in str(e.value)


def test_pil_also_refuses_the_truncated_files(tmp_path):
    # The truncations above are errors for PIL too (not padded with gray), so refusing matches it.
    for content in (_jpeg_bytes()[: len(_jpeg_bytes()) // 2], _png_file_bytes()[: len(_png_file_bytes()) // 2]):
        with pytest.raises(OSError):
            Image.open(io.BytesIO(content)).convert("RGB")


def test_not_a_regular_file(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        _t.load_image(str(tmp_path))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO"):
        _t.load_image(str(fifo))
    with pytest.raises(ValueError, match="does not exist"):
        _t.load_image(str(tmp_path / "missing.png"))


def test_decompression_bomb_refused_from_header(tmp_path):
    # 20000 x 20000 declared, a few bytes of data: refused before any pixel memory is taken.
    p = tmp_path / "bomb.png"
    p.write_bytes(_png_bytes(20000, 20000, 8, 2, b"\x00" * 10))
    with pytest.raises(ValueError, match="decompression bomb"):
        _t.load_image(str(p))


def test_zero_size_png_refused(tmp_path):
    p = tmp_path / "zero.png"
    p.write_bytes(_png_bytes(0, 5, 8, 2, b""))
    with pytest.raises(ValueError, match="zero.png"):
        _t.load_image(str(p))
