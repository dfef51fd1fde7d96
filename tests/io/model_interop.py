"""Model directories between vitpipe and a PyTorch model built with Hugging Face's ViT module structure and names:
checkpoints written by an independent Python writer (ViTForImageClassification, a ViTModel backbone in bf16, sharded)
are loaded by vitpipe tensor for tensor; vitpipe's saved directories (its shard cuts included) and `vitpipe init`
output are read back by the Python side and fit the torch model with load_state_dict(strict=True)."""

import json
import os

import torch

from hf_reference import (Cfg, Checks, ViTForImageClassification, ViTModel, config_json, hf_interpolate_pos_encoding,
                          probe, randomize, read_safetensors, read_sharded, save_sharded, split_into_shards, temp_dir,
                          vitpipe, write_safetensors)

checks = Checks()
root = temp_dir()
cfg = Cfg()
labels = ["cat", "dog", "eel", "fox", "gnu"]


def model_dir(name, state_dict, config_text, preprocessor=None, max_shard_size=None):
    d = os.path.join(root, name)
    os.makedirs(d)
    if max_shard_size:
        save_sharded(d, state_dict, max_shard_size)
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), state_dict, {"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(config_text)
    if preprocessor is not None:
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(preprocessor, f)
    return d


def load(d, *options):
    out = d + "_out"
    summary = json.loads(probe("load", d, out, *options).stdout)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(out, "preprocessor_config.json")) as f:
        preprocessor = json.load(f)
    return summary, read_sharded(out), config, preprocessor, out


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def fits_hf_structure(tensors, c, what):
    """The saved tensors are exactly a ViTForImageClassification's state dict: strict load succeeds."""
    model = ViTForImageClassification(c)
    try:
        model.load_state_dict(tensors, strict=True)
        checks.check(True, what)
    except RuntimeError as e:
        checks.check(False, f"{what}: load_state_dict(strict=True): {e}")
    return model


# 1. A ViTForImageClassification checkpoint: loaded tensor for tensor, saved back identical.
torch.manual_seed(0)
classifier = randomize(ViTForImageClassification(cfg), 1)
state = classifier.state_dict()
d = model_dir("classifier", state, config_json(cfg, labels, problem_type="single_label_classification",
                                               _name_or_path="someone/vit-test"),
              preprocessor={"size": 32, "image_mean": [0.485, 0.456, 0.406], "feature_extractor_type":
                            "ViTFeatureExtractor", "resample": 3})
summary, tensors, config, preprocessor, _ = load(d)
checks.check(not summary["fresh_head"], "classifier: no fresh head")
checks.check(set(tensors) == set(state), f"classifier: names {sorted(set(tensors) ^ set(state))}")
for name, t in state.items():
    checks.check(name in tensors and same(tensors[name], t), f"classifier: {name} differs")
checks.check(config["id2label"] == {str(i): n for i, n in enumerate(labels)}, f"id2label {config['id2label']}")
checks.check(config["label2id"] == {n: i for i, n in enumerate(labels)}, "label2id")
checks.check(config["problem_type"] == "single_label_classification", f"problem_type {config['problem_type']}")
checks.check(config["architectures"] == ["ViTForImageClassification"] and config["model_type"] == "vit",
             "architectures / model_type")
checks.check(config["_name_or_path"] == "someone/vit-test", "unknown config keys are kept")
for key in ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "image_size",
            "patch_size", "num_channels", "qkv_bias"]:
    checks.check(config[key] == getattr(cfg, key), f"config {key}: {config[key]}")
checks.check(config["torch_dtype"] == "float32" and config["hidden_dropout_prob"] == 0.0 and
             config["encoder_stride"] == cfg.patch_size, "torch_dtype / dropout / encoder_stride")
checks.check(preprocessor["size"] == {"height": 32, "width": 32} and preprocessor["resample"] == 3 and
             preprocessor["image_mean"] == [0.485, 0.456, 0.406] and
             preprocessor["image_processor_type"] == "ViTImageProcessor", f"preprocessor {preprocessor}")
fits_hf_structure(tensors, Cfg.from_config_json(os.path.join(d + "_out", "config.json")), "classifier round trip")

