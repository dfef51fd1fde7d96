"""16-bit gray PNGs through `vitpipe image convert` under each --intensity policy, against numpy's rule on the same
file (full-range: round(v * 255 / 65535); window: DICOM's LINEAR function; percentile: numpy.percentile's range) and
against Pillow (--intensity pillow = Image.open(f).convert("RGB")). 8-bit PNG and JPEG files are unchanged by every
policy. The default (auto) is full-range and warns once per process, even over many images."""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

VITPIPE = os.environ["VITPIPE"]
failures = []


def check(ok, what, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def convert(path, *flags):
    out = path + ".out.png"
    result = subprocess.run([VITPIPE, "image", "convert", path, out, *flags], capture_output=True, text=True)
    if result.returncode != 0:
        return result, None
    return result, np.array(Image.open(out))


def same(what, got, expected):
    if got is None:
        check(False, what, "vitpipe failed")
        return
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    check(got.shape == expected.shape and diff.max() == 0, what,
          f"{int((diff > 0).sum())} of {diff.size} differ" if diff.max() else f"{diff.size} values")


def linear(x, c, w):
    with np.errstate(divide="ignore", invalid="ignore"):
        y = ((x - (c - 0.5)) / (w - 1) + 0.5) * 255
    return np.where(x <= c - 0.5 - (w - 1) / 2, 0.0, np.where(x > c - 0.5 + (w - 1) / 2, 255.0, y))


def levels(y):
    return np.clip(np.floor(y + 0.5), 0, 255).astype(np.uint8)


work = tempfile.mkdtemp(prefix="vitpipe_png16_")
rng = np.random.default_rng(3)
images = {
    "full16.png": rng.integers(0, 65536, (45, 61)).astype(np.uint16),
    "xray12in16.png": (np.add.outer(np.arange(70) * 50, np.arange(52) * 9) % 4096).astype(np.uint16),
    "dark16.png": rng.integers(0, 300, (20, 33)).astype(np.uint16),  # where clipping and scaling differ most
}
for name, values in images.items():
    Image.fromarray(values, "I;16").save(os.path.join(work, name))

for name, values in images.items():
    path = os.path.join(work, name)
    v = np.array(Image.open(path)).astype(np.float64)  # numpy's view of the same file
    check(np.array_equal(v, values), f"{name}: Pillow reads back what was written")
    result, got = convert(path)
    same(f"{name}: default (auto) = numpy's full-range rule round(v * 255 / 65535)", got, levels(v * 255 / 65535))
    check("full range" in result.stderr and "--intensity pillow" in result.stderr,
          f"{name}: auto warns that Pillow / transformers would clip", result.stderr.strip()[:120])
    result, got = convert(path, "--intensity", "full-range")
    same(f"{name}: --intensity full-range = numpy", got, levels(v * 255 / 65535))
    check(result.stderr.strip() == "", f"{name}: an explicit full-range does not warn", result.stderr.strip())
    _, got = convert(path, "--intensity", "pillow")
    same(f"{name}: --intensity pillow = Pillow's convert('RGB')", got,
         np.array(Image.open(path).convert("RGB"))[:, :, 0])
    _, got = convert(path, "--intensity", "window:2048,3000")
    same(f"{name}: --intensity window:2048,3000 = numpy", got, levels(linear(v, 2048.0, 3000.0)))
    _, got = convert(path, "--intensity", "percentile:1,99.5")
    low, high = np.percentile(v.ravel(), [1, 99.5])
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(v <= low, 0.0, np.where(v >= high, 255.0, (v - low) / (high - low) * 255.0))
    same(f"{name}: --intensity percentile:1,99.5 = numpy.percentile", got, levels(y))

# 8-bit files are what Pillow gives, whatever the policy.
gray8 = rng.integers(0, 256, (17, 23)).astype(np.uint8)
Image.fromarray(gray8, "L").save(os.path.join(work, "gray8.png"))
Image.fromarray(gray8, "L").save(os.path.join(work, "gray8.jpg"), quality=90)
for name in ("gray8.png", "gray8.jpg"):
    path = os.path.join(work, name)
    pillow = np.array(Image.open(path).convert("L"))
    for policy in ("auto", "pillow", "full-range", "window:10,20", "percentile:5,95"):
        result, got = convert(path, "--intensity", policy)
        same(f"{name}: unchanged under --intensity {policy}", got, pillow)

# One warning per process: a cache of three 16-bit images.
folder = os.path.join(work, "folder", "a")
os.makedirs(folder)
for name in images:
    shutil.copy(os.path.join(work, name), folder)
result = subprocess.run([VITPIPE, "data", "prepare", "--data", "folder:" + os.path.dirname(folder), "--out",
                         os.path.join(work, "cache"), "--image-size", "16"], capture_output=True, text=True)
warnings = [line for line in result.stderr.splitlines() if "full range" in line]
check(result.returncode == 0 and len(warnings) == 1, "data prepare over three 16-bit PNGs warns once",
      f"{len(warnings)} warning(s)")

shutil.rmtree(work, ignore_errors=True)
if failures:
    print(f"{len(failures)} check(s) failed:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("all checks passed")
