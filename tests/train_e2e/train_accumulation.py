"""Gradient accumulation equals one big batch, end to end through `vitpipe train` (augmentation on): a global batch
of 16 as one micro-batch of 16, as 4 micro-batches of 4, as 16 of 1, and as 4 micro-batches of 4 through a pipeline
of 2 stages (threads of one process) end with the same weights up to float summation order. SGD with momentum keeps
the comparison tight; AdamW is compared too, looser (it divides by the gradient's magnitude, so a rounding
difference in a near-zero gradient moves a weight by up to the learning rate). A run with another seed must differ
by far more, so the comparison can fail."""

import os

import numpy as np

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("accumulation")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 64, "val": 16}, seed=11)
data = "csv:" + csv
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "2", "--out", init)


def train(name, *extra):
    out = os.path.join(root, name)
    threads = [] if "--threads" in extra else ["--threads", "1"]
    e2e.run(*e2e.train_args(init, data, out, "--max-steps", "4", "--batch-size", "16", "--warmup-steps", "1",
                            *threads, *extra))
    latest = open(os.path.join(out, "checkpoints", "latest")).read().strip()
    weights = e2e.read_safetensors(os.path.join(out, "checkpoints", latest, "model.safetensors"))[0]
    losses = [x["loss"] for x in e2e.read_metrics(out) if x["type"] == "train"]
    return weights, losses


initial = e2e.read_safetensors(os.path.join(init, "model.safetensors"))[0]

for optimizer, lr, tolerance in (("sgd", "0.05", 2e-5), ("adamw", "2e-3", 1e-4)):
    flags = ["--optimizer", optimizer, "--lr", lr, "--log-every", "1"]
    one, one_losses = train(f"{optimizer}_1x16", "--micro-batch-size", "16", *flags)
    moved, _ = e2e.max_relative_difference(one, initial)
    checks.check(moved > 1e-3, f"{optimizer}: training moves the weights", f"max relative change {moved:.2e}")
    for name, extra in (("4x4", ["--micro-batch-size", "4"]), ("16x1", ["--micro-batch-size", "1"]),
                        ("2 stages 4x4", ["--micro-batch-size", "4", "--pipeline-stages", "2", "--threads", "2"])):
        weights, losses = train(f"{optimizer}_{name.replace(' ', '_')}", *extra, *flags)
        difference, where = e2e.max_relative_difference(one, weights)
        checks.check(difference < tolerance, f"{optimizer}: {name} micro-batches = one batch of 16",
                     f"max relative difference {difference:.2e} ({where})")
        loss_difference = max(abs(a - b) / abs(a) for a, b in zip(one_losses, losses))
        checks.check(len(losses) == len(one_losses) == 4 and loss_difference < 1e-5,
                     f"{optimizer}: {name}: the same loss at every step", f"{loss_difference:.2e}")
    other, _ = train(f"{optimizer}_seed", "--micro-batch-size", "16", "--seed", "9", *flags)
    difference, _ = e2e.max_relative_difference(one, other)
    checks.check(difference > 100 * tolerance, f"{optimizer}: another seed (data order, augmentation) differs",
                 f"{difference:.2e}")

e2e.cleanup(root)
checks.finish()
