#!/usr/bin/env python3
"""Proof 3 of issue 24 (the host/device seam) for the trainer: a short `vitpipe train` run in tools/train_seam_probe,
once on the plain CPU backend, once with every stage backend wrapped in tools/seam_backend.h's SeamBackend, which
closes every tensor the backend allocates or is handed (parameters, gradients, optimizer moments, activations, images,
labels) to the host between backend calls, and once on the CUDA module's host adapter over the loopback table, whose
tensors are device memory to vitpipe (Device::cuda: a host access throws, and so does a host tensor handed to it).
Checks:
- the runs succeed, and every safetensors file they write (checkpoints with optimizer state, the exported model) is
  the same bit for bit: the seam and the module boundary change nothing;
- pages were closed, and no host access touched them: the trainer, the pipeline executor, evaluation, checkpointing
  and export reach the backend's memory only through backend calls (copies to and from the host included).

predict-explain: `vitpipe predict` (with --heatmap) and `vitpipe explain` (rollout and Grad-CAM) of a model, through the
seam the same way: the same output, the parameters closed and never touched.

replicas-mpi, stages-mpi: 2 data-parallel replicas, or 2 pipeline stages, as MPI processes (mpirun): the gradient
reduction through host mirrors of the backend's memory, the activations and gradients through host buffers.

Usage: check_seam_train.py PROBE CASE   (CASE: one-stage, two-stages, resume, lora, replicas-mpi, stages-mpi,
                                         predict-explain)"""
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

