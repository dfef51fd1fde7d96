"""`vitpipe train --freeze backbone / --freeze-layers N / --lora R` end to end on a DINOv2 (dinov2-micro: a 6 x 6
position grid fed 4 x 4 by its BitImageProcessor, shortest edge 32 -> crop 28, as facebook/dinov2-base's 37 x 37 is
fed 16 x 16):
- the frozen weights of the exported model are bit-identical to the initial ones (mask_token too, in every mode);
- checkpoints hold only what trains: trainable.safetensors and an optimizer state of exactly the trainable elements
  (full fine-tuning: a whole model directory, as before);
- resume: 2 steps + --resume to 4 = 4 steps straight, bit for bit, in every mode;
- pipeline stages (threads) and data parallelism (mpirun, 2 replicas) give the single process's weights (1e-4, SGD);
- LoRA: the merged export is W + (alpha / r) B A of the checkpoint's A, B (to fp32 rounding); --export-adapter and
  `vitpipe export --adapter` write peft's layout (key names, adapter_config.json keys) with those same values;
- the export has exactly Dinov2ForImageClassification's state-dict keys (no missing, no unexpected);
- `data prepare --model` records the processor; a cache prepared otherwise is refused with one line;
- bad flag combinations are refused with one line.

usage: train_modes.py [--mpiexec MPIRUN]"""

import argparse
import json
import os
import subprocess

import numpy as np

import e2e_common as e2e

ap = argparse.ArgumentParser()
ap.add_argument("--mpiexec")
args = ap.parse_args()
checks = e2e.Checks()
root = e2e.temp_dir("modes")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 48, "val": 16}, seed=3)
data = "csv:" + csv
init = os.path.join(root, "init")
e2e.run("init", "--preset", "dinov2-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "4", "--out", init)
initial = e2e.read_safetensors(os.path.join(init, "model.safetensors"))[0]
P = "dinov2."
LAYERS = 2
COMMON = ["--batch-size", "16", "--micro-batch-size", "4", "--lr", "3e-3", "--schedule", "constant",
          "--warmup-steps", "0", "--checkpoint-every", "2", "--log-every", "1", "--export-last", "--no-augment"]
MODES = {
    "full": [],
    "backbone": ["--freeze", "backbone"],
    "layers1": ["--freeze-layers", "1"],
    "lora": ["--lora", "4", "--lora-alpha", "8", "--lora-targets", "query,value,fc2", "--export-adapter"],
}
TARGETS = ["attention.attention.query", "attention.attention.value", "mlp.fc2"]


def trains(name, mode):
    """What each mode trains (the run's own description, restated)."""
    head = name.startswith("classifier.")
    if name == P + "embeddings.mask_token":
        return False
    if mode == "full":
        return True
    if mode == "backbone":
        return head
    if mode == "layers1":
        return name.startswith(P + "encoder.layer.1.") or name.startswith(P + "layernorm.") or head
    if mode == "lora":
        return head or any(name == f"{P}encoder.layer.{l}.{t}.weight" for l in range(LAYERS) for t in TARGETS)
    raise ValueError(mode)


def train(out, mode, *extra):
    return e2e.run(*e2e.train_args(init, data, out, *COMMON, *MODES[mode], *extra))


def model(out):
    return e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))[0]


def latest_checkpoint(out):
    return os.path.join(out, "checkpoints", open(os.path.join(out, "checkpoints", "latest")).read().strip())


def expected_keys(config):
    """Dinov2ForImageClassification.state_dict() keys (modeling_dinov2.py): embeddings (cls_token, mask_token,
    position_embeddings, patch projection), per layer norm1, attention q/k/v + output.dense, layer_scale1, norm2,
    mlp.fc1/fc2, layer_scale2; layernorm; classifier."""
    keys = {P + "embeddings." + n for n in ("cls_token", "mask_token", "position_embeddings",
                                             "patch_embeddings.projection.weight", "patch_embeddings.projection.bias")}
    for layer in range(config["num_hidden_layers"]):
        b = f"{P}encoder.layer.{layer}."
        for module in ("norm1", "attention.attention.query", "attention.attention.key", "attention.attention.value",
                       "attention.output.dense", "norm2", "mlp.fc1", "mlp.fc2"):
            keys |= {b + module + ".weight", b + module + ".bias"}
        keys |= {b + "layer_scale1.lambda1", b + "layer_scale2.lambda1"}
    return keys | {P + "layernorm.weight", P + "layernorm.bias", "classifier.weight", "classifier.bias"}


