#!/usr/bin/python3
"""Golden test: a peft LoRA adapter directory as `vitpipe predict --model ADAPTER` against peft's unmerged forward.

peft is not installable here, so its LoRA layer is transcribed: each adapted nn.Linear computes
x W^T + b + (x A^T B^T) * scaling (dropout is the identity in eval), scaling = alpha / r, or alpha / sqrt(r) with
use_rslora; which modules are adapted follows check_target_module_exists (tuners_utils.py: a string is a regular
expression that must match the whole module key, list entries match the key or its dotted suffix, then
layers_to_transform / layers_pattern keep the layers they name), and r and alpha per module follow get_pattern_key
(peft >= 0.15: the first key k for which re.match(rf"(.*\\.)?({k})$", module) matches). modules_to_save and
bias "all" tensors replace the base's. The base checkpoint and the adapter are written by Python (the adapter also
as torch.save's adapter_model.bin), never by vitpipe, and the reference runs hf_vit.py (transformers' ViT,
transcribed) in float64. vitpipe merges the adapter into the weights instead: logits must agree to 1e-4.

The `refusals` case checks that what vitpipe cannot compute is refused with one line naming the key.

usage: predict_peft.py --case NAME
"""
import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_vit  # noqa: E402
import predict_golden as golden  # noqa: E402
from hf_reference import write_safetensors  # noqa: E402

TOLERANCE = 1e-4
PREFIX = "base_model.model."


vitpipe = golden.vitpipe


def make_base(root, labels):
    c = golden.config_json(hidden=32, layers=2, heads=2, mlp=64, image=32, patch=8, labels=labels)
    weights = golden.state_dict(c, seed=11)
    return golden.write_model(os.path.join(root, "base"), c, weights, golden.preprocessor_json(32)), c, weights


def make_images(root):
    rng = np.random.default_rng(5)
    paths = []
    for i, (w, h) in enumerate([(40, 40), (57, 33), (32, 32)]):
        path = os.path.join(root, f"image{i}.png")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB").save(path)
        paths.append(path)
    return paths


def linear_modules(weights):
    """Module keys of the nn.Linear layers (2-D weights) of a ViTForImageClassification state dict."""
    return [k[:-len(".weight")] for k, v in weights.items() if k.endswith(".weight") and v.dim() == 2]


def targeted(config, key):
    """peft's check_target_module_exists."""
    targets = config["target_modules"]
    if isinstance(targets, str):
        return re.fullmatch(targets, key) is not None
    if key in targets:
        found = True
    else:
        found = any(key.endswith(f".{t}") for t in targets)
    layers = config.get("layers_to_transform")
    if found and layers is not None and (not isinstance(layers, list) or len(layers) != 0):
        pattern = config.get("layers_pattern")
        if pattern is None or len(pattern) == 0:
            index = re.match(r".*\.[^.]*\.(\d+)\.", key)
        else:
            index = None
            for p in [pattern] if isinstance(pattern, str) else pattern:
                index = re.match(rf".*\.{p}\.(\d+)\.", key)
                if index is not None:
                    break
        if index is None:
            return False
        index = int(index.group(1))
        return index == layers if isinstance(layers, int) else index in layers
    return found


def pattern_key(keys, key):
    """peft's get_pattern_key (>= 0.15)."""
    for k in keys:
        if re.match(rf"(.*\.)?({k})$", key):
            return k
    return key