probe, case = sys.argv[1], sys.argv[2]
# Each case: the flags of one or more runs into the same output directory (later ones resume).
CASES = {
    "one-stage": [["--epochs", "1", "--optimizer", "lamb", "--weight-decay", "0.05"]],
    "two-stages": [["--epochs", "1", "--pipeline-stages", "2", "--optimizer", "adamw", "--clip-grad-norm", "0.05"]],
    # A checkpoint resumed (parameters and SGD momentum loaded through the backend), as 2 stages.
    "resume": [["--optimizer", "sgd", "--momentum", "0.9", "--max-steps", "2"],
               ["--optimizer", "sgd", "--momentum", "0.9", "--max-steps", "3", "--pipeline-stages", "2", "--resume"]],
    # LoRA: frozen base weights beside the trained adapters; the adapter export.
    "predict-explain": [],
    "lora": [["--epochs", "1", "--lora", "4", "--lora-alpha", "8", "--lora-targets", "query,value", "--export-adapter"]],
    # 2 data-parallel replicas as MPI processes: on device memory the gradients are reduced through host mirrors.
    "replicas-mpi": [["--epochs", "1", "--optimizer", "adamw", "--clip-grad-norm", "0.05"]],
    # 2 pipeline stages as MPI processes (1F1B): activations and gradients received into host buffers, then copied in.
    "stages-mpi": [["--epochs", "1", "--optimizer", "adamw", "--pipeline-stages", "2", "--pipeline-schedule", "1f1b"]],
}
MPIRUN = [shutil.which("mpirun") or "mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"]
LAUNCHERS = {"replicas-mpi": MPIRUN, "stages-mpi": MPIRUN}
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def digests(out, suffixes=(".safetensors",)):
    found = {}
    for base, _, files in os.walk(out):
        for name in files:
            if name.endswith(suffixes):
                path = os.path.join(base, name)
                found[os.path.relpath(path, out)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return found


with tempfile.TemporaryDirectory() as tmp:
    csv = e2e.make_blob_dataset(os.path.join(tmp, "data"), {"train": 40, "val": 16}, seed=3)
    init = os.path.join(tmp, "init")
    e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "1", "--out", init)
    common = ["--model", init, "--data", "csv:" + csv, "--loader-threads", "1", "--threads", "2", "--batch-size", "16", "--micro-batch-size", "4", "--lr", "1e-3", "--checkpoint-every", "1",
              "--eval-every", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    for number, flags in enumerate(CASES[case], 1):
        what = f"run {number}: " if len(CASES[case]) > 1 else ""
        args = [*common, *flags]
        launcher = LAUNCHERS.get(case, [])
        plain = subprocess.run([*launcher, probe, *args, "--output-dir", f"{tmp}/plain"], env=env, capture_output=True,
                               text=True, timeout=300)
        seam = subprocess.run([*launcher, probe, *args, "--output-dir", f"{tmp}/seam"], env={**env, "VITPIPE_PROBE_SEAM": "1"},
                              capture_output=True, text=True, timeout=300)
        loop = subprocess.run([*launcher, probe, *args, "--output-dir", f"{tmp}/loopback"],
                              env={**env, "VITPIPE_PROBE_LOOPBACK": "1"}, capture_output=True, text=True, timeout=300)
        check(plain.returncode == 0,
              what + "the plain run succeeds" + ("" if plain.returncode == 0 else ": " + plain.stderr[-2000:]))
        check(loop.returncode == 0, what + "the run on device-flagged tensors (module adapter, loopback) succeeds" +
              ("" if loop.returncode == 0 else ": " + loop.stderr[-2000:]))
        check(digests(f"{tmp}/plain") == digests(f"{tmp}/loopback"),
              what + "the loopback run's checkpoints and exported weights equal the plain run's bit for bit")
        check(seam.returncode == 0,
              what + "the seam run succeeds" + ("" if seam.returncode == 0 else ": " + seam.stderr[-2000:]))
        a, b = digests(f"{tmp}/plain"), digests(f"{tmp}/seam")
        check(len(a) > 0 and a == b, what + "the seam run's checkpoints and exported weights equal the plain run's "
                                            f"bit for bit ({len(a)} safetensors files)")
        summary = re.search(
            r"seam: (\d+) page ranges closed between calls, (\d+) of (\d+) handed bytes; (\d+) host touches",
            seam.stderr)
        check(summary is not None and int(summary.group(1)) > 0,
              what + "pages of the backend's memory were closed between calls")
        if summary:
            print(summary.group(0))
            watched, handed = int(summary.group(2)), int(summary.group(3))
            check(watched > handed // 2, what + f"most of the training state's bytes were watched ({watched} of "
                                                f"{handed})")
            touches = int(summary.group(4))
            check(touches == 0, what + f"nothing above the backend touched its memory ({touches} host touches)")
        if seam.returncode != 0 or (summary and int(summary.group(4)) > 0):
            print(seam.stderr[-6000:])

    if case == "predict-explain":
        images = sorted(glob.glob(os.path.join(tmp, "data", "**", "*.png"), recursive=True))[:5]
        commands = {
            "predict": lambda out: ["predict", "--model", init, "--threads", "2", "--batch-size", "2", "--heatmap", out,
                                    *images],
            "explain": lambda out: ["explain", "--model", init, "--threads", "2", "--method", "rollout", "--method",
                                    "gradcam", "--top", "2", "--out", out, *images],
        }
        for name, command in commands.items():
            plain = subprocess.run([probe, *command(f"{tmp}/{name}-plain")], env=env, capture_output=True, text=True,
                                   timeout=300)
            loop = subprocess.run([probe, *command(f"{tmp}/{name}-loopback")],
                                  env={**env, "VITPIPE_PROBE_LOOPBACK": "1"}, capture_output=True, text=True,
                                  timeout=300)
            same_loop = (loop.returncode == 0 and
                         plain.stdout.replace(f"{name}-plain", "OUT") == loop.stdout.replace(f"{name}-loopback", "OUT")
                         and digests(f"{tmp}/{name}-plain", (".png", ".npy", ".json", ".csv")) ==
                         digests(f"{tmp}/{name}-loopback", (".png", ".npy", ".json", ".csv")))
            check(same_loop, f"{name}: on device-flagged tensors (module adapter, loopback): the same output" +
                  ("" if loop.returncode == 0 else ": " + loop.stderr[-2000:]))
            seam = subprocess.run([probe, *command(f"{tmp}/{name}-seam")], env={**env, "VITPIPE_PROBE_SEAM": "1"},
                                  capture_output=True, text=True, timeout=300)
            check(plain.returncode == 0 and seam.returncode == 0,
                  f"{name}: both runs succeed" + ("" if seam.returncode == 0 and plain.returncode == 0
                                                   else ": " + plain.stderr[-1000:] + seam.stderr[-2000:]))
            a = digests(f"{tmp}/{name}-plain", (".png", ".npy", ".json", ".csv"))
            b = digests(f"{tmp}/{name}-seam", (".png", ".npy", ".json", ".csv"))
            same_stdout = plain.stdout.replace(f"{name}-plain", "OUT") == seam.stdout.replace(f"{name}-seam", "OUT")
            check(same_stdout and a == b and len(a) > 0,
                  f"{name}: the seam run's output and {len(a)} files equal the plain run's")
            summary = re.search(
                r"seam: (\d+) page ranges closed between calls, (\d+) of (\d+) handed bytes; (\d+) host touches",
                seam.stderr)
            check(summary is not None and int(summary.group(1)) > 0, f"{name}: the parameters' pages were closed")
            if summary:
                print(summary.group(0))
                check(int(summary.group(4)) == 0,
                      f"{name}: nothing above the backend touched the parameters ({summary.group(4)} host touches)")
                if int(summary.group(4)) > 0:
                    print(seam.stderr[-6000:])

if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
