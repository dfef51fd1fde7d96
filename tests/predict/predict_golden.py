#!/usr/bin/python3
"""Golden test: `vitpipe predict` against transformers' ViTImageProcessor + ViTForImageClassification (hf_vit.py, a
transcription of transformers' code; transformers itself is not installable here).

Every checkpoint is written by Python (an independent safetensors writer, config.json and preprocessor_config.json
as transformers' save_pretrained writes them), never by vitpipe. Images are made with Pillow (gray, RGB, RGBA,
palette, 16-bit, JPEG, odd sizes) plus the real 1024x1024 radiographs in data/chestxray14-sample/full-size/.

For each case the logits of `vitpipe predict --format json` must agree with the float32 transformers reference to
1e-4 (absolute) at the checkpoint's own size and at another size (`--image-size`, the reference using
interpolate_pos_encoding=True); probabilities must be the pipeline's (sigmoid for multi-label or one label, softmax
otherwise), and `--format csv` (another batch size) must carry the same numbers. Each run prints one row: images,
size, max |vitpipe - fp32 reference|, the same relative to max |logit|, max |vitpipe - fp64 reference|, the
references' own fp32-fp64 gap, max |logit|, and the largest logit change one grey level of one pixel causes (at the
checkpoint's size): what a 1e-4 tolerance can see. The `refusals` case checks the error messages of bad inputs.

usage: predict_golden.py --case NAME [--keep DIR]
"""
import argparse
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "io"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "image"))
import hf_vit  # noqa: E402
from hf_reference import save_sharded, write_safetensors  # noqa: E402
from make_references import png_bytes  # noqa: E402  (a PNG writer for what Pillow cannot write: 16-bit RGB)

TOLERANCE = 1e-4  # max |logit difference| against the float32 reference
CHESTXRAY14 = ["Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia",
               "Pneumothorax", "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia"]
FULL_SIZE = os.path.join(SOURCE_DIR, "data", "chestxray14-sample", "full-size")
FIXTURE_IMAGES = os.path.join(SOURCE_DIR, "tests", "fixtures", "images")


# --- checkpoints, written the way transformers writes them -------------------------------------------------------

def config_json(hidden, layers, heads, mlp, image, patch, labels, problem_type=None, qkv_bias=True, eps=1e-12,
                torch_dtype="float32", id2label=True, architectures=("ViTForImageClassification",)):
    """config.json as ViTConfig.save_pretrained writes it (json.dumps(indent=2, sort_keys=True))."""
    j = {"architectures": list(architectures), "attention_probs_dropout_prob": 0.0, "encoder_stride": patch,
         "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": hidden, "image_size": image,
         "initializer_range": 0.02, "intermediate_size": mlp, "layer_norm_eps": eps, "model_type": "vit",
         "num_attention_heads": heads, "num_channels": 3, "num_hidden_layers": layers, "patch_size": patch,
         "qkv_bias": qkv_bias, "torch_dtype": torch_dtype, "transformers_version": "4.45.2"}
    if id2label:
        j["id2label"] = {str(i): name for i, name in enumerate(labels)}
        j["label2id"] = {name: i for i, name in enumerate(labels)}
    if problem_type:
        j["problem_type"] = problem_type
    return j