results = {}
for mode in MODES:
    out = os.path.join(root, mode)
    train(out, mode, "--max-steps", "4")
    final = model(out)
    results[mode] = final
    config = json.load(open(os.path.join(out, "model", "config.json")))
    checks.check(set(final) == expected_keys(config), f"{mode}: the export has exactly Dinov2ForImageClassification's "
                 f"keys", str(sorted(set(final) ^ expected_keys(config))[:4]))
    frozen_same = [n for n in initial if not trains(n, mode) and n in final
                   and final[n].tobytes() == initial[n].tobytes()]
    frozen = [n for n in initial if not trains(n, mode)]
    checks.check(frozen_same == frozen, f"{mode}: {len(frozen)} frozen tensors bit-identical after 4 steps",
                 str(sorted(set(frozen) - set(frozen_same))[:3]))
    # The key bias has an exactly zero gradient (softmax ignores a per-row constant): it trains and stays.
    key_bias = [n for n in initial if trains(n, mode) and n.endswith("attention.attention.key.bias")]
    checks.check(all(final[n].tobytes() == initial[n].tobytes() for n in key_bias),
                 f"{mode}: the key biases ({len(key_bias)}) stay, their gradient being exactly zero")
    moved = [n for n in initial if trains(n, mode) and final[n].tobytes() != initial[n].tobytes()]
    checks.check(len(moved) == sum(trains(n, mode) for n in initial) - len(key_bias),
                 f"{mode}: every other trained tensor moved", f"{len(moved)} moved")
    ckpt = latest_checkpoint(out)
    optimizer, _ = e2e.read_safetensors(os.path.join(ckpt, "optimizer.safetensors"))
    if mode == "full":
        checks.check(os.path.exists(os.path.join(ckpt, "model.safetensors")), "full: the checkpoint is a model dir")
        trainable_elements = sum(v.size for n, v in initial.items() if trains(n, mode))
    else:
        held, meta = e2e.read_safetensors(os.path.join(ckpt, "trainable.safetensors"))
        checks.check(not os.path.exists(os.path.join(ckpt, "model.safetensors")), f"{mode}: no whole model kept")
        trainable_elements = sum(v.size for v in held.values())
        expect = {n for n in initial if trains(n, mode) and (mode != "lora" or n.startswith("classifier."))}
        if mode == "lora":
            expect |= {f"{P}encoder.layer.{l}.{t}.lora_{ab}.weight" for l in range(LAYERS) for t in TARGETS
                       for ab in "AB"}
        checks.check(set(held) == expect, f"{mode}: the checkpoint holds exactly what trains ({len(held)} tensors, "
                     f"{trainable_elements} elements)", str(sorted(set(held) ^ expect)[:4]))
        checks.check(meta.get("base_model") == init and len(meta.get("frozen_fingerprint", "")) > 0,
                     f"{mode}: it names its base model and the frozen weights' fingerprint")
    sizes = {name: t.size for name, t in optimizer.items()}
    checks.check(set(sizes) == {"exp_avg", "exp_avg_sq"} and set(sizes.values()) == {trainable_elements},
                 f"{mode}: optimizer state of {trainable_elements} elements only", str(sizes))

    # Resume: 2 steps, then --resume to 4 = 4 straight.
    out2 = os.path.join(root, mode + "-resumed")
    train(out2, mode, "--max-steps", "2")
    train(out2, mode, "--max-steps", "4", "--resume")
    same, why = e2e.same_tensors(final, model(out2))
    checks.check(same, f"{mode}: 2 steps + --resume to 4 = 4 steps, bit for bit", why)