# 2. A ViTModel backbone in bf16, with a pooler and no labels: fresh head for new labels.
backbone = randomize(ViTModel(cfg), 2).to(torch.bfloat16)
state = backbone.state_dict()
d = model_dir("backbone", state, config_json(cfg, None, architectures=["ViTModel"]))
result = probe("load", d, d + "_refused", expect_ok=False)
checks.check(result.returncode == 1 and "has no classifier (a ViTModel backbone)" in result.stderr,
             f"backbone without --allow-fresh-head: {result.stderr.strip()}")
summary, tensors, config, preprocessor, _ = load(d, "--labels", "a,b,c", "--allow-fresh-head", "--seed", "5")
checks.check(summary["fresh_head"] and summary["labels"] == ["a", "b", "c"], f"backbone summary {summary}")
checks.check(config["problem_type"] == "multi_label_classification", "backbone + fresh head: multi-label")
for name, t in state.items():
    if name.startswith("pooler."):
        checks.check(not any("pooler" in k for k in tensors), "pooler dropped")
        continue
    got = tensors.get("vit." + name)
    checks.check(got is not None and same(got, t.float()), f"backbone: vit.{name} != bf16 value in fp32")
w, b = tensors["classifier.weight"], tensors["classifier.bias"]
checks.check(w.shape == (3, cfg.hidden_size) and torch.count_nonzero(b) == 0, "fresh classifier shape, zero bias")
checks.check(0.012 < w.std().item() < 0.028 and w.abs().max().item() < 0.2, f"fresh classifier std {w.std()}")
checks.check(preprocessor["size"] == {"height": 32, "width": 32} and preprocessor["image_std"] == [0.5, 0.5, 0.5],
             "no preprocessor_config.json: ViTImageProcessor defaults at the model's size")
fits_hf_structure(tensors, Cfg(num_labels=3), "backbone + fresh head")

# 3. A sharded checkpoint (save_pretrained(max_shard_size=...)) loads; vitpipe's own shards are cut the same way.
state = randomize(ViTForImageClassification(cfg), 3).state_dict()
d = model_dir("sharded", state, config_json(cfg, labels), max_shard_size=20000)
checks.check(os.path.exists(os.path.join(d, "model.safetensors.index.json")), "python wrote shards")
summary, tensors, config, _, out = load(d, "--max-shard-bytes", "20000")
checks.check(summary["weights_file"] == "model.safetensors.index.json", "loaded through the index")
for name, t in state.items():
    checks.check(name in tensors and same(tensors[name], t), f"sharded: {name} differs")
with open(os.path.join(d, "model.safetensors.index.json")) as f:
    python_index = json.load(f)
with open(os.path.join(out, "model.safetensors.index.json")) as f:
    vitpipe_index = json.load(f)
expected_files, total = split_into_shards(state, 20000)
checks.check(vitpipe_index == python_index, "vitpipe's index equals save_pretrained's for the same state dict")
checks.check(sorted(f for f in os.listdir(out) if f.endswith(".safetensors")) == sorted(expected_files),
             f"shard files {sorted(os.listdir(out))}")
checks.check(vitpipe_index["metadata"]["total_size"] == total, "total_size")
for file in expected_files:
    _, metadata, _, _ = read_safetensors(os.path.join(out, file))
    checks.check(metadata == {"format": "pt"}, f"{file} metadata {metadata}")

# 4. Another image size: position embeddings resized like transformers >= 4.45 interpolate_pos_encoding.
state = randomize(ViTForImageClassification(cfg), 4).state_dict()
d = model_dir("resize", state, config_json(cfg, labels))
for size in (48, 16):
    summary, tensors, config, preprocessor, _ = load(d, "--image-size", size)
    side = size // cfg.patch_size
    pos = state["vit.embeddings.position_embeddings"]
    exact = hf_interpolate_pos_encoding(pos.double(), side, side)
    fp32 = hf_interpolate_pos_encoding(pos, side, side)
    got = tensors["vit.embeddings.position_embeddings"]
    checks.check(got.shape == (1, side * side + 1, cfg.hidden_size), f"resized shape {tuple(got.shape)}")
    if got.shape == fp32.shape:
        d64 = (got.double() - exact).abs().max().item()
        d32 = (got - fp32).abs().max().item() / pos.abs().max().item()
        checks.check(d64 <= 1e-6, f"image {size}: |vitpipe - transformers (float64)| {d64}")
        checks.check(d32 <= 4e-6, f"image {size}: |vitpipe - transformers (float32)| / max|pos| {d32}")
        checks.check(same(got[:, :1], pos[:, :1]), "CLS position kept")
    checks.check(config["image_size"] == size and preprocessor["size"] == {"height": size, "width": size},
                 f"image {size}: config / preprocessor follow")
    for name, t in state.items():
        if name != "vit.embeddings.position_embeddings":
            checks.check(same(tensors[name], t), f"image {size}: {name} changed")

