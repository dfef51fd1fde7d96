#!/usr/bin/python3
"""Reference data for vitpipe's image layer, made with Pillow and numpy (run by tests/image/test_pillow_reference.cpp).

    make_references.py decode|resize|preprocess OUTDIR

writes input files, the reference outputs as raw bytes, and OUTDIR/<what>.txt: one case per line, fields separated
by tabs. What each manifest holds is documented in the writer functions below.

decode:     PNGs of every colour type / bit depth / interlacing (Pillow where it can write them, a small PNG writer
            on zlib for the rest), JPEGs (Pillow's encoder and tests/image/fixtures), real X-rays from
            tests/fixtures/images, and malformed files. Reference: Image.open(p).convert("RGB").
resize:     random and smooth images, gray and RGB; reference: Image.resize((w, h), filter).
preprocess: transformers' ViTImageProcessor, spelled out with PIL + numpy exactly as transformers does it
            (transformers itself is not installed here).
"""
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURE_IMAGES = os.path.join(SOURCE_DIR, "tests", "fixtures", "images")
LAYER_FIXTURES = os.path.join(SOURCE_DIR, "tests", "image", "fixtures")

# ------------------------------------------------------------------------------------------------------------------
# A minimal PNG writer, for what Pillow cannot write: low bit depths, 16-bit colour, Adam7, tRNS, odd chunk layouts.

ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def chunk(kind, data, crc=None):
    if crc is None:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def pack_rows(a, depth):
    rows = []
    for y in range(a.shape[0]):
        r = a[y].reshape(-1).astype(np.int64)
        if depth == 16:
            rows.append(r.astype(">u2").tobytes())
        elif depth == 8:
            rows.append(r.astype(np.uint8).tobytes())
        else:
            per = 8 // depth
            r = np.concatenate([r, np.zeros((-len(r)) % per, dtype=np.int64)]).reshape(-1, per)
            b = np.zeros(r.shape[0], dtype=np.int64)
            for i in range(per):
                b |= r[:, i] << (8 - depth * (i + 1))
            rows.append(b.astype(np.uint8).tobytes())
    return rows


