"""What the checks of `vitpipe train --device cuda` on the fakes share: the checks' record, the loss records of a run,
the comparison of two runs (losses and the exported model), and the tiny model and data they train."""

import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def losses(out):
    """(type, step, key, value) of every loss in a run's metrics."""
    found = []
    for record in e2e.read_metrics(out):
        if record.get("type") in ("train", "eval"):
            found += [(record["type"], record["step"], k, v) for k, v in sorted(record.items())
                      if "loss" in k and isinstance(v, (int, float))]
    return found


def compare(name, reference, run, tolerance, tensor_tolerance=None):
    """The same loss records within `tolerance` (relative), and the exported models' tensors within
    `tensor_tolerance` (default: `tolerance`)."""
    tensor_tolerance = tolerance if tensor_tolerance is None else tensor_tolerance
    a, b = losses(reference), losses(run)
    check(len(a) == len(b) and len(a) > 0 and all(x[:3] == y[:3] for x, y in zip(a, b)),
          f"{name}: the same {len(a)} loss records")
    worst = max((abs(x[3] - y[3]) / max(1e-6, abs(x[3])) for x, y in zip(a, b)), default=math.nan)
    check(worst <= tolerance, f"{name}: the losses agree (worst relative difference {worst:.2e})")
    ta, _ = e2e.read_safetensors(os.path.join(reference, "model", "model.safetensors"))
    tb, _ = e2e.read_safetensors(os.path.join(run, "model", "model.safetensors"))
    if sorted(ta) != sorted(tb):
        check(False, f"{name}: the exported models have the same tensor names")
        return
    d, where = e2e.max_relative_difference(ta, tb)
    check(not math.isnan(d) and d <= tensor_tolerance,
          f"{name}: the exported model's {len(ta)} tensors agree (worst relative difference {d:.2e} in {where or '-'})")


def make_model_and_data(vitpipe, tmp, env):
    """A blob dataset (24 train, 8 val) and an initialised vit-micro for it: (csv, model folder)."""
    csv = e2e.make_blob_dataset(os.path.join(tmp, "data"), {"train": 24, "val": 8}, seed=3)
    init = os.path.join(tmp, "init")
    made = subprocess.run([vitpipe, "init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed",
                           "1", "--out", init], env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    return csv, init


def finish():
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