def make_adapter(directory, config, base_weights, seed, extra=None, as_bin=False):
    """adapter_config.json and the adapter's tensors (random A and B of the ranks peft would create) for every
    module `config` targets; `extra` maps parameter names to tensors saved beside them (modules_to_save, biases).
    Returns {module: (A, B, scaling)} in float64 and the extra tensors."""
    g = torch.Generator().manual_seed(seed)
    os.makedirs(directory)
    lora = {}
    tensors = {}
    for key in linear_modules(base_weights):
        if not targeted(config, key):
            continue
        r = config.get("rank_pattern", {}).get(pattern_key(config.get("rank_pattern", {}).keys(), key), config["r"])
        alpha = config.get("alpha_pattern", {}).get(pattern_key(config.get("alpha_pattern", {}).keys(), key),
                                                    config["lora_alpha"])
        out_features, in_features = base_weights[key + ".weight"].shape
        a = (torch.randn((r, in_features), generator=g, dtype=torch.float64) / math.sqrt(in_features)).float()
        b = (torch.randn((out_features, r), generator=g, dtype=torch.float64) * 0.5).float()
        scaling = alpha / math.sqrt(r) if config.get("use_rslora", False) else alpha / r
        lora[key] = (a.double(), b.double(), scaling)
        tensors[PREFIX + key + ".lora_A.weight"] = a
        tensors[PREFIX + key + ".lora_B.weight"] = b
    for name, t in (extra or {}).items():
        tensors[PREFIX + name] = t
    if as_bin:
        torch.save(tensors, os.path.join(directory, "adapter_model.bin"))
    else:
        write_safetensors(os.path.join(directory, "adapter_model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(directory, "adapter_config.json"), "w") as f:
        f.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return lora


def peft_logits(base_dir, lora, replaced, images, labels=None):
    """The float64 reference: transformers' ViT with peft's LoRA layers (unmerged) and the saved modules."""
    model, config = hf_vit.load_pretrained(base_dir, torch.float64)
    if labels is not None and len(labels) != config.num_labels:
        model.classifier = torch.nn.Linear(config.hidden_size, len(labels)).double()
    state = model.state_dict()
    for name, t in replaced.items():
        state[name] = t.double()
    model.load_state_dict(state, strict=True)
    modules = dict(model.named_modules())
    for key, (a, b, scaling) in lora.items():
        modules[key].register_forward_hook(lambda m, inp, out, a=a, b=b, s=scaling: out + (inp[0] @ a.T @ b.T) * s)
    processor = hf_vit.ImageProcessor.from_file(os.path.join(base_dir, "preprocessor_config.json"))
    pixels = torch.from_numpy(np.stack([processor.preprocess(hf_vit.load_image(p), None) for p in images]))
    return model(pixels.double())


def predicted(model_dir, images, *options):
    result = vitpipe("predict", "--model", model_dir, "--format", "json", "--threads", "2", *options, *images)
    if result.returncode != 0:
        sys.exit(f"vitpipe predict --model {model_dir} failed:\n{result.stderr}")
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return records


def base_config(**overrides):
    c = {"peft_type": "LORA", "task_type": None, "r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "bias": "none",
         "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "modules_to_save": None,
         "layers_to_transform": None, "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {},
         "revision": None, "auto_mapping": None}
    c.update(overrides)
    return c


def run_case(name, root):
    if name == "train-continues":
        return train_continues(root)
    failures = []
    base_labels = ["Effusion", "Nodule"]
    base_dir, base_c, base_w = make_base(root, base_labels)
    images = make_images(root)
    adapter = os.path.join(root, "adapter")
    options = []
    new_labels = None
    g = torch.Generator().manual_seed(99)
    if name == "names-classifier":
        # query/value by name (the usual peft setup), the classifier retrained in modules_to_save.
        config = base_config(target_modules=["query", "value"], modules_to_save=["classifier"],
                             base_model_name_or_path=base_dir, use_rslora=False, use_dora=False)
        replaced = {"classifier.weight": torch.randn((2, 32), generator=g) * 0.4, "classifier.bias": torch.randn(2, generator=g)}
        lora = make_adapter(adapter, config, base_w, 1, replaced)
    elif name == "regex-patterns-rslora":
        # A regular expression over every dense layer and the keys; per-module ranks and alphas; rslora's scaling.
        config = base_config(target_modules=r".*\.(key|dense)", use_rslora=True, base_model_name_or_path=base_dir,
                             rank_pattern={"intermediate.dense": 2, "layer.1.attention.output.dense": 6},
                             alpha_pattern={"key": 3, "output.dense": 5})
        replaced = {}
        lora = make_adapter(adapter, config, base_w, 2)
    elif name == "layers-bias-all-bin":
        # Two layers' worth of targets, only layer 1 transformed; bias "all" saves every bias; a torch.save .bin.
        config = base_config(target_modules=["key", "dense"], layers_to_transform=[1], layers_pattern="layer",
                             bias="all", base_model_name_or_path=base_dir)
        replaced = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in base_w.items() if k.endswith(".bias")}
        lora = make_adapter(adapter, config, base_w, 3, replaced, as_bin=True)
    elif name == "new-labels":
        # A three-label classifier: labels from a config.json beside the adapter, then from --labels.
        new_labels = ["Mass", "Edema", "Hernia"]
        config = base_config(target_modules=["query", "value", "output.dense"], modules_to_save=["classifier"],
                             base_model_name_or_path=base_dir)
        replaced = {"classifier.weight": torch.randn((3, 32), generator=g) * 0.4, "classifier.bias": torch.randn(3, generator=g)}
        lora = make_adapter(adapter, config, base_w, 4, replaced)
        result = vitpipe("predict", "--model", adapter, "--threads", "2", images[0])
        if result.returncode == 0 or "--labels" not in result.stderr:
            failures.append(f"new-labels: an unnamed 3-output classifier must ask for --labels: {result.stderr}")
        options = ["--labels", ",".join(new_labels)]
    else:
        sys.exit(f"unknown case {name}")
    adapted = len(lora)
    reference = peft_logits(base_dir, lora, replaced, images, new_labels)
    for label_source in (["options"] if new_labels is None else ["options", "config.json beside"]):
        opts = options
        if label_source == "config.json beside":
            with open(os.path.join(adapter, "config.json"), "w") as f:
                json.dump({"id2label": {str(i): n for i, n in enumerate(new_labels)}}, f)
            opts = []
        records = predicted(adapter, images, *opts)
        ours = torch.tensor([r["logits"] for r in records], dtype=torch.float64)
        worst = (ours - reference).abs().max().item() if ours.shape == reference.shape else float("inf")
        base_only = torch.tensor([r["logits"] for r in predicted(base_dir, images)], dtype=torch.float64)
        moved = (reference[:, :base_only.shape[1]] - base_only).abs().max().item() if new_labels is None else math.inf
        labels = set(records[0]["probabilities"]) if isinstance(records[0].get("probabilities"), dict) else None
        print(f"{name} ({label_source}): {adapted} adapted layers, max |vitpipe - peft float64| {worst:.2e}, "
              f"the adapter moves the logits by {moved:.2e}")
        if not worst <= TOLERANCE:
            failures.append(f"{name}: logits differ by {worst:.2e} (> {TOLERANCE})")
        if not moved > 100 * TOLERANCE:
            failures.append(f"{name}: the adapter barely changes the logits ({moved:.2e}): the test could not see it")
        if new_labels is not None and labels != set(new_labels):
            failures.append(f"{name}: labels {labels}, expected {new_labels}")
    if name == "names-classifier":
        # `vitpipe export ADAPTER --out DIR` writes the merged model: it predicts what the adapter does.
        merged = os.path.join(root, "merged")
        result = vitpipe("export", adapter, "--out", merged)
        if result.returncode != 0:
            failures.append(f"export of the adapter failed: {result.stderr}")
        else:
            a = torch.tensor([r["logits"] for r in predicted(adapter, images)], dtype=torch.float64)
            m = torch.tensor([r["logits"] for r in predicted(merged, images)], dtype=torch.float64)
            gap = (a - m).abs().max().item()
            print(f"export ADAPTER --out DIR: max |difference| {gap:.2e}")
            if not gap <= 1e-6:
                failures.append(f"export of the adapter: logits differ by {gap:.2e}")
    return failures


def train_continues(root):
    """`vitpipe train --model ADAPTER` continues the adapter: vitpipe's LoRA on its base with the adapter's rank, alpha
    (rslora folded in) and sites, starting from its matrices and classifier. With a learning rate of 1e-30 the run's
    merged export must predict what the adapter does, and its --export-adapter must hold the adapter's matrices."""
    failures = []
    sys.path.insert(0, os.path.join(HERE, "..", "train_e2e"))
    import e2e_common as e2e
    labels = list(e2e.BLOB_LABELS)
    base_dir, _, base_w = make_base(root, labels)
    csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 8, "val": 8}, size=32, seed=4)
    images = make_images(root)
    adapter = os.path.join(root, "adapter")
    g = torch.Generator().manual_seed(5)
    config = base_config(target_modules=["query", "value", "output.dense"], use_rslora=True, r=4, lora_alpha=6,
                         modules_to_save=["classifier"], base_model_name_or_path=base_dir)
    replaced = {"classifier.weight": torch.randn((len(labels), 32), generator=g) * 0.4,
                "classifier.bias": torch.randn(len(labels), generator=g)}
    lora = make_adapter(adapter, config, base_w, 6, replaced)
    out = os.path.join(root, "run")
    result = vitpipe(*e2e.train_args(adapter, "csv:" + csv, out, "--epochs", "1", "--batch-size", "8", "--lr", "1e-30",
                                     "--export-adapter"))
    print(f"train --model ADAPTER: exit {result.returncode}")
    if result.returncode != 0:
        return [f"train --model ADAPTER failed: {result.stderr[-2000:]}"]
    reference = peft_logits(base_dir, lora, replaced, images)
    ours = torch.tensor([r["logits"] for r in predicted(os.path.join(out, "model"), images)], dtype=torch.float64)
    worst = (ours - reference).abs().max().item()
    print(f"train-continues: the run's export against peft's forward of the adapter: max |difference| {worst:.2e}")
    if not worst <= TOLERANCE:
        failures.append(f"train-continues: the continued run's export differs from the adapter by {worst:.2e}")
    written = json.load(open(os.path.join(out, "adapter", "adapter_config.json")))
    print(f"train-continues: the run's adapter: r {written['r']}, lora_alpha {written['lora_alpha']:.4f}, "
          f"targets {written['target_modules']}")
    if written["r"] != 4 or abs(written["lora_alpha"] - 6 * math.sqrt(4)) > 1e-9:
        failures.append(f"train-continues: r / alpha {written['r']} / {written['lora_alpha']}, expected 4 / 12 "
                        "(rslora's alpha / sqrt(r) as alpha' / r)")
    return failures