def png_bytes(a, depth, color, interlace=0, plte=None, trns=None, before_idat=b"", after_idat=b"", idat_parts=1,
              iend=True, filter_type=0):
    a = np.asarray(a)
    if a.ndim == 2:
        a = a[:, :, None]
    h, w, c = a.shape
    assert c == CHANNELS[color]
    raw = b""
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for (x0, y0, dx, dy) in passes:
        sub = a[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        for r in pack_rows(sub, depth):
            raw += bytes([filter_type]) + apply_filter(r, filter_type, depth, c)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace))
    out += before_idat
    if plte is not None:
        out += chunk(b"PLTE", bytes(np.asarray(plte, dtype=np.uint8).reshape(-1)))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    z = zlib.compress(raw, 9)
    step = max(1, -(-len(z) // idat_parts))
    for i in range(0, len(z), step):
        out += chunk(b"IDAT", z[i:i + step])
    out += after_idat
    if iend:
        out += chunk(b"IEND", b"")
    return out


def apply_filter(row, filter_type, depth, channels):
    """Only filters 0 (none) and 1 (sub) are written: enough to check the decoder unfilters at all."""
    if filter_type == 0:
        return row
    bpp = max(1, depth * channels // 8)
    src = np.frombuffer(row, dtype=np.uint8).astype(np.int64)
    out = src.copy()
    out[bpp:] = (src[bpp:] - src[:-bpp]) % 256
    return out.astype(np.uint8).tobytes()


# ------------------------------------------------------------------------------------------------------------------


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def reference_rgb(path):
    with Image.open(path) as im:
        rgb = im.convert("RGB")
        return rgb.size, np.asarray(rgb, dtype=np.uint8)


def make_decode(out):
    rng = np.random.default_rng(20240611)
    cases = []  # (file name)
    errors = []  # (file name, expected substring of the error)

    def add_png(name, data):
        write(os.path.join(out, name), data)
        cases.append(name)

    sizes = [(13, 7), (1, 1), (33, 17), (8, 8)]
    for depth in (1, 2, 4, 8, 16):
        for interlace in (0, 1):
            for (w, h) in sizes[: 2 if depth < 8 else 3] + ([(64, 40)] if depth >= 8 else []):
                a = rng.integers(0, 2 ** depth, (h, w))
                if depth == 16:  # mostly small values, so that clipping at 255 and the low byte both matter
                    a = np.where(rng.random((h, w)) < 0.5, rng.integers(0, 300, (h, w)), a)
                add_png(f"gray{depth}_i{interlace}_{w}x{h}.png", png_bytes(a, depth, 0, interlace))
    for depth in (8, 16):
        for interlace in (0, 1):
            for color, name in ((4, "gray_alpha"), (2, "rgb"), (6, "rgba")):
                w, h = 19, 11
                a = rng.integers(0, 2 ** depth, (h, w, CHANNELS[color]))
                add_png(f"{name}{depth}_i{interlace}.png", png_bytes(a, depth, color, interlace))
    palette = rng.integers(0, 256, (256, 3))
    for depth in (1, 2, 4, 8):
        for interlace in (0, 1):
            n = 2 ** depth
            a = rng.integers(0, n, (9, 23))
            add_png(f"palette{depth}_i{interlace}.png", png_bytes(a, depth, 3, interlace, plte=palette[:n]))
            trns = bytes(rng.integers(0, 256, min(n, 5)).astype(np.uint8))
            add_png(f"palette{depth}_trns_i{interlace}.png",
                    png_bytes(a, depth, 3, interlace, plte=palette[:n], trns=trns))
    # Indices past the end of a short PLTE: Pillow shows its grey ramp there.
    a = rng.integers(0, 256, (6, 40))
    add_png("palette8_short_plte.png", png_bytes(a, 8, 3, 0, plte=palette[:7]))
    add_png("gray8_trns.png", png_bytes(rng.integers(0, 256, (5, 9)), 8, 0, trns=struct.pack(">H", 7)))
    add_png("gray16_trns.png", png_bytes(rng.integers(0, 400, (5, 9)), 16, 0, trns=struct.pack(">H", 7)))
    add_png("gray2_trns.png", png_bytes(rng.integers(0, 4, (5, 9)), 2, 0, trns=struct.pack(">H", 1)))
    add_png("rgb8_trns.png", png_bytes(rng.integers(0, 256, (5, 9, 3)), 8, 2, trns=struct.pack(">HHH", 1, 2, 3)))
    add_png("rgb16_trns.png", png_bytes(rng.integers(0, 65536, (5, 9, 3)), 16, 2, trns=struct.pack(">HHH", 1, 2, 3)))
    # Chunk layouts: split IDAT, ancillary chunks (gAMA must NOT change pixels: Pillow ignores it), no IEND, sub filter.
    a = rng.integers(0, 256, (30, 20, 3))
    anc = chunk(b"gAMA", struct.pack(">I", 100000)) + chunk(b"tEXt", b"Title\x00chest x-ray") + \
        chunk(b"pHYs", struct.pack(">IIB", 2835, 2835, 1))
    add_png("rgb8_split_idat.png", png_bytes(a, 8, 2, idat_parts=7))
    add_png("rgb8_ancillary.png", png_bytes(a, 8, 2, before_idat=anc, after_idat=chunk(b"tEXt", b"Late\x00x")))
    add_png("rgb8_no_iend.png", png_bytes(a, 8, 2, iend=False))
    add_png("rgb8_sub_filter.png", png_bytes(a, 8, 2, filter_type=1))
    # A bad CRC on the last IDAT: neither Pillow nor libspng checks it once the pixels are complete.
    data = png_bytes(a, 8, 2)
    add_png("rgb8_bad_crc_last_idat.png", data[:-13] + bytes([data[-13] ^ 0x55]) + data[-12:])
    add_png("gray16_sub_filter.png", png_bytes(rng.integers(0, 65536, (6, 10)), 16, 0, filter_type=1))

    # Pillow's own encoder.
    gray = rng.integers(0, 256, (37, 53)).astype(np.uint8)
    rgb = rng.integers(0, 256, (37, 53, 3)).astype(np.uint8)
    rgba = rng.integers(0, 256, (37, 53, 4)).astype(np.uint8)
    pillow_images = {
        "L": Image.fromarray(gray, "L"), "RGB": Image.fromarray(rgb, "RGB"), "RGBA": Image.fromarray(rgba, "RGBA"),
        "LA": Image.fromarray(rgba[:, :, :2].copy(), "LA"), "P": Image.fromarray(rgb, "RGB").convert("P"),
        "I16": Image.fromarray((rng.integers(0, 1000, (37, 53))).astype(np.uint16)),
        "1": Image.fromarray(gray, "L").convert("1"),
    }
    for mode, im in pillow_images.items():
        name = f"pillow_{mode}.png"
        im.save(os.path.join(out, name), optimize=True)
        cases.append(name)

    # JPEG: Pillow's encoder (libjpeg-turbo), several samplings and options, odd sizes for the upsampling edges.
    smooth = np.fromfunction(lambda y, x, c: (x * 3 + y * 5 + c * 40) % 256, (45, 67, 3)).astype(np.uint8)
    noisy = np.clip(smooth.astype(int) + rng.integers(-30, 30, smooth.shape), 0, 255).astype(np.uint8)
    jpeg_rgb = Image.fromarray(noisy, "RGB")
    for subsampling in (0, 1, 2):
        for quality in (50, 95):
            name = f"jpeg_rgb_s{subsampling}_q{quality}.jpg"
            jpeg_rgb.save(os.path.join(out, name), quality=quality, subsampling=subsampling)
            cases.append(name)
    jpeg_rgb.save(os.path.join(out, "jpeg_progressive.jpg"), quality=80, progressive=True)
    jpeg_rgb.save(os.path.join(out, "jpeg_optimized.jpg"), quality=80, optimize=True)
    Image.fromarray(noisy[:, :, 0], "L").save(os.path.join(out, "jpeg_gray.jpg"), quality=85)
    Image.fromarray(noisy[:17, :9], "RGB").save(os.path.join(out, "jpeg_tiny.jpg"), quality=90)
    Image.fromarray(np.concatenate([noisy, noisy[:, :, :1]], axis=2), "CMYK").save(
        os.path.join(out, "jpeg_cmyk_pillow.jpg"), quality=90)
    cases += ["jpeg_progressive.jpg", "jpeg_optimized.jpg", "jpeg_gray.jpg", "jpeg_tiny.jpg", "jpeg_cmyk_pillow.jpg"]

    # Committed fixtures: JPEG kinds Pillow cannot write, and real chest X-rays.
    for directory, prefix in ((LAYER_FIXTURES, "fixture_"), (FIXTURE_IMAGES, "xray_")):
        for name in sorted(os.listdir(directory)):
            if name.endswith((".png", ".jpg")):
                with open(os.path.join(directory, name), "rb") as f:
                    write(os.path.join(out, prefix + name), f.read())
                cases.append(prefix + name)

    # Malformed files: vitpipe must refuse each with a clear message (the test also checks the file is named).
    good = png_bytes(rng.integers(0, 256, (40, 50, 3)), 8, 2)
    ihdr_end = 8 + 8 + 13 + 4
    bad = {
        "empty.png": (b"", "empty file"),
        "garbage.png": (bytes(rng.integers(0, 256, 100).astype(np.uint8)), "not a PNG or JPEG"),
        "signature_only.png": (good[:8], "corrupt or unsupported PNG"),
        "truncated_header.png": (good[:20], "corrupt or unsupported PNG"),
        "truncated_idat.png": (good[: len(good) - 40], "corrupt or unsupported PNG"),
        "bad_crc_ihdr.png": (good[:29] + bytes([good[29] ^ 0xFF]) + good[30:], "corrupt or unsupported PNG"),
        "bad_crc_text.png": (good[:ihdr_end] + chunk(b"tEXt", b"Title\x00x", crc=1234) + good[ihdr_end:],
                             "corrupt or unsupported PNG"),
        "bad_zlib.png": (good[:ihdr_end] + chunk(b"IDAT", b"\x78\x9c" + b"\xff" * 50) + chunk(b"IEND", b""),
                         "corrupt or unsupported PNG"),
        "zero_width.png": (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 10, 8, 0, 0, 0, 0)) +
                           good[ihdr_end:], "corrupt or unsupported PNG"),
        "bad_depth.png": (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 3, 0, 0, 0, 0)) +
                          good[ihdr_end:], "corrupt or unsupported PNG"),
        "palette_without_plte.png": (png_bytes(rng.integers(0, 4, (4, 4)), 8, 3), "corrupt or unsupported PNG"),
        # 100000 x 100000 declared in the header over a few bytes of data: refused before allocating.
        "bomb.png": (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 0, 0, 0, 0)) +
                     chunk(b"IDAT", zlib.compress(b"\x00" * 1000)) + chunk(b"IEND", b""), "decompression bomb"),
        "huge_text_chunk.png": (good[:ihdr_end] + struct.pack(">I", 0x7FFFFFF0) + b"tEXt" + b"x" * 64,
                                "corrupt or unsupported PNG"),
    }
    with open(os.path.join(out, "jpeg_rgb_s2_q95.jpg"), "rb") as f:
        jpeg = f.read()
    sof = jpeg.find(b"\xff\xc0")
    assert sof > 0
    bad.update({
        "truncated.jpg": (jpeg[: len(jpeg) // 2], "truncated"),
        # Every scanline present, only the EOI marker cut off: Pillow refuses it as truncated too.
        "no_eoi.jpg": (jpeg[:-2], "truncated"),
        "header_only.jpg": (jpeg[:sof + 19], "corrupt or unsupported JPEG"),
        "soi_only.jpg": (b"\xff\xd8\xff", "corrupt or unsupported JPEG"),
        "jpeg_garbage.jpg": (b"\xff\xd8\xff" + bytes(rng.integers(0, 256, 300).astype(np.uint8)),
                             "corrupt or unsupported JPEG"),
        # SOF claims 65000 x 65000.
        "bomb.jpg": (jpeg[:sof + 5] + struct.pack(">HH", 65000, 65000) + jpeg[sof + 9:], "decompression bomb"),
    })
    for name, (data, expected) in bad.items():
        write(os.path.join(out, name), data)
        errors.append((name, expected))

    with open(os.path.join(out, "decode.txt"), "w") as manifest:
        for name in cases:
            (w, h), rgb = reference_rgb(os.path.join(out, name))
            ref = name + ".rgb"
            write(os.path.join(out, ref), rgb.tobytes())
            manifest.write(f"ok\t{name}\t{w}\t{h}\t{ref}\n")
        for name, expected in errors:
            manifest.write(f"error\t{name}\t{expected}\n")


FILTERS = {0: Image.Resampling.NEAREST, 1: Image.Resampling.LANCZOS, 2: Image.Resampling.BILINEAR,
           3: Image.Resampling.BICUBIC, 4: Image.Resampling.BOX, 5: Image.Resampling.HAMMING}


def make_resize(out):
    """resize.txt: in_raw in_w in_h channels out_w out_h filter out_raw (tab separated)."""
    rng = np.random.default_rng(7)
    lines = []
    inputs = {}

    def image(w, h, channels, kind):
        key = (w, h, channels, kind)
        if key not in inputs:
            shape = (h, w) if channels == 1 else (h, w, channels)
            if kind == "random":
                a = rng.integers(0, 256, shape)
            else:  # smooth with sharp edges, where negative lobes overshoot and clipping matters
                y, x = np.mgrid[0:h, 0:w]
                base = (np.sin(x / max(w, 1) * 7) * 100 + np.cos(y / max(h, 1) * 5) * 100 + 128)
                base = np.where((x // 5 + y // 7) % 2 == 0, 0, base)
                base = np.where((x // 11) % 3 == 0, 255, base)
                a = base if channels == 1 else np.stack([base, 255 - base, base / 2], axis=2)
            a = np.clip(a, 0, 255).astype(np.uint8)
            name = f"in_{w}x{h}_{channels}_{kind}.raw"
            write(os.path.join(out, name), a.tobytes())
            inputs[key] = (name, a)
        return inputs[key]

    def case(w, h, channels, ow, oh, fid, kind):
        name, a = image(w, h, channels, kind)
        im = Image.fromarray(a, "L" if channels == 1 else "RGB")
        r = np.asarray(im.resize((ow, oh), resample=FILTERS[fid]), dtype=np.uint8)
        if channels == 1:
            # Pillow resamples R, G and B independently: resizing the RGB expansion of a gray image must equal the
            # gray resize replicated (vitpipe relies on this for gray X-rays).
            rgb = np.asarray(Image.fromarray(np.stack([a] * 3, axis=2), "RGB").resize((ow, oh), FILTERS[fid]))
            assert all((rgb[:, :, c] == r).all() for c in range(3)), "Pillow gray != RGB resize"
        ref = f"out_{w}x{h}_{channels}_{kind}_{ow}x{oh}_f{fid}.raw"
        write(os.path.join(out, ref), r.tobytes())
        lines.append(f"{name}\t{w}\t{h}\t{channels}\t{ow}\t{oh}\t{fid}\t{ref}")

    shapes = [((37, 23), (224, 224)), ((64, 64), (224, 224)), ((224, 224), (223, 223)), ((1, 1), (5, 5)),
              ((300, 200), (224, 100)), ((224, 224), (224, 100)), ((224, 224), (100, 224)), ((5, 3), (2, 7)),
              ((1000, 10), (3, 3)), ((50, 40), (50, 40)), ((7, 1), (13, 2)), ((97, 61), (31, 47)),
              ((512, 512), (224, 224)), ((256, 256), (384, 384))]
    for (w, h), (ow, oh) in shapes:
        for fid in FILTERS:
            for channels in (1, 3):
                case(w, h, channels, ow, oh, fid, "random")
                case(w, h, channels, ow, oh, fid, "smooth")
    for fid in FILTERS:  # the real workload: 1024 -> 224
        case(1024, 1024, 1, 224, 224, fid, "smooth")
    case(1024, 1024, 3, 224, 224, 2, "random")
    with open(os.path.join(out, "resize.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def vit_reference(rgb_image, cfg):
    """transformers' ViTImageProcessor.preprocess for one PIL RGB image, channels-first float32."""
    image = np.array(rgb_image)  # to_numpy_array
    if cfg["do_resize"]:
        # image_transforms.resize: uint8 array -> to_pil_image (no rescale) -> PIL resize -> np.array
        pil = Image.fromarray(image)
        image = np.array(pil.resize((cfg["width"], cfg["height"]), resample=FILTERS[cfg["resample"]]))
    if cfg["do_rescale"]:
        # image_transforms.rescale: upcast to float64 first, multiply, downcast to float32
        image = (image.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32)
    if cfg["do_normalize"]:
        # image_transforms.normalize
        if not np.issubdtype(image.dtype, np.floating):
            image = image.astype(np.float32)
        mean = np.array(cfg["mean"], dtype=image.dtype)
        std = np.array(cfg["std"], dtype=image.dtype)
        image = (image - mean) / std
    return np.ascontiguousarray(image.transpose(2, 0, 1)).astype(np.float32)


def make_preprocess(out):
    """preprocess.txt: image do_resize height width resample do_rescale rescale_factor do_normalize m0 m1 m2 s0 s1 s2
    expected_f32 (tab separated; doubles written with repr so that they round-trip)."""
    rng = np.random.default_rng(3)
    images = []
    for name in ("00000013_003.png", "00000001_000.png", "00000004_000.png"):
        images.append(os.path.join(FIXTURE_IMAGES, name))
    a = rng.integers(0, 256, (23, 37, 3)).astype(np.uint8)
    Image.fromarray(a, "RGB").save(os.path.join(out, "random_rgb.png"))
    images.append(os.path.join(out, "random_rgb.png"))
    # Every uint8 value in every channel, so that the whole lookup table is compared with numpy.
    ramp = np.stack([np.arange(256).reshape(16, 16), np.arange(256)[::-1].reshape(16, 16),
                     (np.arange(256) * 7 % 256).reshape(16, 16)], axis=2).astype(np.uint8)
    Image.fromarray(ramp, "RGB").save(os.path.join(out, "all_values.png"))
    images.append(os.path.join(out, "all_values.png"))
    Image.fromarray(ramp[:, :, 0], "L").save(os.path.join(out, "all_values_gray.png"))
    images.append(os.path.join(out, "all_values_gray.png"))

    vit = dict(do_resize=True, height=224, width=224, resample=2, do_rescale=True, rescale_factor=1 / 255,
               do_normalize=True, mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])
    configs = [
        vit,
        dict(vit, mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        dict(vit, height=96, width=128, resample=3),
        dict(vit, height=384, width=384, resample=1),
        dict(vit, do_resize=False),
        dict(vit, do_rescale=False),
        dict(vit, do_normalize=False),
        dict(vit, rescale_factor=0.00392156862745098, mean=[0.1, 0.2, 0.3], std=[0.3, 0.2, 0.1]),
        dict(vit, do_resize=False, do_rescale=False, do_normalize=False),
    ]
    lines = []
    for i, path in enumerate(images):
        with Image.open(path) as im:
            rgb = im.convert("RGB")
        for j, cfg in enumerate(configs):
            if path.endswith("00000013_003.png") and (cfg["height"] == 384 or not cfg["do_resize"]):
                continue  # keep the temp data small
            expected = vit_reference(rgb, cfg)
            ref = f"expected_{i}_{j}.f32"
            write(os.path.join(out, ref), expected.astype("<f4").tobytes())
            fields = [path, int(cfg["do_resize"]), cfg["height"], cfg["width"], cfg["resample"],
                      int(cfg["do_rescale"]), repr(float(cfg["rescale_factor"])), int(cfg["do_normalize"])]
            fields += [repr(float(v)) for v in cfg["mean"]] + [repr(float(v)) for v in cfg["std"]] + [ref]
            lines.append("\t".join(str(f) for f in fields))
    with open(os.path.join(out, "preprocess.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("decode", "resize", "preprocess"):
        sys.exit(__doc__)
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    {"decode": make_decode, "resize": make_resize, "preprocess": make_preprocess}[sys.argv[1]](out)


if __name__ == "__main__":
    main()