# LoRA: the merge, and peft's layout.
lora_out = os.path.join(root, "lora")
held, _ = e2e.read_safetensors(os.path.join(latest_checkpoint(lora_out), "trainable.safetensors"))
worst = 0.0
for layer in range(LAYERS):
    for target in TARGETS:
        m = f"{P}encoder.layer.{layer}.{target}"
        a, b = held[m + ".lora_A.weight"].astype(np.float64), held[m + ".lora_B.weight"].astype(np.float64)
        expect = initial[m + ".weight"].astype(np.float64) + (8 / 4) * (b @ a)
        got = results["lora"][m + ".weight"].astype(np.float64)
        worst = max(worst, float(np.max(np.abs(got - expect) / np.maximum(np.abs(expect), 1e-30))))
checks.check(worst <= 2 ** -23, "lora: merged weight = W + (alpha / r) B A to fp32 rounding",
             f"max relative {worst:.2e}")
adapter, adapter_meta = e2e.read_safetensors(os.path.join(lora_out, "adapter", "adapter_model.safetensors"))
peft_keys = {f"base_model.model.{P}encoder.layer.{l}.{t}.lora_{ab}.weight" for l in range(LAYERS)
             for t in TARGETS for ab in "AB"} | {"base_model.model.classifier.weight", "base_model.model.classifier.bias"}
checks.check(set(adapter) == peft_keys, "lora: adapter_model.safetensors has peft's key names",
             str(sorted(set(adapter) ^ peft_keys)[:4]))
checks.check(all(adapter["base_model.model." + n].tobytes() == v.tobytes() for n, v in held.items()),
             "lora: the adapter holds the checkpoint's A, B and classifier")
config = json.load(open(os.path.join(lora_out, "adapter", "adapter_config.json")))
checks.check(config.get("peft_type") == "LORA" and config.get("r") == 4 and config.get("lora_alpha") == 8 and
             config.get("target_modules") == ["query", "value", "mlp.fc2"] and
             config.get("modules_to_save") == ["classifier"] and config.get("bias") == "none" and
             config.get("base_model_name_or_path") == init and
             config.get("fan_in_fan_out") is False, "lora: adapter_config.json has LoraConfig's keys", json.dumps(config))
