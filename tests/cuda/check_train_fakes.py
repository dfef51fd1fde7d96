#!/usr/bin/env python3
"""Training end to end through the CUDA module on the CPU: tools/train_seam_probe built as train_probe_cuda_fakes
runs a short `vitpipe train` twice, on the plain CPU backend and with VITPIPE_PROBE_CUDA=1, where every stage backend
is the module's own table (module_entry.cpp) with CudaBackend behind the host adapter, on the host-memory fakes of the
CUDA runtime, cuBLASLt and cuDNN (tests/cuda/fakes). Checks:
- both runs succeed, write the same files, and the module run called the optimizer's ops through backend_call (the
  step, zeroing, host copies for checkpoints; sum_of_squares where gradients are clipped);
- the losses and every tensor of every checkpoint and exported model agree within the forward and backward passes'
  rounding (the optimizer ops themselves are bit for bit: test_cuda_backend_fakes, CudaModuleAdapter.*).
What this cannot prove: the GPU's kernels (test_cuda_gpu, on a GPU).

Usage: check_train_fakes.py PROBE CASE   (CASE: lamb, adamw-two-stages-clip, sgd-momentum)"""
import math
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

probe, case = sys.argv[1], sys.argv[2]
CASES = {
    "lamb": (["--max-steps", "3", "--optimizer", "lamb", "--weight-decay", "0.05"], ["lamb_moments", "lamb_update"]),
    "adamw-two-stages-clip": (["--max-steps", "3", "--pipeline-stages", "2", "--optimizer", "adamw",
                               "--clip-grad-norm", "0.05"], ["adamw_update", "sum_of_squares"]),
    "sgd-momentum": (["--max-steps", "3", "--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.01"],
                     ["sgd_update"]),
}
# The stages' forward and backward passes differ from the CPU backend's by rounding (1e-6 relative); a few optimizer
# steps carry that into the parameters (Adam-type steps can turn a rounding-sized gradient into a step of lr).
LOSS_TOLERANCE = 1e-5
TENSOR_TOLERANCE = 1e-3
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def safetensors_files(out):
    found = []
    for base, _, files in os.walk(out):
        found += [os.path.relpath(os.path.join(base, n), out) for n in files if n.endswith(".safetensors")]
    return sorted(found)


flags, expected_ops = CASES[case]
with tempfile.TemporaryDirectory() as tmp:
    csv = e2e.make_blob_dataset(os.path.join(tmp, "data"), {"train": 24, "val": 8}, seed=3)
    init = os.path.join(tmp, "init")
    e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "1", "--out", init)
    args = ["--model", init, "--data", "csv:" + csv, "--loader-threads", "1", "--threads", "2", "--batch-size", "8",
            "--micro-batch-size", "4", "--lr", "1e-3", "--checkpoint-every", "1", "--eval-every", "1", *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    plain = subprocess.run([probe, *args, "--output-dir", f"{tmp}/plain"], env=env, capture_output=True, text=True,
                           timeout=400)
    fakes = subprocess.run([probe, *args, "--output-dir", f"{tmp}/fakes"], env={**env, "VITPIPE_PROBE_CUDA": "1"},
                           capture_output=True, text=True, timeout=400)
    check(plain.returncode == 0, "the CPU run succeeds" + ("" if plain.returncode == 0 else ": " + plain.stderr[-2000:]))
    check(fakes.returncode == 0,
          "the run through the CUDA module on fakes succeeds" + ("" if fakes.returncode == 0 else
                                                                 ": " + fakes.stderr[-3000:]))
    calls = dict((m.group(1), int(m.group(2))) for m in re.finditer(r"(\w+)=(\d+)", (re.search(
        r"cuda fakes calls:(.*)", fakes.stderr) or re.search("(.*)", "")).group(1)))
    print("module calls:", " ".join(f"{k}={v}" for k, v in sorted(calls.items())))
    for op in [*expected_ops, "zero", "copy_to_host", "linear_forward"]:
        check(calls.get(op, 0) > 0, f"the trainer called {op} through the module ({calls.get(op, 0)} calls)")

    if plain.returncode == 0 and fakes.returncode == 0:
        a, b = e2e.read_metrics(f"{tmp}/plain"), e2e.read_metrics(f"{tmp}/fakes")
        check(len(a) == len(b) and len(a) > 0, f"the same metrics records ({len(a)} and {len(b)})")
        worst = 0.0
        for x, y in zip(a, b):
            for key, value in x.items():
                if "loss" in key and isinstance(value, (int, float)) and isinstance(y.get(key), (int, float)):
                    worst = max(worst, abs(value - y[key]) / max(1e-6, abs(value)))
        check(worst <= LOSS_TOLERANCE, f"the losses agree (worst relative difference {worst:.2e})")
        files_a, files_b = safetensors_files(f"{tmp}/plain"), safetensors_files(f"{tmp}/fakes")
        check(files_a == files_b and len(files_a) > 0, f"the same {len(files_a)} safetensors files")
        for name in files_a:
            if name not in files_b:
                continue
            ta, _ = e2e.read_safetensors(os.path.join(tmp, "plain", name))
            tb, _ = e2e.read_safetensors(os.path.join(tmp, "fakes", name))
            if sorted(ta) != sorted(tb):
                check(False, f"{name}: the same tensor names")
                continue
            d, where = e2e.max_relative_difference(ta, tb)
            check(not math.isnan(d) and d <= TENSOR_TOLERANCE,
                  f"{name}: {len(ta)} tensors agree (worst relative difference {d:.2e} in {where or '-'})")

if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
