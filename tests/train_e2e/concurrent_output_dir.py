"""Two `train` runs into one --output-dir (issue 47): the second is refused at once with one line naming the folder
(exit 1) and writes nothing there, while the first goes on undisturbed. Before, both ran to the end in the same
folder, each deleting the other's half-written files as a killed run's leftovers. The lock goes with the process:
after the first is stopped (SIGINT, a checkpoint), `--resume` takes the folder and finishes the run."""

import os
import signal
import subprocess
import time

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("concurrent")
data = "csv:" + e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 64, "val": 16}, seed=5)
model = os.path.join(root, "model")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "5", "--out", model)
out = os.path.join(root, "run")
command = [e2e.VITPIPE, *e2e.train_args(model, data, out, "--max-steps", "100000", "--batch-size", "8",
                                        "--micro-batch-size", "8", "--eval-every", "100000")]

first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
deadline = time.monotonic() + 120  # the lock is taken just before train_options.json is written
while not os.path.exists(os.path.join(out, "train_options.json")) and first.poll() is None:
    if time.monotonic() > deadline:
        break
    time.sleep(0.05)
checks.check(first.poll() is None, "the first run is training", first.stderr.read()[-500:] if first.poll() else "")
before = sorted(os.listdir(out)) if os.path.isdir(out) else []

start = time.monotonic()
second = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
try:
    _, second_stderr = second.communicate(timeout=60)
except subprocess.TimeoutExpired:  # it trains beside the first: the defect
    second.kill()
    _, second_stderr = second.communicate()
errors = [line for line in second_stderr.splitlines() if line.startswith("error")]
checks.check(second.returncode == 1 and len(errors) == 1 and out in errors[0]
             and "another vitpipe train is writing into this folder" in errors[0],
             "the second run into the folder is refused with one line naming it",
             f"exit {second.returncode}: {second_stderr[-600:]}")
print(f"second run refused in {time.monotonic() - start:.1f} s")
checks.check(first.poll() is None, "the first run goes on after the second was refused")
after = sorted(os.listdir(out))
checks.check(set(before) <= set(after), "nothing of the first run's was removed", f"{before} -> {after}")

first.send_signal(signal.SIGINT)
try:
    _, stderr = first.communicate(timeout=120)
except subprocess.TimeoutExpired:
    first.kill()
    _, stderr = first.communicate()
checks.check(first.returncode == 130 and "checkpoint written" in stderr, "the first run stops at SIGINT with a checkpoint",
             "" if first.returncode == 130 else f"exit {first.returncode}: {stderr[-600:]}")
latest = open(os.path.join(out, "checkpoints", "latest")).read().strip()
step = int(latest.split("-")[-1])
resumed = e2e.run("train", "--resume", "--output-dir", out, "--max-steps", step + 2, expect_ok=False)
checks.check(resumed.returncode == 0 and os.path.exists(os.path.join(out, "model", "model.safetensors")),
             "after the first run ended, --resume takes the folder and finishes",
             "" if resumed.returncode == 0 else resumed.stderr[-600:])

e2e.cleanup(root)
checks.finish()
