"""The intensity policy and masked labels end to end: a model trained on 16-bit PNGs with --intensity window:... records
the policy in its exported preprocessor_config.json, and predict / eval reuse it (the same numbers as the explicit
flag, other numbers with --intensity pillow); a packed cache records the policy in its manifest and fingerprint, and
a model reading images otherwise refuses it; blank and -1 labels are masked (eval reports the known counts); eval of
the model on a dataset with other labels maps them by name and reports mapped, unmapped and unused labels."""

import json
import os

import numpy as np
from PIL import Image

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("intensity")
WINDOW = "window:2048,4096"
RECORDED = {"intensity": WINDOW, "dicom_window": "first"}

# 12-bit radiograph-like images stored in 16 bits: label A = a bright blob, B = a bright band, C = random.
rng = np.random.default_rng(4)
yy, xx = np.mgrid[0:32, 0:32]
rows = []
os.makedirs(os.path.join(root, "images"))
for i in range(24):
    a, b, c = rng.integers(0, 2, 3)
    image = rng.normal(1200, 150, (32, 32))
    if a:
        image += 2000 * np.exp(-((yy - 10) ** 2 + (xx - 20) ** 2) / 30.0)
    if b:
        image[20:24, :] += 1500
    name = f"images/x{i:02d}.png"
    Image.fromarray(np.clip(image, 0, 4095).astype(np.uint16), "I;16").save(os.path.join(root, name))
    split = "train" if i < 16 else "test"
    cells = [str(a), str(b) if i % 5 else "", str(c) if i % 7 else "-1"]  # blanks and uncertain labels
    rows.append(f"{name},{split},{','.join(cells)}")
with open(os.path.join(root, "data.csv"), "w") as f:
    f.write("path,split,A,B,C\n" + "\n".join(rows) + "\n")
data = "csv:" + os.path.join(root, "data.csv")
image = os.path.join(root, "images", "x03.png")

init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", "A,B,C", "--seed", "3", "--out", init)
out = os.path.join(root, "run")
result = e2e.run(*e2e.train_args(init, data, out, "--max-steps", "3", "--batch-size", "4", "--micro-batch-size", "2",
                                 "--val-fraction", "0", "--warmup-steps", "1", "--intensity", WINDOW, "--blank",
                                 "ignore", "--log-every", "1"))
checks.check("7 of 48 training labels are unknown" in result.stderr and "masked out of the loss" in result.stderr,
             "training says how many labels are masked", [l for l in result.stderr.splitlines() if "unknown" in l][:1])
losses = [x["loss"] for x in e2e.read_metrics(out) if x["type"] == "train"]
checks.check(len(losses) == 3 and all(np.isfinite(losses)), "masked training gives finite losses", losses)
with open(os.path.join(out, "model", "preprocessor_config.json")) as f:
    exported = json.load(f)
checks.check(exported.get("vitpipe_intensity") == RECORDED, "the exported preprocessor_config.json records the policy",
             exported.get("vitpipe_intensity"))
checks.check(exported.get("image_processor_type") == "ViTImageProcessor",
             "next to transformers' own keys", exported.get("image_processor_type"))
exported_dir = os.path.join(root, "exported")
e2e.run("export", out, "--out", exported_dir)
with open(os.path.join(exported_dir, "preprocessor_config.json")) as f:
    checks.check(json.load(f).get("vitpipe_intensity") == RECORDED, "vitpipe export keeps it")

# predict: the recorded policy unless a flag says otherwise.
default = e2e.run("predict", "--model", exported_dir, "--threads", "2", image)
explicit = e2e.run("predict", "--model", exported_dir, "--threads", "2", "--intensity", WINDOW, image)
pillow = e2e.run("predict", "--model", exported_dir, "--threads", "2", "--intensity", "pillow", image)
checks.check(default.stdout == explicit.stdout, "predict reuses the recorded policy (= the explicit flag)")
checks.check(json.loads(default.stdout)["logits"] != json.loads(pillow.stdout)["logits"],
             "--intensity pillow sees other pixels, other logits")
checks.check("was trained reading images with intensity window:2048,4096" in pillow.stderr,
             "predict warns when the flag overrides the recorded policy", pillow.stderr.strip()[:160])

