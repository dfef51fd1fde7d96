"""Heatmaps on a generated task whose evidence has a known place: an image is positive exactly when it holds a
bright 16x16 square at pixels 4..19 (patch cells 1..4 of an 8x8 grid, a quarter of the image). A vit-micro (patch 4)
trained to test ROC-AUC > 0.95 gives gradient-weighted rollout and Grad-CAM maps whose mass falls at least 60% inside
the square on the positive test images (mean over them); attention rollout, which ignores the label, is asserted only
above a uniform map's 25%. The same model trained on shuffled labels is measured too and its figures printed: its
output still reacts to the square (with a random sign), so gradient maps of it still point there (see the README,
"Heatmaps"). Also: the .npy maps are float32 at the patch grid, the overlays RGB PNGs at the image's size (x8 here: under 256 pixels they are enlarged), index.json
lists them, and bad input (an unknown --finding or --method, a missing image) is one clear line with exit code 1."""

import json
import sys
import os

import numpy as np
from PIL import Image
from sklearn.metrics import roc_auc_score

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

SIZE, PATCH = 32, 4
QUADRANT = 16
CELLS = (slice(1, 5), slice(1, 5))  # the square: pixels 4..19, patch cells 1..4 (16 of 64)
METHODS = ["rollout", "grad-rollout", "gradcam"]

checks = e2e.Checks()
root = e2e.temp_dir("explain")
rng = np.random.default_rng(0)


def make_dataset(directory, shuffle):
    os.makedirs(os.path.join(directory, "images"), exist_ok=True)
    rows = []
    for split, count in (("train", 320), ("val", 40), ("test", 80)):
        for i in range(count):
            positive = int(rng.integers(0, 2))
            image = rng.normal(90, 25, size=(SIZE, SIZE))
            if positive:
                image[4:20, 4:20] += 110
            name = f"images/{split}_{i:04d}.png"
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8), mode="L").convert("RGB").save(
                os.path.join(directory, name))
            rows.append([name, split, positive])
    truth = [r[2] for r in rows]
    if shuffle:
        labels = [r[2] for r in rows if r[1] != "test"]
        rng.shuffle(labels)
        for r, v in zip((r for r in rows if r[1] != "test"), labels):
            r[2] = v
    with open(os.path.join(directory, "data.csv"), "w") as f:
        f.write("path,split,square\n")
        for name, split, label in rows:
            f.write(f"{name},{split},{label}\n")
    return rows, truth


def train_and_explain(tag, shuffle):
    directory = os.path.join(root, tag)
    rows, truth = make_dataset(directory, shuffle)
    init = os.path.join(directory, "init")
    e2e.run("init", "--preset", "vit-micro", "--patch-size", PATCH, "--labels", "square", "--seed", "1", "--out", init)
    out = os.path.join(directory, "run")
    e2e.run(*e2e.train_args(init, "csv:" + os.path.join(directory, "data.csv"), out, "--epochs", "6", "--batch-size",
                            "32", "--lr", "2e-3", "--warmup-ratio", "0.1", "--seed", "0"))
    model = os.path.join(out, "model")
    tests = [(os.path.join(directory, r[0]), t) for r, t in zip(rows, truth) if r[1] == "test"]
    predictions = [json.loads(line)["probabilities"]["square"] for line in e2e.run(
        "predict", "--model", model, "--threads", "2", *[p for p, _ in tests]).stdout.splitlines()]
    auc = roc_auc_score([t for _, t in tests], predictions)
    positives = [p for p, t in tests if t][:12]
    maps_dir = os.path.join(directory, "maps")
    args = ["explain", "--model", model, "--out", maps_dir, "--finding", "square", "--threads", "2"]
    for m in METHODS:
        args += ["--method", m]
    e2e.run(*args, *positives)
    index = json.load(open(os.path.join(maps_dir, "index.json")))
    mass = {m: [] for m in METHODS}
    for entry in index["maps"]:
        raw = np.load(os.path.join(maps_dir, entry["map"]))
        checks.check(raw.dtype == np.float32 and raw.shape == (SIZE // PATCH, SIZE // PATCH),
                     f"{tag}: {entry['map']} is float32 at the 8x8 patch grid", f"{raw.dtype} {raw.shape}")
        overlay = Image.open(os.path.join(maps_dir, entry["overlay"]))
        checks.check(overlay.size == (8 * SIZE, 8 * SIZE) and overlay.mode == "RGB",
                     f"{tag}: {entry['overlay']} is an RGB PNG at 8x the 32-pixel image's size (at least 256)",
                     f"{overlay.size} {overlay.mode}")
        total = float(raw.sum())
        mass[entry["method"]].append(float(raw[CELLS].sum()) / total if total > 0 else 0.0)
    checks.check(len(index["maps"]) == len(positives) * len(METHODS), f"{tag}: index.json lists every map",
                 f"{len(index['maps'])}")
    return auc, {m: float(np.mean(v)) for m, v in mass.items()}, model, positives


auc, mass, model, positives = train_and_explain("square", shuffle=False)
checks.check(auc > 0.95, "the model learns the square", f"test ROC-AUC {auc:.3f}")
for m in ("grad-rollout", "gradcam"):
    checks.check(mass[m] >= 0.6, f"{m}: at least 60% of the map's mass inside the square on positive images",
                 f"{mass[m]:.3f} (a uniform map: 0.25)")
checks.check(mass["rollout"] > 0.3, "rollout: more of the map's mass inside the square than a uniform map's 25%",
             f"{mass['rollout']:.3f} (not the 60% asked of the gradient methods: rollout ignores the label)")

shuffled_auc, shuffled_mass, _, _ = train_and_explain("shuffled", shuffle=True)
print(f"measured  shuffled labels: test ROC-AUC {shuffled_auc:.3f}; mass inside the square: " +
      ", ".join(f"{m} {shuffled_mass[m]:.3f}" for m in METHODS))

bad = e2e.run("explain", "--model", model, "--out", os.path.join(root, "bad"), "--finding", "Nodule", positives[0],
              expect_ok=False)
lines = bad.stderr.strip().splitlines()
checks.check(bad.returncode == 1 and len(lines) == 1 and "'Nodule' is not a label" in lines[0] and "square" in lines[0],
             "an unknown --finding: one line naming it and the model's labels, exit 1", bad.stderr.strip()[:200])
missing = e2e.run("explain", "--model", model, "--out", os.path.join(root, "bad"), os.path.join(root, "nope.png"),
                  expect_ok=False)
checks.check(missing.returncode == 1 and "nope.png" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1,
             "a missing image: one line naming it, exit 1", missing.stderr.strip()[:200])
bad_method = e2e.run("explain", "--model", model, "--out", os.path.join(root, "bad"), "--method", "lime",
                     positives[0], expect_ok=False)
checks.check(bad_method.returncode == 1 and "--method" in bad_method.stderr and "gradcam" in bad_method.stderr,
             "an unknown --method: named with the choices, exit 1", bad_method.stderr.strip()[:200])

e2e.cleanup(root)
checks.finish()
