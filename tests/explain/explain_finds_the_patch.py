"""Heatmaps on a generated task whose evidence has a known place: an image is positive exactly when it holds a
bright square at a known place (SQUARE below, in patch cells of the 8x8 grid of a vit-micro at patch 4).

Two models, one recipe (the same images, init, seeds and flags):
  trained   labels = the square's presence;
  control   the same images, labels shuffled with a fixed seed so that they say nothing about the square: in train
            and in val, exactly half of the images with the square and half of those without are positive (a plain
            permutation leaves a chance correlation of about 1/sqrt(n) between label and square, which a model can
            fit through the square, and then its maps rightly point there).
Asserted:
  - trained: test ROC-AUC > 0.95, and for every method (rollout, grad-rollout, gradcam) the map's mass inside the
    square, averaged over the positive test images, at least 60%;
  - control: it learned nothing about the square (the mean probability on test images with the square minus that
    on the others is under NULL_GAP of the trained model's; its ROC-AUC against the square is printed, not asserted:
    a rank statistic turns a consistent gap of any size into 0 or 1), and for every method its maps' mass inside the
    square, in the trained model's units (over the trained map's total on the same image), below 60%. As a share of
    its own map, a gradient map of a model that learned nothing follows the sign of a negligible dependence and
    lands near 0 or 1 by the seed (printed; see the README, "Heatmaps").
Printed, not asserted: the figures of the untrained (randomly initialised) model, Adebayo et al.'s (2018) model
randomisation check.
Also: the .npy maps are float32 at the patch grid, the overlays RGB PNGs with the film at the image's size (x8 here:
under 256 pixels they are enlarged) and the caption and colour bar beside it, index.json lists them, and bad input (an unknown --finding, --method or --head-fusion, a
--discard-ratio outside [0, 1), a missing image) is one clear line with exit code 1."""

import json
import os
import sys
import time

import numpy as np
from PIL import Image
from sklearn.metrics import roc_auc_score

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

