#!/usr/bin/env python3
"""Proof 3 of issue 24 (the host/device seam) as far as it goes: one training step of a 2-stage ViT with 2
micro-batches through tools/seam_backend.h, which closes every tensor handed to the backend to the host between
backend calls (and every tensor it allocates, from its allocation on). The step's dump (parameters, logits, loss, every
gradient) equals the plain CPU run's bit for bit; pages were watched; nothing touched them: the probe moves
activations and gradients between stages through the backends' host copies, as the pipeline executor does. A third
run reads one stage output directly on purpose (VITPIPE_PROBE_SEAM_TOUCH): the watch must catch exactly that.

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
        check(int(summary.group(4)) == 0, f"nothing above the backend touched its memory ({summary.group(4)} touches)")
    touched = subprocess.run([probe, *ARGS, "--out", f"{tmp}/touched"],
                             env={**env, "VITPIPE_PROBE_SEAM": "1", "VITPIPE_PROBE_SEAM_TOUCH": "1"},
                             capture_output=True, text=True, timeout=120)
    caught = re.search(r"(\d+) host touches", touched.stderr)
    # The first frame outside libc of each touch names who touched: the probe's deliberate read in main.
    touches = re.split(r"^seam: touch \d+ ", touched.stderr, flags=re.M)[1:]
    firsts = [next((f.strip() for f in t.splitlines()[1:] if f.startswith("        ") and "libc.so" not in f), "?")
              for t in touches]
    check(touched.returncode == 0 and caught is not None and int(caught.group(1)) == 1 and len(firsts) == 1
          and re.match(r"main\b", firsts[0]) is not None,
          f"a deliberate host read of a stage output is caught, once, in the probe's main ({firsts})")

if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