def refusals(root):
    """Each configuration vitpipe cannot compute: a non-zero exit and one line naming the key."""
    failures = []
    base_dir, base_c, base_w = make_base(root, ["Effusion", "Nodule"])
    images = make_images(root)
    cases = [
        ("use_dora", {"use_dora": True}),
        ("exclude_modules", {"exclude_modules": ["query"]}),
        ("layer_replication", {"layer_replication": [[0, 2]]}),
        ("peft_type", {"peft_type": "IA3"}),
        ("frobnicate", {"frobnicate": 3}),
        ("fc9", {"target_modules": ["query", "fc9"]}),
        ("target_modules", {"target_modules": "query[("}),
        ("rank_pattern", {"rank_pattern": {"query": 2.5}}),
        ("wrong type", {"use_rslora": "yes"}),
    ]
    for i, (expected, change) in enumerate(cases):
        adapter = os.path.join(root, f"bad{i}")
        config = base_config(target_modules=["query"], base_model_name_or_path=base_dir)
        make_adapter(adapter, config, base_w, 10 + i)
        config.update(change)
        with open(os.path.join(adapter, "adapter_config.json"), "w") as f:
            json.dump(config, f)
        result = vitpipe("predict", "--model", adapter, "--threads", "2", images[0])
        lines = [l for l in result.stderr.strip().splitlines() if l]
        errors = [l for l in lines if l.startswith("error")]  # info lines of the base's loading may precede it
        ok = result.returncode != 0 and len(errors) == 1 and expected in errors[0]
        print(f"refused {expected}: exit {result.returncode}: {lines[-1] if lines else ''}")
        if not ok:
            failures.append(f"refusals: {change} gave exit {result.returncode} and {result.stderr!r}")
    # train --model ADAPTER refuses what vitpipe's LoRA cannot continue: DoRA, and per-module ranks.
    result = vitpipe("train", "--model", os.path.join(root, "bad0"), "--data", "csv:" + os.path.join(root, "x.csv"),
                     "--output-dir", os.path.join(root, "run"))
    print(f"train --model ADAPTER with DoRA: exit {result.returncode}: {result.stderr.strip()}")
    if result.returncode == 0 or "use_dora" not in result.stderr:
        failures.append(f"refusals: train --model ADAPTER with use_dora must be refused: {result.stderr}")
    adapter = os.path.join(root, "patterned")
    make_adapter(adapter, base_config(target_modules=["query"], rank_pattern={"layer.1.attention.attention.query": 2},
                                      base_model_name_or_path=base_dir), base_w, 40)
    result = vitpipe("train", "--model", adapter, "--data", "csv:" + os.path.join(root, "x.csv"), "--output-dir",
                     os.path.join(root, "run"))
    print(f"train --model ADAPTER with rank_pattern: exit {result.returncode}: {result.stderr.strip()}")
    if result.returncode == 0 or "rank_pattern" not in result.stderr:
        failures.append(f"refusals: train --model ADAPTER with rank_pattern must be refused: {result.stderr}")
    # A key vitpipe does not know, left at a default-like value, is ignored; so are training-only options.
    adapter = os.path.join(root, "tolerated")
    config = base_config(target_modules=["query"], base_model_name_or_path=base_dir, some_future_key=None,
                         use_rslora=False, use_dora=False, loftq_config={}, megatron_core="megatron.core")
    make_adapter(adapter, config, base_w, 30)
    result = vitpipe("predict", "--model", adapter, "--threads", "2", images[0])
    print(f"tolerated defaults: exit {result.returncode}")
    if result.returncode != 0:
        failures.append(f"refusals: default-valued keys must be accepted: {result.stderr}")
    # LoRA matrices for a module target_modules does not select.
    adapter = os.path.join(root, "stray")
    config = base_config(target_modules=["query", "value"], base_model_name_or_path=base_dir)
    make_adapter(adapter, config, base_w, 31)
    config["target_modules"] = ["query"]
    with open(os.path.join(adapter, "adapter_config.json"), "w") as f:
        json.dump(config, f)
    result = vitpipe("predict", "--model", adapter, "--threads", "2", images[0])
    print(f"stray value matrices: exit {result.returncode}: {result.stderr.strip()}")
    if result.returncode == 0 or "do not select" not in result.stderr:
        failures.append(f"refusals: stray LoRA matrices must be refused: {result.stderr}")
    return failures


def run_main(prefix, run_case, refusals):
    """--case NAME: `refusals`, or run_case(NAME, root) in a temporary root; exits 1 if a check failed. (Shared
    with tests/onnx/onnx_export.py.)"""
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    root = tempfile.mkdtemp(prefix=prefix)
    try:
        failures = refusals(root) if args.case == "refusals" else run_case(args.case, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    run_main("vitpipe-peft-", run_case, refusals)