SIZE, PATCH = 32, 4
SQUARE_PIXELS = (8, 16)  # rows and columns 8..15: patch cells 2..3, 4 of the 64 cells (6.25% of the image)
CELLS = (slice(SQUARE_PIXELS[0] // PATCH, SQUARE_PIXELS[1] // PATCH),) * 2
AREA = (SQUARE_PIXELS[1] - SQUARE_PIXELS[0]) ** 2 / SIZE ** 2
THRESHOLD = 0.6
NULL_GAP = 0.1  # the control's probability gap (square - plain), asked under this fraction of the trained model's
METHODS = ["rollout", "grad-rollout", "gradcam"]
SPLITS = (("train", 320), ("val", 40), ("test", 80))
RECIPE = ["--epochs", "6", "--batch-size", "32", "--lr", "2e-3", "--warmup-ratio", "0.1", "--seed", "0"]

checks = e2e.Checks()
root = e2e.temp_dir("explain")


def make_images(directory):
    """[path, split, square] per image; each split has exactly half of its images with the square."""
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(directory, "images"), exist_ok=True)
    rows = []
    for split, count in SPLITS:
        squares = rng.permutation([1] * (count // 2) + [0] * (count - count // 2))
        for i, square in enumerate(squares):
            image = rng.normal(90, 25, size=(SIZE, SIZE))
            if square:
                image[SQUARE_PIXELS[0]:SQUARE_PIXELS[1], SQUARE_PIXELS[0]:SQUARE_PIXELS[1]] += 110
            name = os.path.join(directory, "images", f"{split}_{i:04d}.png")
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8), mode="L").convert("RGB").save(name)
            rows.append([name, split, int(square)])
    return rows


def shuffled_labels(rows):
    """The control's labels: in train and val, a fixed-seed random half of the square images and a random half of
    the others positive (a permutation of the true labels, independent of the square); test keeps the truth."""
    rng = np.random.default_rng(1)
    labels = [r[2] for r in rows]
    for split in ("train", "val"):
        for square in (0, 1):
            group = [i for i, r in enumerate(rows) if r[1] == split and r[2] == square]
            picked = rng.permutation(len(group))[: len(group) // 2]
            for k, i in enumerate(group):
                labels[i] = int(k in set(picked))
    return labels


def write_csv(path, rows, labels):
    with open(path, "w") as f:
        f.write("path,split,square\n")
        for (name, split, _), label in zip(rows, labels):
            f.write(f"{name},{split},{label}\n")


def read_maps(maps_dir):
    """index.json and, per method, the raw maps in the order of the images."""
    index = json.load(open(os.path.join(maps_dir, "index.json")))
    maps = {m: [] for m in METHODS}
    for entry in index["maps"]:
        raw = np.load(os.path.join(maps_dir, entry["map"]))
        checks.check(raw.dtype == np.float32 and raw.shape == (SIZE // PATCH, SIZE // PATCH),
                     f"{entry['map']} is float32 at the 8x8 patch grid", f"{raw.dtype} {raw.shape}")
        overlay = Image.open(os.path.join(maps_dir, entry["overlay"]))
        width, height = overlay.size  # the film at 8x, a caption band above it and the colour bar's panel beside
        checks.check(8 * SIZE < width < 8 * SIZE * 5 // 4 and 8 * SIZE < height < 8 * SIZE * 5 // 4 and
                     overlay.mode == "RGB",
                     f"{entry['overlay']} is an RGB PNG holding the film at 8x the 32-pixel image's size (at least "
                     "256) with its caption and colour bar outside it", f"{overlay.size} {overlay.mode}")
        maps[entry["method"]].append(raw.astype(np.float64))
    return index, maps


def inside(map_, scale):
    """The mass of `map_` inside the square, in units of `scale` (a total mass)."""
    return float(map_[CELLS].sum()) / scale if scale > 0 else 0.0


def explain(tag, model, rows):
    """(ROC-AUC of the model's outputs against the square on the test images, the mean probability on the test
    images with the square minus that on the others, the raw maps per method of the first 12 positive test
    images)."""
    tests = [r for r in rows if r[1] == "test"]
    predictions = [json.loads(line)["probabilities"]["square"] for line in e2e.run(
        "predict", "--model", model, "--threads", "2", *[r[0] for r in tests]).stdout.splitlines()]
    auc = roc_auc_score([r[2] for r in tests], predictions)
    gap = float(np.mean([p for p, r in zip(predictions, tests) if r[2]]) -
                np.mean([p for p, r in zip(predictions, tests) if not r[2]]))
    positives = [r[0] for r in tests if r[2]][:12]
    maps_dir = os.path.join(root, tag + "-maps")
    e2e.run("explain", "--model", model, "--out", maps_dir, "--finding", "square", "--threads", "2",
            *sum((["--method", m] for m in METHODS), []), *positives)
    index, maps = read_maps(maps_dir)
    checks.check(len(index["maps"]) == len(positives) * len(METHODS), f"{tag}: index.json lists every map",
                 f"{len(index['maps'])}")
    mass = {m: float(np.mean([inside(x, float(x.sum())) for x in maps[m]])) for m in METHODS}
    print(f"measured  {tag}: test ROC-AUC against the square {auc:.3f}, probability gap square - plain {gap:.4f}; "
          f"share of each map inside the square (area {AREA:.4f}): " +
          ", ".join(f"{m} {mass[m]:.3f}" for m in METHODS), flush=True)
    return auc, gap, maps, mass, positives


def train(tag, rows, labels, init):
    data = os.path.join(root, tag + ".csv")
    write_csv(data, rows, labels)
    out = os.path.join(root, tag)
    e2e.run(*e2e.train_args(init, "csv:" + data, out, *RECIPE))
    return os.path.join(out, "model")


started = time.time()
rows = make_images(root)
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--patch-size", PATCH, "--labels", "square", "--seed", "1", "--out", init)

model = train("trained", rows, [r[2] for r in rows], init)
auc, gap, maps, mass, positives = explain("trained", model, rows)
checks.check(auc > 0.95, "trained: the model learns the square", f"test ROC-AUC {auc:.3f}")
for m in METHODS:
    checks.check(mass[m] >= THRESHOLD, f"trained, {m}: at least 60% of the map's mass inside the square on positive "
                 "images", f"{mass[m]:.3f} (a uniform map: {AREA:.4f})")

control = train("control", rows, shuffled_labels(rows), init)
control_auc, control_gap, control_maps, control_mass, _ = explain("control", control, rows)
checks.check(abs(control_gap) < NULL_GAP * abs(gap), "control (shuffled labels): it learned nothing about the "
             "square: the probability gap between test images with and without it under a tenth of the trained "
             "model's", f"{control_gap:.4f} vs {gap:.4f} (its ROC-AUC against the square, {control_auc:.3f}, ranks a "
             "gap of any size)")
for m in METHODS:
    # In the trained model's units: each control map's mass inside the square over the trained map's total on the
    # same image (the maps are d logit / d ... for both, or rollout's share of the class token's row).
    relative = float(np.mean([inside(c, float(t.sum())) for c, t in zip(control_maps[m], maps[m])]))
    checks.check(relative < THRESHOLD, f"control, {m}: its maps hold less than 60% of the trained maps' mass "
                 "inside the square", f"{relative:.4f}; as a share of its own map {control_mass[m]:.3f}")

explain("untrained", init, rows)  # printed only (model randomisation, Adebayo et al. 2018)

bad = e2e.run("explain", "--model", model, "--out", os.path.join(root, "bad"), "--finding", "Nodule", positives[0],
              expect_ok=False)
lines = bad.stderr.strip().splitlines()
checks.check(bad.returncode == 1 and len(lines) == 1 and "'Nodule' is not a label" in lines[0] and "square" in lines[0],
             "an unknown --finding: one line naming it and the model's labels, exit 1", bad.stderr.strip()[:200])
missing = e2e.run("explain", "--model", model, "--out", os.path.join(root, "bad"), os.path.join(root, "nope.png"),
                  expect_ok=False)
checks.check(missing.returncode == 1 and "nope.png" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1,
             "a missing image: one line naming it, exit 1", missing.stderr.strip()[:200])
for flag, value, named in (("--method", "lime", "gradcam"), ("--head-fusion", "median", "max"),
                           ("--discard-ratio", "1", "[0, 1)")):
    result = e2e.run("explain", "--model", model, "--out", os.path.join(root, "bad"), flag, value, positives[0],
                     expect_ok=False)
    checks.check(result.returncode == 1 and flag in result.stderr and named in result.stderr and
                 len(result.stderr.strip().splitlines()) == 1,
                 f"a bad {flag} ({value}): one line naming it with what is expected, exit 1",
                 result.stderr.strip()[:200])

print(f"measured  {time.time() - started:.0f} s in all")
e2e.cleanup(root)
checks.finish()
