#!/usr/bin/env python3
"""The same binary on emulated CPUs (Debian's qemu-user, which emulates up to AVX2 but not AVX-512):
- on a Haswell (AVX2, no AVX-512) `vitpipe predict` picks the avx2 kernels and gives this machine's logits (within
  1e-5 relative: this machine may run a higher level, whose sums round differently), and `--precision auto` is fp32
  there (no bf16 instructions);
- on a Nehalem (no AVX) it refuses in one sentence, exit code 1, before anything else runs.
Skipped (77) where qemu-x86_64 is not installed (scripts/setup.sh --tests installs it).

usage: check_emulated_cpus.py    ($VITPIPE: the vitpipe binary, $VITPIPE_SOURCE_DIR: the repository)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

vitpipe, source = os.environ["VITPIPE"], os.environ["VITPIPE_SOURCE_DIR"]
qemu = shutil.which("qemu-x86_64")
if qemu is None:
    print("SKIP: qemu-x86_64 (Debian's qemu-user) is not installed")
    sys.exit(77)
failures = []
work = tempfile.mkdtemp(prefix="vitpipe_qemu_")
model = os.path.join(work, "model")
subprocess.run([vitpipe, "init", "--preset", "vit-micro", "--seed", "5", "--out", model], check=True,
               capture_output=True)
images = [os.path.join(source, "data", "chestxray14-sample", "images", name)
          for name in ("00000001_000.png", "00000001_001.png")]
predict = ["predict", "--model", model, "--threads", "2", *images]
native = subprocess.run([vitpipe, *predict], check=True, capture_output=True, text=True).stdout
emulated = subprocess.run([qemu, "-cpu", "Haswell", vitpipe, *predict], capture_output=True, text=True)
if emulated.returncode != 0:
    failures.append(f"predict on an emulated Haswell exited {emulated.returncode}: {emulated.stderr[-2000:]}")
else:
    a = np.array([json.loads(line)["logits"] for line in native.splitlines()])
    b = np.array([json.loads(line)["logits"] for line in emulated.stdout.splitlines()])
    difference = np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(a)))
    print(f"predict on an emulated Haswell: {len(b)} images, logits within {difference:.1e} of this machine's")
    if a.shape != b.shape or difference > 1e-5:
        failures.append(f"emulated Haswell logits differ: {difference:.2e}")
info = subprocess.run([qemu, "-cpu", "Haswell", vitpipe, "info", "--json"], capture_output=True, text=True)
haswell = json.loads(info.stdout) if info.returncode == 0 else {}
level = haswell.get("cpu_kernels", f"exit {info.returncode}")
print(f"emulated Haswell: kernels {level}, --precision auto {haswell.get('precision_auto')}")
if level != "avx2":
    failures.append(f"an emulated Haswell runs {level} kernels, expected avx2")
if haswell.get("precision_auto") != "fp32" or haswell.get("bf16_in_hardware") is not False:
    failures.append(f"an emulated Haswell has no bf16 instructions: --precision auto must be fp32, got "
                    f"{haswell.get('precision_auto')} (bf16_in_hardware {haswell.get('bf16_in_hardware')})")
old = subprocess.run([qemu, "-cpu", "Nehalem", vitpipe, "info"], capture_output=True, text=True)
lines = [line for line in old.stderr.splitlines() if not line.startswith("qemu-x86_64: warning")]
print(f"emulated Nehalem: exit {old.returncode}, {lines}")
if old.returncode != 1 or len(lines) != 1 or "x86-64-v3" not in lines[0] or "AVX2" not in lines[0] or old.stdout:
    failures.append(f"an emulated Nehalem must be refused in one line with exit code 1: {old.returncode} {lines}")
shutil.rmtree(work, ignore_errors=True)
if failures:
    sys.exit("FAIL: " + "\nFAIL: ".join(failures))
print("ok")