# eval: the same; masked labels are counted, not scored.
flags = ["--threads", "2", "--split", "test", "--json", "--blank", "ignore"]
default = json.loads(e2e.run("eval", "--model", exported_dir, "--data", data, *flags).stdout)
explicit = json.loads(e2e.run("eval", "--model", exported_dir, "--data", data, "--intensity", WINDOW, *flags).stdout)
checks.check(default["auc"] == explicit["auc"] and default["loss"] == explicit["loss"],
             "eval reuses the recorded policy (= the explicit flag)")
test_rows = [r.split(",") for r in rows if ",test," in r]
known_b = sum(1 for r in test_rows if r[3] != "")
known_c = sum(1 for r in test_rows if r[4] not in ("", "-1"))
checks.check(default["known"] == {"A": len(test_rows), "B": known_b, "C": known_c},
             "eval reports each label's known rows (blank and -1 masked)", default["known"])

# The cache: the policy is part of the manifest and of the fingerprint; another reading is refused.
cache_auto, cache_window = os.path.join(root, "cache_auto"), os.path.join(root, "cache_window")
e2e.run("data", "prepare", "--data", data, "--out", cache_auto, "--image-size", "32")
e2e.run("data", "prepare", "--data", data, "--out", cache_window, "--image-size", "32", "--intensity", WINDOW)
manifests = []
for cache in (cache_auto, cache_window):
    with open(os.path.join(cache, "manifest.json")) as f:
        manifests.append(json.load(f))
checks.check(manifests[1]["image_read"] == RECORDED and manifests[0]["image_read"]["intensity"] == "auto",
             "the cache's manifest records how images were read", manifests[1]["image_read"])
checks.check(manifests[0]["fingerprint"]["metadata_sha256"] != manifests[1]["fingerprint"]["metadata_sha256"],
             "and its fingerprint depends on it")
refused = e2e.run("eval", "--model", exported_dir, "--data", "cache:" + cache_auto, *flags, expect_ok=False)
checks.check(refused.returncode == 1 and "reads images with intensity auto" in refused.stderr and
             "asks for intensity window:2048,4096" in refused.stderr,
             "a model reading images otherwise refuses the cache", refused.stderr.strip()[-200:])
cached = json.loads(e2e.run("eval", "--model", exported_dir, "--data", "cache:" + cache_window, *flags).stdout)
checks.check(cached["auc"] == default["auc"] and abs(cached["loss"] - default["loss"]) < 1e-9,
             "eval on the matching cache = eval on the files")
refused = e2e.run(*e2e.train_args(init, "cache:" + cache_window, os.path.join(root, "refused"), "--max-steps", "1",
                                  "--batch-size", "4", "--val-fraction", "0", "--intensity", "pillow"), expect_ok=False)
checks.check(refused.returncode == 1 and "reads images with intensity window" in refused.stderr,
             "training with another --intensity refuses the cache", refused.stderr.strip()[-160:])

# Cross-dataset evaluation: another dataset's labels, mapped by name.
with open(os.path.join(root, "other.csv"), "w") as f:
    f.write("path,split,C,B,D\n" + "\n".join(
        f"images/x{i:02d}.png,test,{i % 2},{(i // 2) % 2},{(i // 3) % 2}" for i in range(16, 24)) + "\n")
other = json.loads(e2e.run("eval", "--model", exported_dir, "--data", "csv:" + os.path.join(root, "other.csv"),
                           "--threads", "2", "--split", "test", "--json").stdout)
mapping = other.get("label_mapping", {})
checks.check(mapping == {"mapped": {"B": "B", "C": "C"}, "unmapped": ["A"], "unused": ["D"]},
             "eval on other labels reports mapped, unmapped and unused labels", mapping)
checks.check(other["auc"]["A"] is None and other["known"]["A"] == 0 and other["auc"]["B"] is not None,
             "an unmapped label has no AUC and no known rows", other["known"])
table = e2e.run("eval", "--model", exported_dir, "--data", "csv:" + os.path.join(root, "other.csv"), "--threads", "2",
                "--split", "test").stdout
checks.check("labels mapped: B, C" in table and "model labels not in this dataset: A" in table and
             "dataset labels the model lacks: D" in table, "the table says the same")

e2e.cleanup(root)
checks.finish()
