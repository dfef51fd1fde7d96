#!/usr/bin/env python3
"""Proof 3 of issue 24 (the host/device seam) as far as it goes: one training step of a 2-stage ViT with 2
micro-batches through tools/seam_backend.h, which closes every tensor handed to the backend to the host between
backend calls. The step's dump (parameters, logits, loss, every gradient) equals the plain CPU run's bit for bit; pages
were watched; and every host touch of them came from the probe's own copies between stages (what the pipeline
executor's send/recv will do on a GPU), none from ViTStage, the model or the loss.

Usage: check_seam.py PROBE"""
import os
import re
import subprocess
import sys
import tempfile

probe = sys.argv[1]
ARGS = ["--hidden", "64", "--heads", "4", "--layers", "2", "--mlp", "128", "--image", "32", "--patch", "8", "--labels",
        "14", "--batch", "8", "--micro-batch", "4", "--stages", "2"]
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


with tempfile.TemporaryDirectory() as tmp:
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    plain = subprocess.run([probe, *ARGS, "--out", f"{tmp}/plain"], env=env, capture_output=True, text=True, timeout=120)
    seam = subprocess.run([probe, *ARGS, "--out", f"{tmp}/seam"], env={**env, "VITPIPE_PROBE_SEAM": "1"},
                          capture_output=True, text=True, timeout=120)
    print(seam.stderr, end="")
    check(plain.returncode == 0 and seam.returncode == 0, "both runs succeed")
    same = all(open(f"{tmp}/plain/{f}", "rb").read() == open(f"{tmp}/seam/{f}", "rb").read()
               for f in ["index.json", "data.f32"]) if seam.returncode == 0 else False
    check(same, "the seam run's parameters, logits, loss and gradients equal the plain run's bit for bit")

    summary = re.search(r"seam: (\d+) page ranges closed between calls, (\d+) of (\d+) handed bytes; (\d+) host touches",
                        seam.stderr)
    check(summary is not None and int(summary.group(1)) > 0, "pages were closed between calls")
    if summary:
        watched, handed = int(summary.group(2)), int(summary.group(3))
        check(watched > handed // 2, f"most handed bytes were watched ({watched} of {handed})")
    # Each touch: the first frame outside libc names who touched.
    touches = re.split(r"^seam: touch \d+ ", seam.stderr, flags=re.M)[1:]
    toucher = []
    for t in touches:
        frames = [line.strip() for line in t.splitlines()[1:] if line.startswith("        ")]
        first = next((f for f in frames if "libc.so" not in f), "?")
        toucher.append(first)
    check(len(touches) > 0, "the probe's copies between stages are seen (the watch works)")
    outside = [f for f in toucher if not re.match(r"main\b", f)]  # main or its compute_gradients lambda
    check(not outside, "every touch is the probe's own copy between stages, none from the library: " + "; ".join(outside))

if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