# peft 0.6.x's LoraConfig fields (its PeftConfigMixin's and PeftConfig's included; from the 0.6.1 reference's
# signature): 0.6 to 0.13 raise on any other key ("unexpected keyword argument 'use_rslora'" in 0.7.1).
PEFT_0_6_KEYS = {"peft_type", "auto_mapping", "base_model_name_or_path", "revision", "task_type", "inference_mode", "r",
                 "target_modules", "lora_alpha", "lora_dropout", "fan_in_fan_out", "bias", "modules_to_save",
                 "init_lora_weights", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern"}
checks.check(set(config) <= PEFT_0_6_KEYS, "lora: adapter_config.json holds only keys peft 0.6 knows",
             str(sorted(set(config) - PEFT_0_6_KEYS)))
exported, adapter2 = os.path.join(root, "exported"), os.path.join(root, "adapter2")
e2e.run("export", latest_checkpoint(lora_out), "--out", exported, "--adapter", adapter2)
same, why = e2e.same_tensors(results["lora"], e2e.read_safetensors(os.path.join(exported, "model.safetensors"))[0])
checks.check(same, "lora: `vitpipe export` of the checkpoint = the run's merged model/", why)
same, why = e2e.same_tensors(adapter, e2e.read_safetensors(os.path.join(adapter2, "adapter_model.safetensors"))[0])
checks.check(same, "lora: `vitpipe export --adapter` = the run's adapter/", why)
# The adapter directory as --model: its base (`init`) loaded and the adapter merged, as peft's from_pretrained would.
images = sorted(os.path.join(root, "data", "images", f) for f in os.listdir(os.path.join(root, "data", "images")))[:3]


def predicted_logits(model):
    out = e2e.run("predict", "--model", model, "--threads", "2", *images).stdout
    return [json.loads(line)["logits"] for line in out.splitlines() if line.startswith("{")]


from_adapter, from_export = predicted_logits(adapter2), predicted_logits(exported)
gap = max(abs(x - y) for ra, re in zip(from_adapter, from_export) for x, y in zip(ra, re))
checks.check(len(from_adapter) == len(images) == len(from_export) and gap <= 1e-5,
             "lora: the adapter as --model predicts what its merged export does", f"max |difference| {gap:.2e}")


def close(a, b):
    worst, name = e2e.max_relative_difference(a, b)
    return worst <= 1e-4, f"max relative difference {worst:.2e} ({name})"


# Pipeline stages as threads, and 2 data-parallel replicas under mpirun, against one process. SGD with momentum, as
# train_accumulation.py compares layouts: AdamW's first steps move a weight whose gradient is rounding noise by up
# to the learning rate, whatever the summation order (measured: 8e-4 relative after one AdamW step, 6e-7 with SGD).
SGD = ["--optimizer", "sgd", "--momentum", "0.9"]
SGD_COMMON = [("0.05" if i > 0 and COMMON[i - 1] == "--lr" else v) for i, v in enumerate(COMMON)]


def train_sgd(out, mode, *extra):
    return e2e.run(*e2e.train_args(init, data, out, *SGD_COMMON, *MODES[mode], *SGD, *extra))


parallel_reference = {}
for mode in ("lora", "layers1", "backbone"):
    out = os.path.join(root, mode + "-sgd")
    train_sgd(out, mode, "--max-steps", "4")
    parallel_reference[mode] = model(out)
    out = os.path.join(root, mode + "-stages2")
    train_sgd(out, mode, "--max-steps", "4", "--pipeline-stages", "2")
    ok, why = close(parallel_reference[mode], model(out))
    checks.check(ok, f"{mode}: 2 pipeline stages = one process", why)
if args.mpiexec:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
    for mode in ("lora", "layers1"):
        out = os.path.join(root, mode + "-replicas2")
        command = [args.mpiexec, "--oversubscribe", "--allow-run-as-root", "-np", "2", e2e.VITPIPE,
                   *e2e.train_args(init, data, out, *SGD_COMMON, *MODES[mode], *SGD, "--max-steps", "4",
                                   "--threads", "1")]
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        if not checks.check(result.returncode == 0, f"{mode}: mpirun -np 2 runs", result.stderr[-800:]):
            continue
        ok, why = close(parallel_reference[mode], model(out))
        checks.check(ok, f"{mode}: 2 replicas (mpirun) = one process", why)

# The cache records the processor.
cache = os.path.join(root, "cache")
e2e.run("data", "prepare", "--data", data, "--model", init, "--out", cache, "--threads", "2")
manifest = json.load(open(os.path.join(cache, "manifest.json")))
checks.check(manifest.get("geometry") == "resize shortest edge 32 resample 3, crop 28x28",
             "data prepare --model records the processor", str(manifest.get("geometry")))
out = os.path.join(root, "from-cache")
train_cache = e2e.run(*e2e.train_args(init, "cache:" + cache, out, *COMMON, "--freeze", "backbone",
                                      "--max-steps", "4"))
same, why = e2e.same_tensors(results["backbone"], model(out))
checks.check(same, "backbone: training from the cache = from the image files, bit for bit", why)
plain = os.path.join(root, "cache-plain")
e2e.run("data", "prepare", "--data", data, "--image-size", "28", "--out", plain, "--threads", "2")
refused = e2e.run(*e2e.train_args(init, "cache:" + plain, os.path.join(root, "refused"), *COMMON, "--max-steps", "1"),
                  expect_ok=False)
last = refused.stderr.strip().splitlines()[-1] if refused.stderr.strip() else ""
checks.check(refused.returncode == 1 and "resize shortest edge 32 resample 3, crop 28x28" in last and
             "resize 28x28 resample 2" in last, "a cache prepared for other preprocessing is refused", last)

# Bad flag combinations: one line, exit 1.
for flags, needle in ((["--lora", "4", "--freeze-layers", "1"], "are exclusive"),
                      (["--lora", "4", "--lora-targets", "query,mlp"], "unknown layer \"mlp\""),
                      (["--export-adapter"], "--export-adapter needs --lora"),
                      (["--freeze-layers", "3"], "the model has 2 encoder blocks")):
    result = e2e.run(*e2e.train_args(init, data, os.path.join(root, "bad"), *COMMON, "--max-steps", "1", *flags),
                     expect_ok=False)
    last = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
    checks.check(result.returncode == 1 and needle in last, f"refused {' '.join(flags)}", last)

e2e.cleanup(root)
checks.finish()