def state_dict(c, seed, classifier=True, pooler=False, prefix="vit."):
    """A ViTForImageClassification (or ViTModel) state dict in module order, with trained-like scales rather than
    transformers' init (std 0.02 weights, unit LayerNorms, zero biases give near-uniform attention and logits of
    1e-2, which would make a 1e-4 comparison nearly blind): fan-in-scaled weights (query/key larger, so attention is
    peaked), biases ~0.1, LayerNorm weights 1 +- 0.3 and biases ~0.1, position embeddings and CLS ~0.3, a classifier
    giving logits of a few units."""
    g = torch.Generator().manual_seed(seed)
    d, mlp, p = c["hidden_size"], c["intermediate_size"], c["patch_size"]

    def normal(shape, std, mean=0.0):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * std + mean).float()

    s = {}
    s[prefix + "embeddings.cls_token"] = normal((1, 1, d), 0.3)
    grid = c["image_size"] // p
    s[prefix + "embeddings.position_embeddings"] = normal((1, grid * grid + 1, d), 0.3)
    s[prefix + "embeddings.patch_embeddings.projection.weight"] = normal((d, 3, p, p), 1.0 / math.sqrt(3 * p * p))
    s[prefix + "embeddings.patch_embeddings.projection.bias"] = normal((d,), 0.1)
    for layer in range(c["num_hidden_layers"]):
        b = f"{prefix}encoder.layer.{layer}."
        for which, scale in (("query", 2.0), ("key", 2.0), ("value", 1.0)):
            s[b + f"attention.attention.{which}.weight"] = normal((d, d), scale / math.sqrt(d))
            if c["qkv_bias"]:
                s[b + f"attention.attention.{which}.bias"] = normal((d,), 0.1)
        s[b + "attention.output.dense.weight"] = normal((d, d), 1.0 / math.sqrt(d))
        s[b + "attention.output.dense.bias"] = normal((d,), 0.1)
        s[b + "intermediate.dense.weight"] = normal((mlp, d), 1.0 / math.sqrt(d))
        s[b + "intermediate.dense.bias"] = normal((mlp,), 0.1)
        s[b + "output.dense.weight"] = normal((d, mlp), 1.0 / math.sqrt(mlp))
        s[b + "output.dense.bias"] = normal((d,), 0.1)
        for norm in ("layernorm_before", "layernorm_after"):
            s[b + norm + ".weight"] = normal((d,), 0.3, 1.0)
            s[b + norm + ".bias"] = normal((d,), 0.1)
    s[prefix + "layernorm.weight"] = normal((d,), 0.3, 1.0)
    s[prefix + "layernorm.bias"] = normal((d,), 0.1)
    if pooler:
        s[prefix + "pooler.dense.weight"] = normal((d, d), 1.0 / math.sqrt(d))
        s[prefix + "pooler.dense.bias"] = normal((d,), 0.1)
    if classifier:
        n = len(c["id2label"]) if "id2label" in c else 2
        s["classifier.weight"] = normal((n, d), 2.0 / math.sqrt(d))
        s["classifier.bias"] = normal((n,), 0.3)
    return s