# 5. `vitpipe init` writes what the Hugging Face structure loads, with transformers' initialisation statistics.
out = os.path.join(root, "init")
vitpipe("init", "--preset", "vit-mini", "--seed", "3", "--out", out)
with open(os.path.join(out, "config.json")) as f:
    config = json.load(f)
with open(os.path.join(out, "preprocessor_config.json")) as f:
    preprocessor = json.load(f)
tensors, metadata, _, _ = read_safetensors(os.path.join(out, "model.safetensors"))
checks.check(metadata == {"format": "pt"}, "init: metadata")
checks.check(config["problem_type"] == "multi_label_classification" and len(config["id2label"]) == 14 and
             config["id2label"]["0"] == "Atelectasis" and config["id2label"]["13"] == "Pneumothorax",
             "init: 14 ChestX-ray14 findings, multi-label")
checks.check(preprocessor["size"] == {"height": 64, "width": 64} and preprocessor["image_mean"] == [0.5, 0.5, 0.5],
             "init: preprocessor at the preset's size")
fits_hf_structure(tensors, Cfg.from_config_json(os.path.join(out, "config.json")), "init output")
weights = torch.cat([t.flatten() for n, t in tensors.items() if n.endswith(".weight") and t.dim() >= 2])
checks.check(abs(weights.std().item() - 0.02) < 0.0004, f"init: linear/conv weight std {weights.std().item()}")
checks.check(weights.abs().max().item() <= 2.0, "init: truncated at [-2, 2]")
for name, t in tensors.items():
    if "layernorm" in name and name.endswith(".weight"):
        checks.check(torch.all(t == 1).item(), f"init: {name} is not all ones")
    elif name.endswith(".bias"):
        checks.check(torch.count_nonzero(t).item() == 0, f"init: {name} is not zero")
for name in ("vit.embeddings.cls_token", "vit.embeddings.position_embeddings"):
    checks.check(abs(tensors[name].std().item() - 0.02) < 0.004, f"init: {name} std {tensors[name].std().item()}")
again = os.path.join(root, "init_again")
vitpipe("init", "--preset", "vit-mini", "--seed", "3", "--out", again)
with open(os.path.join(out, "model.safetensors"), "rb") as f1, open(os.path.join(again, "model.safetensors"), "rb") as f2:
    checks.check(f1.read() == f2.read(), "init: same seed, same bytes")
result = vitpipe("init", "--preset", "vit-mini", "--image-size", "60", "--out", os.path.join(root, "bad"),
                 expect_ok=False)
checks.check(result.returncode == 1 and "does not divide the image size 60" in result.stderr, "init: bad patch size")

# 6. Broken checkpoints from the Python side are refused with the tensor named.
state = randomize(ViTForImageClassification(cfg), 6).state_dict()
missing = {k: v for k, v in state.items() if k != "vit.encoder.layer.1.intermediate.dense.bias"}
d = model_dir("missing", missing, config_json(cfg, labels))
result = probe("load", d, d + "_out", expect_ok=False)
checks.check(result.returncode == 1 and "missing 1 parameter(s)" in result.stderr and
             "vit.encoder.layer.1.intermediate.dense.bias" in result.stderr, f"missing: {result.stderr.strip()}")
wrong = dict(state)
wrong["vit.embeddings.cls_token"] = torch.zeros(1, 2, cfg.hidden_size)
d = model_dir("wrong_shape", wrong, config_json(cfg, labels))
result = probe("load", d, d + "_out", expect_ok=False)
checks.check(result.returncode == 1 and "tensor 'vit.embeddings.cls_token' has shape [1, 2, 48]" in result.stderr and
             "implies [1, 1, 48]" in result.stderr, f"wrong shape: {result.stderr.strip()}")

checks.done()
