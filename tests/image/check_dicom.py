"""DICOM pixels of `vitpipe image convert` against the reference rule (dicom_reference.py, numpy + pydicom) on files
this script writes: MONOCHROME1/2, 8/12/16 bits stored, signed and unsigned, a high bit above bits stored, rescale,
a Modality LUT, windows with each VOI LUT function, VOI LUTs, min..max, every --intensity policy, --dicom-window
first/N/minmax, RGB with both planar configurations, multi-frame, and every compressed transfer syntax vitpipe
decodes (DCMTK's dcmcjpeg / dcmcjpls / dcmcrle / dcmconv compress; JPEG 2000 is encoded by Pillow's OpenJPEG and
encapsulated by pydicom). Lossless files are compared with the reference on the original words; lossy ones with the
reference on the words an independent decoder gives (Pillow for JPEG baseline and JPEG 2000; DCMTK's own dcmdjpeg /
dcmdjpls for 12-bit extended JPEG and near-lossless JPEG-LS, which Pillow cannot read). DCMTK's dcmj2pnm renders the
same windows by truncating where vitpipe rounds: its output must equal floor(y) of the reference (floor(255 - y) for
MONOCHROME1, which DCMTK inverts before truncating)."""

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pydicom
from PIL import Image
from pydicom.dataset import Dataset
from pydicom.encaps import encapsulate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dicom_reference as ref  # noqa: E402
from dicom_files import write_dicom  # noqa: E402

VITPIPE = os.environ["VITPIPE"]
failures = []
checked = 0


def check(ok, what, detail=""):
    global checked
    checked += 1
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def run(*args):
    return subprocess.run([VITPIPE, *map(str, args)], capture_output=True, text=True)


def convert(path, *flags):
    out = path + ".out.png"
    if os.path.exists(out):
        os.remove(out)
    result = run("image", "convert", path, out, *flags)
    if result.returncode != 0:
        return result, None
    return result, np.array(Image.open(out))


def compare(what, path, expected, *flags):
    result, got = convert(path, *flags)
    if got is None:
        check(False, what, f"vitpipe failed: {result.stderr.strip()}")
        return
    if got.shape != expected.shape:
        check(False, what, f"shape {got.shape}, expected {expected.shape}")
        return
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    check(diff.max() == 0, what, f"{int((diff > 0).sum())} of {diff.size} values differ, max {int(diff.max())}"
          if diff.max() else f"{diff.size} values")


def refused(what, path, flags, *parts):
    out = path + ".refused.png"
    if os.path.exists(out):
        os.remove(out)
    result = run("image", "convert", path, out, *flags)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    ok = result.returncode == 1 and len(lines) == 1 and all(p in lines[0] for p in parts) and not os.path.exists(out)
    check(ok, what, f"exit {result.returncode}: {result.stderr.strip()}")


def words_of(path):
    """First-frame words of an uncompressed little-endian file (as pydicom stores them, not decoded by vitpipe)."""
    ds = pydicom.dcmread(path)
    dtype = "<u2" if int(ds.BitsAllocated) == 16 else "u1"
    n = int(ds.Rows) * int(ds.Columns) * int(ds.SamplesPerPixel)
    return ds, np.frombuffer(ds.PixelData, dtype=dtype)[:n].reshape(int(ds.Rows), int(ds.Columns))


def tool(*command):
    result = subprocess.run(list(command), capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(command)}: {result.stderr}")


work = tempfile.mkdtemp(prefix="vitpipe_dicom_")
P = lambda name: os.path.join(work, name)  # noqa: E731
rng = np.random.default_rng(7)
rows, cols = 96, 80
yy, xx = np.mgrid[0:rows, 0:cols]
base12 = ((yy * 41 + xx * 13) % 4096 + rng.integers(-40, 40, (rows, cols))).clip(0, 4095).astype(np.uint16)
ct = (yy * 37 - 1600 + rng.integers(-60, 60, (rows, cols))).clip(-2048, 3071).astype(np.int64)  # signed, CT-like
base8 = ((yy * 3 + xx * 2) % 256).astype(np.uint8)