def write_model(directory, config, weights, preprocessor, shards=None):
    """A model directory: config.json, preprocessor_config.json, model.safetensors (or `shards` shards + index)."""
    os.makedirs(directory)
    if shards:
        total = sum(t.numel() * t.element_size() for t in weights.values())
        save_sharded(directory, weights, total // shards + 1)
        assert os.path.exists(os.path.join(directory, "model.safetensors.index.json"))
    else:
        write_safetensors(os.path.join(directory, "model.safetensors"), weights, {"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if preprocessor is not None:
        with open(os.path.join(directory, "preprocessor_config.json"), "w") as f:
            f.write(json.dumps(preprocessor, indent=2, sort_keys=True) + "\n")
    return directory


def preprocessor_json(size, resample=2, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), old_form=False):
    if old_form:  # transformers < 4.26 (ViTFeatureExtractor): "size" is an int
        return {"do_normalize": True, "do_resize": True, "feature_extractor_type": "ViTFeatureExtractor",
                "image_mean": list(mean), "image_std": list(std), "resample": resample, "size": size}
    return {"do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": list(mean),
            "image_processor_type": "ViTImageProcessor", "image_std": list(std), "resample": resample,
            "rescale_factor": 1 / 255, "size": {"height": size, "width": size}}


# --- images ---------------------------------------------------------------------------------------------------------

def make_images(directory):
    """Pillow-made images of every kind `predict` meets, then the real full-size radiographs."""
    os.makedirs(directory)
    rng = np.random.default_rng(7)

    def texture(h, w, c):
        y, x = np.mgrid[0:h, 0:w]
        base = 128 + 90 * np.sin(x / (3.0 + w / 40)) * np.cos(y / (2.0 + h / 50))
        a = base[:, :, None] + rng.normal(0, 25, (h, w, c))
        return np.clip(a, 0, 255).astype(np.uint8)

    paths = []

    def save(name, image, **kw):
        path = os.path.join(directory, name)
        image.save(path, **kw)
        paths.append(path)

    save("gray_300x217.png", Image.fromarray(texture(217, 300, 1)[:, :, 0], "L"))
    save("rgb_217x300.png", Image.fromarray(texture(300, 217, 3), "RGB"))
    rgba = np.concatenate([texture(130, 150, 3), rng.integers(0, 256, (130, 150, 1), dtype=np.uint8)], axis=2)
    save("rgba_150x130.png", Image.fromarray(rgba, "RGBA"))
    save("photo_123x77.jpg", Image.fromarray(texture(77, 123, 3), "RGB"), quality=90)
    save("gray_99x101.jpg", Image.fromarray(texture(101, 99, 1)[:, :, 0], "L"), quality=85)
    gray16 = np.clip(texture(140, 180, 1)[:, :, 0].astype(np.int32) * 3 - 100, 0, 700).astype(np.uint16)
    save("gray16_180x140.png", Image.fromarray(gray16, "I;16"))  # Pillow's convert("RGB") clips to 0..255
    rgb16 = (texture(90, 70, 3).astype(np.uint16) << 8) | rng.integers(0, 256, (90, 70, 3), dtype=np.uint16)
    path = os.path.join(directory, "rgb16_70x90.png")
    with open(path, "wb") as f:
        f.write(png_bytes(rgb16, 16, 2))
    paths.append(path)
    palette = Image.fromarray(texture(48, 64, 3), "RGB").quantize(colors=37)
    save("palette_64x48.png", palette)
    save("tiny_5x3.png", Image.fromarray(texture(3, 5, 3), "RGB"))
    for name in ("00000001_000.png", "00000004_000.png"):  # 64x64 RGB and RGBA X-ray thumbnails
        paths.append(os.path.join(FIXTURE_IMAGES, name))
    for name in sorted(os.listdir(FULL_SIZE)):  # 1024x1024 8-bit gray radiographs
        if name.endswith(".png"):
            paths.append(os.path.join(FULL_SIZE, name))
    return paths


# --- running both sides -----------------------------------------------------------------------------------------------

def vitpipe(*args):
    return subprocess.run([os.environ["VITPIPE"], *map(str, args)], capture_output=True, text=True)


def predict(model, images, *options, fmt="json"):
    # transformers' processor gets Pillow's pixels, which clip 16-bit gray: --intensity pillow (vitpipe's default
    # scales such images over their full range instead).
    result = vitpipe("predict", "--model", model, "--format", fmt, "--threads", "2", "--intensity", "pillow",
                     *options, *images)
    if result.returncode != 0:
        sys.exit(f"vitpipe predict {' '.join(map(str, options))} failed:\n{result.stderr}")
    return result.stdout


class Reference:
    """transformers on one model directory: float32 (what from_pretrained gives) and float64."""

    def __init__(self, directory):
        self.model32, self.config = hf_vit.load_pretrained(directory, torch.float32)
        self.model64, _ = hf_vit.load_pretrained(directory, torch.float64)
        self.processor = hf_vit.ImageProcessor.from_file(os.path.join(directory, "preprocessor_config.json"))

    def pixel_values(self, paths, size=None):
        override = {"height": size, "width": size} if size else None
        return torch.from_numpy(np.stack([self.processor.preprocess(hf_vit.load_image(p), override) for p in paths]))

    def logits(self, pixels, interpolate):
        return (self.model32(pixels, interpolate_pos_encoding=interpolate),
                self.model64(pixels, interpolate_pos_encoding=interpolate))

    def one_level_sensitivity(self, pixels, interpolate):
        """Max logit change when one pixel of one channel moves by one grey level (after resizing): the smallest
        preprocessing error there is. If it exceeds the tolerance, the comparison sees such errors. (The largest
        change over nine pixel positions of the first image.)"""
        step = self.processor.rescale_factor / self.processor.image_std[1]
        h, w = pixels.shape[2], pixels.shape[3]
        positions = [(h * i // 3 + 1, w * j // 3 + 2) for i in range(3) for j in range(3)]
        bumped = pixels[:1].double().repeat(len(positions), 1, 1, 1)
        for k, (y, x) in enumerate(positions):
            bumped[k, 1, y, x] += step
        base = self.model64(pixels[:1].double(), interpolate_pos_encoding=interpolate)
        return (self.model64(bumped, interpolate_pos_encoding=interpolate) - base).abs().max().item()


class Checks:
    def __init__(self):
        self.failures = []
        self.count = 0

    def check(self, condition, message):
        self.count += 1
        if not condition:
            self.failures.append(message)
            print("FAIL:", message)


def compare(checks, name, directory, reference, images, image_size=None):
    """One `vitpipe predict` run (json, then csv with another batch size) against the reference."""
    native = reference.config_json["image_size"]
    size = image_size or native
    options = ["--image-size", image_size] if image_size else []
    lines = predict(directory, images, *options).splitlines()
    checks.check(len(lines) == len(images), f"{name}: {len(lines)} json lines for {len(images)} images")
    records = [json.loads(line) for line in lines]
    checks.check([r["image"] for r in records] == images, f"{name}: images out of order")
    ours = torch.tensor([r["logits"] for r in records], dtype=torch.float64)
    pixels = reference.pixel_values(images, size if image_size else None)
    checks.check(tuple(pixels.shape[2:]) == (size, size), f"{name}: reference pixels {tuple(pixels.shape)}")
    ref32, ref64 = reference.logits(pixels, interpolate=image_size is not None)
    config = reference.config
    labels = [config.id2label[i] for i in range(config.num_labels)]
    checks.check(ours.shape == ref32.shape, f"{name}: logits shape {tuple(ours.shape)} vs {tuple(ref32.shape)}")
    if ours.shape != ref32.shape:
        return
    diff32 = (ours - ref32.double()).abs()
    diff64 = (ours - ref64).abs()
    ref_noise = (ref32.double() - ref64).abs().max().item()
    scale = ref64.abs().max().item()
    worst = diff32.max().item()
    worst_image = os.path.basename(images[int(diff32.max(dim=1).values.argmax())])
    sensitivity = f"{reference.one_level_sensitivity(pixels, False):10.2e}" if image_size is None else f"{'-':>10}"
    checks.check(worst <= TOLERANCE, f"{name}: max |vitpipe - transformers fp32| = {worst:.3g} > {TOLERANCE:g} "
                                     f"(at {worst_image})")
    row = (f"{name:<44} {len(images):>3} {size:>4} {worst:10.2e} {worst / scale:10.2e} {diff64.max().item():10.2e} "
           f"{ref_noise:10.2e} {scale:8.3f} {sensitivity}")
    print(row)

    # Probabilities: the pipeline's function of the logits (checked on vitpipe's own logits, then against the
    # reference's probabilities).
    multi = config.problem_type == "multi_label_classification" or config.num_labels == 1
    ours_p = torch.tensor([[r["probabilities"][label] for label in labels] for r in records], dtype=torch.float64)
    checks.check(all(len(r["probabilities"]) == len(labels) for r in records), f"{name}: probability labels")
    own = hf_vit.pipeline_scores(ours, config)
    checks.check((ours_p - own).abs().max().item() <= 1e-12,
                 f"{name}: probabilities are not the pipeline's {'sigmoid' if multi else 'softmax'} of the logits "
                 f"(max diff {(ours_p - own).abs().max().item():.3g})")
    ref_p = hf_vit.pipeline_scores(ref64, config)
    checks.check((ours_p - ref_p).abs().max().item() <= TOLERANCE,
                 f"{name}: probabilities differ from the reference by {(ours_p - ref_p).abs().max().item():.3g}")

    # CSV, through a different batching (--batch-size 3: two full batches and a remainder).
    text = predict(directory, images, *options, "--batch-size", "3", fmt="csv")
    rows = list(csv.reader(io.StringIO(text)))
    checks.check(rows and rows[0] == ["image"] + labels, f"{name}: csv header {rows[0] if rows else None}")
    checks.check(len(rows) == len(images) + 1 and [r[0] for r in rows[1:]] == images, f"{name}: csv rows")
    if len(rows) == len(images) + 1:
        values = torch.tensor([[float(v) for v in r[1:]] for r in rows[1:]], dtype=torch.float64)
        # %.6g: 6 significant digits; batching may move float32 logits a few ulps.
        bad = (values - ref_p).abs() > 1e-5 * ref_p.abs() + TOLERANCE
        checks.check(not bad.any().item(), f"{name}: csv probabilities differ from the reference: "
                                           f"{(values - ref_p).abs().max().item():.3g}")


# --- cases ----------------------------------------------------------------------------------------------------------

def case_model(root, wanted):
    """Writes case `wanted`'s model; returns (model directory, [image sizes other than the checkpoint's to run at])."""
    models = {}

    def add(name, config, make_weights, preprocessor, sizes, shards=None):
        if name == wanted:
            models[name] = (write_model(os.path.join(root, name), config, make_weights(config), preprocessor, shards),
                            sizes)

    # ChestX-ray14-style: patch 16, 14 findings, multi-label, modern preprocessor; 64 -> 96 and 64 -> 32.
    c = config_json(64, 2, 4, 128, 64, 16, CHESTXRAY14, "multi_label_classification")
    add("chestxray14-p16", c, lambda c: state_dict(c, 1), preprocessor_json(64), [96, 32])
    # Patch 8, no q/k/v biases, 3 labels single-label, old "size": 32 form with ImageNet statistics; 32 -> 48.
    c = config_json(48, 3, 3, 96, 32, 8, ["normal", "benign", "malignant"], "single_label_classification",
                    qkv_bias=False)
    add("p8-no-qkv-bias-old-size", c, lambda c: state_dict(c, 2),
        preprocessor_json(32, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), old_form=True), [48])
    # Bicubic resize (resample 3), one label, no problem_type (pipeline: sigmoid), eps 1e-6, legacy gamma/beta names.
    c = config_json(32, 1, 2, 64, 48, 16, ["Effusion"], None, eps=1e-6)
    legacy = {"layernorm_before.weight": "layernorm_before.gamma", "vit.layernorm.bias": "vit.layernorm.beta"}
    add("bicubic-one-label-legacy-names", c,
        lambda c: {next((k.replace(a, b) for a, b in legacy.items() if a in k), k): v
                   for k, v in state_dict(c, 3).items()},
        preprocessor_json(48, resample=3), [80])
    # Sharded (index + 2 shards), 2 labels, no problem_type (pipeline: softmax).
    c = config_json(48, 2, 4, 96, 32, 8, ["negative", "positive"], None)
    add("sharded-two-labels", c, lambda c: state_dict(c, 4), preprocessor_json(32), [40], shards=2)
    # F16 weights (torch_dtype float16): from_pretrained upcasts them to float32, as vitpipe does.
    c = config_json(64, 2, 2, 160, 32, 16, CHESTXRAY14[:3], "multi_label_classification", torch_dtype="float16")
    add("f16-weights", c, lambda c: {k: v.half() for k, v in state_dict(c, 5).items()}, preprocessor_json(32), [64])
    # problem_type single-label with one label: the pipeline still applies sigmoid (num_labels == 1).
    c = config_json(32, 1, 2, 64, 32, 16, ["Mass"], "single_label_classification")
    add("single-label-problem-one-label", c, lambda c: state_dict(c, 6), preprocessor_json(32), [])
    # ViT-Tiny's shape (192 wide, 12 layers, 224, patch 16): rounding grows with depth and width; 224 -> 160.
    c = config_json(192, 12, 3, 768, 224, 16, CHESTXRAY14, "multi_label_classification")
    add("vit-tiny-224", c, lambda c: state_dict(c, 8), preprocessor_json(224), [160])
    # do_resize false: images go in at their own size, which must be the model's (64x64 X-ray thumbnails).
    c = config_json(48, 2, 3, 96, 64, 16, CHESTXRAY14, "multi_label_classification")
    add("no-resize-native-images", c, lambda c: state_dict(c, 7), dict(preprocessor_json(64), do_resize=False), [])
    return models[wanted]


CASES = ["chestxray14-p16", "p8-no-qkv-bias-old-size", "bicubic-one-label-legacy-names", "sharded-two-labels",
         "f16-weights", "single-label-problem-one-label", "no-resize-native-images", "vit-tiny-224",
         "refusals"]
HEADER = (f"{'case (image size)':<44} {'img':>3} {'size':>4} {'|d| fp32':>10} {'rel':>10} {'|d| fp64':>10} "
          f"{'fp32-fp64':>10} {'max|z|':>8} {'1-level':>10}")


def run_case(name, root, checks):
    images = make_images(os.path.join(root, "images"))
    if name == "no-resize-native-images":
        images = [os.path.join(FIXTURE_IMAGES, n) for n in sorted(os.listdir(FIXTURE_IMAGES))
                  if Image.open(os.path.join(FIXTURE_IMAGES, n)).size == (64, 64)]
    elif name == "vit-tiny-224":  # the three radiographs and a JPEG (time)
        images = images[-3:] + [p for p in images if os.path.basename(p) == "photo_123x77.jpg"]
    directory, sizes = case_model(root, name)
    reference = Reference(directory)
    with open(os.path.join(directory, "config.json")) as f:
        reference.config_json = json.load(f)
    print(HEADER)
    native = reference.config_json["image_size"]
    compare(checks, f"{name} ({native})", directory, reference, images)
    for size in sizes:
        compare(checks, f"{name} ({native} -> {size})", directory, reference, images, image_size=size)


def run_refusals(root, checks):
    """predict refuses, with exit status 1 and a message that names the culprit."""
    images = make_images(os.path.join(root, "images"))
    good_image = images[0]

    def refused(what, result, *needles):
        lines = result.stderr.strip().splitlines()
        text = lines[-1] if lines else ""  # info lines may come first
        ok = result.returncode == 1 and text.startswith("error: ") and all(n in text for n in needles)
        checks.check(ok, f"{what}: expected exit 1 and an error naming {needles}; got {result.returncode}: "
                         f"{text.strip()}")
        print(f"refused ({what}): {text.strip()}")

    # Labels missing: no id2label/num_labels means transformers' default of 2 labels, but the classifier has 3.
    c = config_json(32, 1, 2, 64, 32, 16, ["a", "b", "c"], "multi_label_classification")
    weights = state_dict(c, 11)
    no_labels = dict(c)
    del no_labels["id2label"], no_labels["label2id"]
    d = write_model(os.path.join(root, "no-labels"), no_labels, weights, preprocessor_json(32))
    refused("labels missing", vitpipe("predict", "--model", d, good_image), "classifier.weight", "[3, 32]",
            "[2, 32]", "id2label")

    # A ViTModel backbone (no "vit." prefix, a pooler, no classifier).
    b = config_json(32, 1, 2, 64, 32, 16, [], None, id2label=False, architectures=("ViTModel",))
    d = write_model(os.path.join(root, "backbone"), b, state_dict(b, 12, classifier=False, pooler=True, prefix=""),
                    preprocessor_json(32))
    refused("backbone", vitpipe("predict", "--model", d, good_image), "has no classifier")

    # config.json's hidden_size disagrees with the weights (heads divide both sizes).
    wrong = dict(c, hidden_size=48)
    d = write_model(os.path.join(root, "wrong-hidden"), wrong, weights, preprocessor_json(32))
    refused("hidden_size disagrees", vitpipe("predict", "--model", d, good_image), "config.json", "has shape",
            "[1, 1, 32]", "implies [1, 1, 48]")

    good = write_model(os.path.join(root, "good"), c, weights, preprocessor_json(32))
    # Corrupt image files: a truncated PNG, a text file, a missing file; each named in the message.
    truncated = os.path.join(root, "truncated.png")
    with open(images[1], "rb") as f:
        data = f.read()
    with open(truncated, "wb") as f:
        f.write(data[:len(data) // 2])
    text_file = os.path.join(root, "notes.jpg")
    with open(text_file, "w") as f:
        f.write("not an image\n")
    missing = os.path.join(root, "missing.png")
    for what, path in (("truncated PNG", truncated), ("not an image", text_file), ("missing file", missing)):
        refused(what, vitpipe("predict", "--model", good, good_image, path), path)
    # Without do_resize, an image of another size than the model's (this overflowed the input buffer before).
    no_resize = write_model(os.path.join(root, "no-resize"), c, weights, dict(preprocessor_json(32), do_resize=False))
    refused("do_resize false, 300x217 image", vitpipe("predict", "--model", no_resize, images[0]), images[0],
            "300x217", "do_resize false", "32x32")
    # An image size the patch does not divide.
    refused("image size 40 with patch 16", vitpipe("predict", "--model", good, "--image-size", "40", good_image),
            "40", "16")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=CASES)
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    torch.set_num_threads(2)
    root = a.keep or tempfile.mkdtemp(prefix="vitpipe_predict_")
    if a.keep and os.path.exists(root):
        shutil.rmtree(root)
    checks = Checks()
    try:
        if a.case == "refusals":
            run_refusals(root, checks)
        else:
            run_case(a.case, root, checks)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{checks.count - len(checks.failures)}/{checks.count} checks passed")
    sys.exit(1 if checks.failures or checks.count == 0 else 0)


if __name__ == "__main__":
    main()
