"""Output that cannot be written is an error (issue 47): `predict > rows.jsonl` on a full disk exited 0 with the rows
cut at 8 KiB. Standard output on /dev/full (every write: ENOSPC) must end predict and eval with exit 1
and one line saying so; the same commands into a file exit 0."""

import os
import subprocess
import sys
import tempfile

VITPIPE = os.environ.get("VITPIPE", "vitpipe")
SOURCE_DIR = os.environ.get("VITPIPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
if not os.path.exists("/dev/full"):
    print("SKIP: no /dev/full")
    sys.exit(77)

sample = os.path.join(SOURCE_DIR, "data", "chestxray14-sample")
images = os.path.join(sample, "images")
failures = []
with tempfile.TemporaryDirectory(prefix="vitpipe-full-") as root:
    model = os.path.join(root, "model")
    subprocess.run([VITPIPE, "init", "--preset", "vit-micro", "--labels", "chestxray14", "--seed", "1", "--out", model],
                   check=True, capture_output=True)
    commands = {
        "predict 40 images": ["predict", "--model", model, *sorted(os.path.join(images, n) for n in os.listdir(images))[:40]],
        "predict --format csv": ["predict", "--model", model, "--format", "csv", os.path.join(images, "00000001_000.png")],
        "eval --json": ["eval", "--model", model, "--data", "chestxray14:" + sample, "--split", "val", "--json"],
    }
    for name, args in commands.items():
        with open("/dev/full", "w") as full:
            result = subprocess.run([VITPIPE, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
        ok = result.returncode == 1 and len(errors) == 1 and "standard output" in errors[0]
        print(("ok    " if ok else "FAIL  ") + f"{name} > /dev/full: exit {result.returncode}, {errors}")
        if not ok:
            failures.append(name)
        with open(os.path.join(root, "out.txt"), "w") as out:
            result = subprocess.run([VITPIPE, *args], stdout=out, stderr=subprocess.PIPE, text=True, timeout=300)
        if result.returncode != 0 or os.path.getsize(os.path.join(root, "out.txt")) == 0:
            print(f"FAIL  {name} > a file: exit {result.returncode}: {result.stderr[-300:]}")
            failures.append(name + " into a file")
sys.exit(1 if failures else 0)