# --- gray, uncompressed: every part of the rule ---
cases = []  # (name, path, flags)
write_dicom(P("m2_12_window.dcm"), base12, 16, 12, WindowCenter=2000, WindowWidth=1500)
cases += [("MONOCHROME2 12-bit, its window", P("m2_12_window.dcm"), []),
          ("MONOCHROME2 12-bit, --dicom-window minmax", P("m2_12_window.dcm"), ["--dicom-window", "minmax"]),
          ("MONOCHROME2 12-bit, --intensity full-range", P("m2_12_window.dcm"), ["--intensity", "full-range"]),
          ("MONOCHROME2 12-bit, --intensity window:1000,300", P("m2_12_window.dcm"), ["--intensity", "window:1000,300"]),
          ("MONOCHROME2 12-bit, --intensity percentile:2,98", P("m2_12_window.dcm"), ["--intensity", "percentile:2,98"])]
write_dicom(P("m1_12_window.dcm"), base12, 16, 12, photometric="MONOCHROME1", WindowCenter=1800.5, WindowWidth=1201)
cases += [("MONOCHROME1 12-bit (inverted), its window", P("m1_12_window.dcm"), []),
          ("MONOCHROME1 12-bit, --intensity percentile:0.5,99.5", P("m1_12_window.dcm"),
           ["--intensity", "percentile:0.5,99.5"])]
write_dicom(P("two_windows.dcm"), base12, 16, 12, WindowCenter=[2000, 1500], WindowWidth=[1000, 3000])
cases += [("two windows, --dicom-window first", P("two_windows.dcm"), ["--dicom-window", "first"]),
          ("two windows, --dicom-window 2", P("two_windows.dcm"), ["--dicom-window", "2"])]
write_dicom(P("m2_8.dcm"), base8, 8, 8)
cases += [("8 bits stored, no window: min..max", P("m2_8.dcm"), []),
          ("8 bits stored, --intensity full-range", P("m2_8.dcm"), ["--intensity", "full-range"])]
write_dicom(P("m2_16.dcm"), rng.integers(100, 60000, (rows, cols)).astype(np.uint16), 16, 16)
cases += [("16 bits stored, no window: min..max", P("m2_16.dcm"), []),
          ("16 bits stored, --intensity percentile:1,99", P("m2_16.dcm"), ["--intensity", "percentile:1,99"])]
write_dicom(P("ct.dcm"), ct.astype(np.int16).view(np.uint16), 16, 16, signed=True, RescaleSlope=1,
            RescaleIntercept=-1024, WindowCenter=-600, WindowWidth=1500)
cases += [("signed 16-bit, rescale, its window", P("ct.dcm"), []),
          ("signed 16-bit, --intensity full-range", P("ct.dcm"), ["--intensity", "full-range"]),
          ("signed 16-bit, --intensity window:40,400", P("ct.dcm"), ["--intensity", "window:40,400"]),
          ("signed 16-bit, --dicom-window minmax", P("ct.dcm"), ["--dicom-window", "minmax"])]
