"""`vitpipe train` refuses bad flags before any work: a non-zero exit, one clear "error: ..." line naming the flag,
nothing on stdout and no output directory created. Problems only the data or the model reveal (a missing file, a
batch larger than the data set, --resume with nothing to resume) are refused before anything is written."""

import os

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("flags")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 24, "val": 8})
model = os.path.join(root, "model")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--out", model)
data = "csv:" + csv

with open(os.path.join(root, "bad.yaml"), "w") as f:
    f.write("epochs: 1\nlr: -0.5\n")
with open(os.path.join(root, "unknown.json"), "w") as f:
    f.write('{"epochs": 1, "learning_rate": 0.1}\n')

# (extra flags, text the message must contain). Each is refused while parsing or validating the options: one line.
option_cases = [
    (["--lr", "0"], "--lr must be > 0"),
    (["--lr", "-1e-3"], "--lr must be > 0"),
    (["--lr", "nan"], "--lr: expected a number"),
    (["--batch-size", "10", "--micro-batch-size", "4"], "--batch-size 10 is not divisible by --micro-batch-size 4"),
    (["--batch-size", "0"], "--batch-size must be a positive integer"),
    (["--micro-batch-size", "0"], "--micro-batch-size must be a positive integer"),
    (["--optimizer", "adamx"], "--optimizer: unknown value 'adamx'"),
    (["--schedule", "exponential"], "--schedule: unknown value 'exponential'"),
    (["--epochs", "0"], "--epochs must be a positive integer"),
    (["--epochs", "1", "--max-steps", "5"], "--epochs and --max-steps are exclusive"),
    (["--warmup-ratio", "1.5"], "--warmup-ratio must be in [0, 1)"),
    (["--warmup-ratio", "0.1", "--warmup-steps", "3"], "--warmup-ratio and --warmup-steps are exclusive"),
    (["--max-steps", "4", "--warmup-steps", "4"], "leaves no step after the warm-up"),
    (["--clip-grad-norm", "-1"], "--clip-grad-norm must be >= 0"),
    (["--threads", "-2"], "--threads must be >= 0"),
    (["--val-fraction", "1"], "--val-fraction must be in [0, 1)"),
    (["--weight-decay", "-0.1"], "--weight-decay must be >= 0"),
    (["--precision", "fp8"], "--precision"),
    (["--config", os.path.join(root, "bad.yaml")], "--lr must be > 0 (got -0.5)"),
    (["--config", os.path.join(root, "unknown.json")], "learning_rate"),
    (["--config", os.path.join(root, "missing.yaml")], "config file not found"),
]

for index, (extra, expected) in enumerate(option_cases):
    out = os.path.join(root, f"out{index}")
    defaults = {"--epochs": "1", "--batch-size": "8"}
    if "--max-steps" in extra or "--config" in extra:
        del defaults["--epochs"]
    given = [flag for pair in defaults.items() if pair[0] not in extra for flag in pair]
    args = ["train", "--model", model, "--data", data, "--output-dir", out, "--loader-threads", "1", *given, *extra]
    if "--threads" not in extra:
        args += ["--threads", "1"]
    r = e2e.run(*args, expect_ok=False)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    what = " ".join(extra)
    checks.check(r.returncode != 0, f"{what}: non-zero exit", f"rc {r.returncode}")
    checks.check(len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0],
                 f"{what}: one error line containing {expected!r}", r.stderr.strip()[:300])
    checks.check(r.stdout == "", f"{what}: nothing on stdout", r.stdout[:200])
    checks.check(not os.path.exists(out), f"{what}: output directory not created")

# Missing required flags and unknown flags (CLI11 or the option loader): refused, nothing written.
out = os.path.join(root, "out_missing")
for args, expected in [(["train", "--model", model, "--output-dir", out, "--epochs", "1"], "--data is required"),
                       (["train", "--model", model, "--data", data, "--epochs", "1"], "--output-dir is required"),
                       (e2e.train_args(model, data, out, "--epochs", "1", "--learning-rate", "0.1"), "--learning-rate")]:
    r = e2e.run(*args, expect_ok=False)
    checks.check(r.returncode != 0 and expected in r.stderr and not os.path.exists(out),
                 f"{' '.join(args[-2:])}: refused with {expected!r}", f"rc {r.returncode}: {r.stderr.strip()[:200]}")

# Typos: one line naming the nearest subcommand or flag (not CLI11's "A subcommand is required").
for args, expected in [(["trian", "--model", model], "did you mean `vitpipe train`?"),
                       (["data", "prepre"], "did you mean `vitpipe data prepare`?"),
                       (e2e.train_args(model, data, out, "--epochs", "1", "--bach-size", "8"),
                        "has no flag --bach-size; did you mean --batch-size?")]:
    r = e2e.run(*args, expect_ok=False)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    checks.check(r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
                 and not os.path.exists(out), f"{' '.join(args[:2])}: {expected!r}", r.stderr.strip()[:200])

# Refusals that need the data or the model: still nothing written.
data_cases = [
    (e2e.train_args(os.path.join(root, "no_model"), data, os.path.join(root, "d0"), "--epochs", "1", "--batch-size",
                    "8"), "no_model"),
    (e2e.train_args(model, "csv:" + os.path.join(root, "none.csv"), os.path.join(root, "d1"), "--epochs", "1"),
     "none.csv"),
    (e2e.train_args(model, data, os.path.join(root, "d2"), "--epochs", "1", "--batch-size", "64",
                    "--partial-batch", "drop"), "do not fill one batch of 64"),
    (e2e.train_args(model, data, os.path.join(root, "d3"), "--epochs", "1", "--batch-size", "8", "--resume"),
     "--resume: no checkpoint"),
    (e2e.train_args(model, data, os.path.join(root, "d4"), "--epochs", "1", "--batch-size", "8",
                    "--micro-batch-size", "4", "--pipeline-stages", "2", "--layers-per-stage", "1,2"),
     "layers"),
]
for index, (args, expected) in enumerate(data_cases):
    r = e2e.run(*args, expect_ok=False)
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    checks.check(r.returncode != 0 and last.startswith("error: ") and expected in last,
                 f"data case {index}: refused with an error naming {expected!r}", f"rc {r.returncode}: {last[:300]}")
    checks.check(not os.path.exists(os.path.join(root, f"d{index}")), f"data case {index}: nothing written")

e2e.cleanup(root)
checks.finish()
