#!/usr/bin/env python3
"""`vitpipe train` on an emulated Haswell (Debian's qemu-user: AVX2, no AVX-512): two SGD steps of a vit-micro on the
bundled ChestX-ray14 sample (PNG decoding, the loader, forward, backward, the optimizer, validation and export all run
on the AVX2-only CPU) end at this machine's weights and training losses within 1e-5 relative (this machine may run a
higher level, whose sums round differently); one bf16 step (there: fp32 GEMMs on bf16-rounded operands, and a note
saying so) within bf16's 3e-2. An AVX-512 instruction anywhere on those paths dies of SIGILL under the emulation.
About 15 s. Skipped (77) where qemu-x86_64 is not installed (scripts/setup.sh --tests installs it).

usage: check_emulated_cpu_training.py    ($VITPIPE: the vitpipe binary, $VITPIPE_SOURCE_DIR: the repository)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402 (the independent safetensors reader)

TOLERANCE = 1e-5
BF16_TOLERANCE = 3e-2
vitpipe, source = os.environ["VITPIPE"], os.environ["VITPIPE_SOURCE_DIR"]
qemu = shutil.which("qemu-x86_64")
if qemu is None:
    print("SKIP: qemu-x86_64 (Debian's qemu-user) is not installed")
    sys.exit(77)
work = tempfile.mkdtemp(prefix="vitpipe_qemu_train_")
init = os.path.join(work, "init")
subprocess.run([vitpipe, "init", "--preset", "vit-micro", "--seed", "5", "--out", init], check=True,
               capture_output=True)
data = "chestxray14:" + os.path.join(source, "data", "chestxray14-sample")


def train(prefix, name, steps=2, precision="fp32", *extra):
    out = os.path.join(work, name)
    run = subprocess.run([*prefix, vitpipe, "train", "--model", init, "--data", data, "--output-dir", out,
                          "--max-steps", str(steps), "--batch-size", "4", "--optimizer", "sgd", "--lr", "0.1",
                          "--warmup-steps", "0", "--precision", precision, "--threads", "2", "--loader-threads", "1",
                          "--export-last", *extra], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"FAIL: train {name} exited {run.returncode}: {run.stderr[-3000:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        losses = [row["loss"] for row in map(json.loads, f) if row.get("type") == "train"]
    weights = e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))[0]
    return weights, losses, run.stderr


native, native_losses, _ = train([], "native")
emulated, emulated_losses, _ = train([qemu, "-cpu", "Haswell"], "haswell")
start = e2e.read_safetensors(os.path.join(init, "model.safetensors"))[0]
failures = []
# Every tensor must have moved well beyond the tolerance, or the comparison would prove little about its gradient;
# but the keys' bias, whose gradient is zero (softmax over keys does not change when q.b is added to every score).
moved, still = min((e2e.max_relative_difference({n: native[n]}, {n: start[n]})[0], n) for n in native
                   if not n.endswith("attention.key.bias"))
if moved < 10 * TOLERANCE:
    failures.append(f"two steps moved {still} by {moved:.1e} relative only: the comparison would prove little")
worst, where = e2e.max_relative_difference(native, emulated)
print(f"train on an emulated Haswell: weights within {worst:.1e} of this machine's ({where}); "
      f"training moved every tensor by {moved:.1e} or more")
if worst > TOLERANCE:
    failures.append(f"emulated Haswell weights differ: {worst:.2e} relative ({where})")
a, b = np.array(native_losses), np.array(emulated_losses)
if a.shape != b.shape or a.size == 0 or np.max(np.abs(a - b) / np.abs(a)) > TOLERANCE:
    failures.append(f"training losses differ: this machine {native_losses}, emulated Haswell {emulated_losses}")
# bf16 on a CPU without bf16 instructions: fp32 GEMMs on bf16-rounded operands, said in a note; one step ends within
# bf16's tolerance of this machine's (which may have bf16 instructions and round its products differently).
# (No validation split: the fp32 runs covered evaluation, and under the emulation it is most of a run's time.)
native, _, _ = train([], "native-bf16", 1, "bf16", "--val-fraction", "0")
emulated, _, log = train([qemu, "-cpu", "Haswell"], "haswell-bf16", 1, "bf16", "--val-fraction", "0")
worst, where = e2e.max_relative_difference(native, emulated)
print(f"bf16 step on an emulated Haswell: weights within {worst:.1e} of this machine's ({where})")
if worst > BF16_TOLERANCE:
    failures.append(f"emulated Haswell bf16 weights differ: {worst:.2e} relative ({where})")
if "without bf16 instructions" not in log:
    failures.append(f"bf16 on the emulated Haswell without the note that it has no bf16 instructions: {log[-1500:]}")
shutil.rmtree(work, ignore_errors=True)
if failures:
    sys.exit("FAIL: " + "\nFAIL: ".join(failures))
print("ok")