# Signed 12 bits in 16, garbage in the 4 unused bits (as overlays once used them), fractional rescale.
signed12 = ((ct // 2).clip(-2048, 2047) & 0xFFF) | (rng.integers(0, 16, (rows, cols)) << 12)
write_dicom(P("signed12.dcm"), signed12.astype(np.uint16), 16, 12, signed=True, RescaleSlope=0.5,
            RescaleIntercept=10.25, WindowCenter=0, WindowWidth=500)
cases += [("signed 12 in 16 bits, unused bits set, rescale 0.5", P("signed12.dcm"), []),
          ("signed 12 in 16 bits, --intensity full-range", P("signed12.dcm"), ["--intensity", "full-range"])]
shifted = (base12.astype(np.uint32) << 4 | rng.integers(0, 16, (rows, cols))).astype(np.uint16)
write_dicom(P("highbit15.dcm"), shifted, 16, 12, high_bit=15, WindowCenter=2048, WindowWidth=4096)
cases += [("12 bits stored at high bit 15", P("highbit15.dcm"), [])]
for function, centre, width in (("LINEAR_EXACT", 1500, 800), ("SIGMOID", 2500, 2000)):
    write_dicom(P(f"{function}.dcm"), base12, 16, 12, WindowCenter=centre, WindowWidth=width, VOILUTFunction=function)
    cases.append((f"VOI LUT Function {function}", P(f"{function}.dcm"), []))


def lut_item(first, data, bits, vr="US"):
    item = Dataset()
    item.add_new(0x00283002, vr, [len(data) % 65536, first, bits])  # LUT Descriptor
    item.add_new(0x00283006, "OW", np.asarray(data, dtype="<u2").tobytes())  # LUT Data
    return item


curve = (np.sqrt(np.arange(4096) / 4095.0) * 4095).astype(np.uint16)
write_dicom(P("voi_lut.dcm"), base12, 16, 12, VOILUTSequence=[lut_item(0, curve, 12)])
cases.append(("VOI LUT Sequence (first: the LUT)", P("voi_lut.dcm"), []))
write_dicom(P("voi_lut_offset.dcm"), base12, 16, 12, WindowCenter=1000, WindowWidth=500,
            VOILUTSequence=[lut_item(1000, (np.arange(2000) % 256).astype(np.uint16), 8)])
cases += [("window and VOI LUT: --dicom-window 1 is the window", P("voi_lut_offset.dcm"), ["--dicom-window", "1"]),
          ("window and VOI LUT: --dicom-window 2, LUT from 1000 (clamped)", P("voi_lut_offset.dcm"),
           ["--dicom-window", "2"])]
write_dicom(P("ct_voi_lut.dcm"), ct.astype(np.int16).view(np.uint16), 16, 16, signed=True,
            VOILUTSequence=[lut_item(-1000, (np.arange(3000) * 21).astype(np.uint16), 16, vr="SS")])
cases.append(("signed, VOI LUT with a negative first input (SS)", P("ct_voi_lut.dcm"), []))
write_dicom(P("modality_lut.dcm"), base12, 16, 12, WindowCenter=30000, WindowWidth=40000,
            ModalityLUTSequence=[lut_item(0, (np.arange(4096) ** 2 // 256).astype(np.uint16), 16)])
cases.append(("Modality LUT Sequence, then its window", P("modality_lut.dcm"), []))

for name, path, flags in cases:
    ds, words = words_of(path)
    intensity = flags[flags.index("--intensity") + 1] if "--intensity" in flags else "auto"
    window = flags[flags.index("--dicom-window") + 1] if "--dicom-window" in flags else "first"
    compare(name, path, ref.reference_image(words, ds, intensity, window), *flags)

# The reference's y against DCMTK's own rendering (dcmj2pnm truncates where the rule rounds).
for what, path, dcmtk_flags in (("window", P("m2_12_window.dcm"), ["+Wi", "1"]),
                                ("MONOCHROME1 window", P("m1_12_window.dcm"), ["+Wi", "1"]),
                                ("min..max", P("m2_12_window.dcm"), ["+Wm"]),
                                ("min..max, signed with rescale", P("ct.dcm"), ["+Wm"])):
    ds, words = words_of(path)
    pgm = path + ".dcmtk.pgm"
    tool("dcmj2pnm", *dcmtk_flags, path, pgm)
    dcmtk = np.array(Image.open(pgm)).astype(np.int64)
    window = "minmax" if "+Wm" in dcmtk_flags else "first"
    y = ref.y_of(words, ds, "auto", window)
    if str(ds.PhotometricInterpretation) == "MONOCHROME1":
        y = 255 - y
    # DCMTK computes y in another order: where y is an integer, either side of it may come out (1e-9).
    truncated = np.floor(y + 1e-9).astype(np.int64)
    check(np.array_equal(dcmtk, truncated), f"dcmj2pnm {' '.join(dcmtk_flags)} ({what}) = floor(y) of the reference",
          f"{int((dcmtk != truncated).sum())} differ")

# A DICOM file without an extension is recognised by its preamble.
shutil.copy(P("m2_12_window.dcm"), P("1.2.826.0.1.3680043.8.498.1"))
ds, words = words_of(P("m2_12_window.dcm"))
compare("no file extension (recognised by DICM)", P("1.2.826.0.1.3680043.8.498.1"), ref.reference_image(words, ds))

# --- RGB, planar configuration 0 and 1 ---
rgb = np.stack([base8, (base8 * 3) % 256, 255 - base8], axis=2).astype(np.uint8)
for planar in (0, 1):
    path = write_dicom(P(f"rgb_planar{planar}.dcm"), rgb, 8, 8, photometric="RGB", planar=planar)
    compare(f"RGB, planar configuration {planar} (pydicom's pixel_array)", path, pydicom.dcmread(path).pixel_array)

# --- multi-frame ---
frames = np.stack([base12, 4095 - base12, base12 // 2])
write_dicom(P("multiframe.dcm"), frames, 16, 12, frames=3, WindowCenter=2000, WindowWidth=1500)
refused("multi-frame refused", P("multiframe.dcm"), [], "multiframe.dcm", "(0028,0008)", "--dicom-first-frame")
ds = pydicom.dcmread(P("multiframe.dcm"))
compare("multi-frame with --dicom-first-frame: frame 1", P("multiframe.dcm"), ref.reference_image(frames[0], ds),
        "--dicom-first-frame")
refused("--dicom-window 3 of a file with 2 windows", P("two_windows.dcm"), ["--dicom-window", "3"],
        "two_windows.dcm", "(0028,1050)")
refused("--intensity pillow for DICOM", P("m2_8.dcm"), ["--intensity", "pillow"], "m2_8.dcm", "PNG only")

# --- every compressed transfer syntax ---
DCMTK = {  # name: (tool command, transfer syntax UID it must produce)
    "JPEG lossless SV1": (["dcmcjpeg", "+e1"], "1.2.840.10008.1.2.4.70"),
    "JPEG lossless process 14": (["dcmcjpeg", "+el"], "1.2.840.10008.1.2.4.57"),
    "JPEG-LS lossless": (["dcmcjpls", "+el"], "1.2.840.10008.1.2.4.80"),
    "RLE": (["dcmcrle"], "1.2.840.10008.1.2.5"),
    "deflate": (["dcmconv", "+td"], "1.2.840.10008.1.2.1.99"),
    "implicit VR little endian": (["dcmconv", "+ti"], "1.2.840.10008.1.2"),
    "explicit VR big endian": (["dcmconv", "+tb"], "1.2.840.10008.1.2.2"),
}
syntaxes_seen = {"1.2.840.10008.1.2.1"}  # the uncompressed originals above


def dcmtk_variant(source, name):
    command, uid = DCMTK[name]
    out = source.replace(".dcm", "_" + name.replace(" ", "_") + ".dcm")
    tool(*command, source, out)
    got = str(pydicom.dcmread(out, stop_before_pixels=True).file_meta.TransferSyntaxUID)
    check(got == uid, f"{name}: {os.path.basename(out)} has transfer syntax {uid}", got)
    syntaxes_seen.add(uid)
    return out


def j2k_variant(source, lossless):
    """JPEG 2000 by Pillow (OpenJPEG), encapsulated by pydicom; returns (path, the codestream's own decoding)."""
    ds, words = words_of(source)
    image = Image.fromarray(words.astype(np.uint16), "I;16") if words.dtype != np.uint8 else Image.fromarray(words)
    stream = io.BytesIO()
    if lossless:
        image.save(stream, "JPEG2000", irreversible=False, no_jp2=True)
    else:
        image.save(stream, "JPEG2000", irreversible=True, quality_mode="rates", quality_layers=[12], no_jp2=True)
    codestream = stream.getvalue()
    uid = "1.2.840.10008.1.2.4.90" if lossless else "1.2.840.10008.1.2.4.91"
    out = source.replace(".dcm", "_j2k" + ("" if lossless else "_lossy") + ".dcm")
    attributes = {k: ds[k].value for k in ("WindowCenter", "WindowWidth", "RescaleSlope", "RescaleIntercept")
                  if k in ds}
    write_dicom(out, words, int(ds.BitsAllocated), int(ds.BitsStored), signed=int(ds.PixelRepresentation) == 1,
                photometric=str(ds.PhotometricInterpretation), syntax=uid,
                pixel_bytes=encapsulate([codestream]), **attributes)
    syntaxes_seen.add(uid)
    decoded = np.array(Image.open(io.BytesIO(codestream))).astype(np.uint16 if words.dtype != np.uint8 else np.uint8)
    return out, decoded


for source in (P("m2_12_window.dcm"), P("ct.dcm"), P("signed12.dcm")):
    ds, words = words_of(source)
    expected = ref.reference_image(words, ds)
    label = os.path.basename(source)
    for name in DCMTK:
        if name == "JPEG lossless process 14" and source != P("m2_12_window.dcm"):
            continue
        compare(f"{name} of {label} = the original's reference", dcmtk_variant(source, name), expected)
    path, _ = j2k_variant(source, lossless=True)
    compare(f"JPEG 2000 lossless of {label} = the original's reference", path, expected)

# Lossy: the reference on an independent decoding of the same compressed data.
path, decoded = j2k_variant(P("m2_12_window.dcm"), lossless=False)
ds = pydicom.dcmread(path)
compare("JPEG 2000 lossy = reference on Pillow's decoding of the codestream", path, ref.reference_image(decoded, ds))
check(not np.array_equal(decoded, words_of(P("m2_12_window.dcm"))[1]), "the JPEG 2000 test file is really lossy")

baseline = P("m2_8_baseline.dcm")
tool("dcmcjpeg", "+eb", P("m2_8.dcm"), baseline)
syntaxes_seen.add("1.2.840.10008.1.2.4.50")
ds = pydicom.dcmread(baseline)
fragment = b"".join(pydicom.encaps.generate_pixel_data_frame(ds.PixelData))
pillow_words = np.array(Image.open(io.BytesIO(fragment)))
compare("JPEG baseline (8-bit) = reference on Pillow's (libjpeg-turbo's) decoding", baseline,
        ref.reference_image(pillow_words, ds))

for name, command, uid in (("JPEG extended 12-bit", ["dcmcjpeg", "+ee"], "1.2.840.10008.1.2.4.51"),
                           ("JPEG-LS near-lossless", ["dcmcjpls", "+en"], "1.2.840.10008.1.2.4.81")):
    lossy = P(f"m2_12_{uid}.dcm")
    tool(*command, P("m2_12_window.dcm"), lossy)
    raw = lossy + ".raw.dcm"
    tool("dcmdjpeg" if "JPEG-LS" not in name else "dcmdjpls", lossy, raw)
    syntaxes_seen.add(uid)
    ds, words = words_of(raw)
    check(not np.array_equal(words, words_of(P("m2_12_window.dcm"))[1]), f"the {name} test file is really lossy")
    compare(f"{name} = reference on DCMTK's dcmdjpeg/dcmdjpls decoding (no independent decoder in Debian)", lossy,
            ref.reference_image(words, ds))

# RGB through the codecs (JPEG baseline stores YBR_FULL_422; the decoder gives RGB).
for name in ("RLE", "JPEG-LS lossless"):
    compare(f"RGB {name} = the original", dcmtk_variant(P("rgb_planar0.dcm"), name), rgb)
rgb_baseline = P("rgb_baseline.dcm")
tool("dcmcjpeg", "+eb", P("rgb_planar0.dcm"), rgb_baseline)
rgb_raw = rgb_baseline + ".raw.dcm"
tool("dcmdjpeg", rgb_baseline, rgb_raw)
compare("RGB JPEG baseline (YBR_FULL_422) = DCMTK's dcmdjpeg RGB", rgb_baseline, pydicom.dcmread(rgb_raw).pixel_array)

check(len(syntaxes_seen) == 13, "every transfer syntax vitpipe decodes was tested", f"{sorted(syntaxes_seen)}")

# DICOM wherever images are: a folder: dataset (.dcm, .dicom, no extension), data prepare, and predict, which must
# see exactly the pixels `image convert` shows.
folder = P("folder")
for cls, source, name in (("a", "m2_12_window.dcm", "x.dcm"), ("a", "ct.dcm", "1.2.3.4"),
                          ("b", "m2_12_window_RLE.dcm", "y.dicom"), ("b", "m2_8.dcm", "z.dcm")):
    os.makedirs(os.path.join(folder, cls), exist_ok=True)
    shutil.copy(P(source), os.path.join(folder, cls, name))
result = run("data", "inspect", "--data", "folder:" + folder, "--json")
check(result.returncode == 0 and '"total":4' in result.stdout.replace(" ", ""),
      "folder: dataset finds .dcm, .dicom and extensionless DICOM files", result.stdout.strip()[:120])
result = run("data", "prepare", "--data", "folder:" + folder, "--out", P("cache"), "--image-size", "32")
check(result.returncode == 0, "data prepare reads them", result.stderr.strip()[-200:])
tool(VITPIPE, "init", "--preset", "vit-micro", "--labels", "a,b", "--seed", "1", "--out", P("model"))
dicom = os.path.join(folder, "a", "1.2.3.4")
_, seen = convert(dicom)
Image.fromarray(seen).save(P("seen.png"))
a = run("predict", "--model", P("model"), "--threads", "1", dicom)
b = run("predict", "--model", P("model"), "--threads", "1", P("seen.png"))

check(a.returncode == 0 and json.loads(a.stdout)["logits"] == json.loads(b.stdout)["logits"],
      "predict on a DICOM file = predict on the 8-bit image `image convert` writes", a.stderr.strip()[-200:])

if os.environ.get("VITPIPE_KEEP_TEMP"):
    print(f"kept {work}")
else:
    shutil.rmtree(work, ignore_errors=True)
if failures:
    print(f"{len(failures)} of {checked} check(s) failed:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(f"all {checked} checks passed")
