"""One overwrite rule for every command that writes a folder (issue 45, defect 4): `init --out`, `export --out`,
`explain --out`, `data prepare --out` and `train --output-dir` write into a new or empty folder or their own
previous output; a folder holding anything else is refused with one line naming it and the choices (exit 1, nothing
written, the other files untouched), unless --force. Own previous output: export and init replace theirs, explain
replaces its maps (index.json lists exactly what the folder holds), data prepare its cache, and train continues
only with --resume. Another command's output is not "own"."""

import json
import os

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("outfolders")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 16, "val": 8}, seed=3)
images = sorted(os.path.join(root, "data", "images", n) for n in os.listdir(os.path.join(root, "data", "images")))


def vitpipe(*args):
    return e2e.run(*args, expect_ok=False)


def foreign(name):
    """A folder holding a file the user wrote."""
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("mine\n")
    return d


def refused(what, result, folder):
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    ok = (result.returncode == 1 and len(errors) == 1 and folder in errors[0] and "--force" in errors[0]
          and "new or empty" in errors[0])
    checks.check(ok, f"{what}: refused with one line naming the folder and the choices", result.stderr.strip()[-300:])
    checks.check(os.listdir(folder) == ["notes.txt"], f"{what}: nothing written, the user's file kept",
                 str(os.listdir(folder)))


def succeeded(what, result):
    checks.check(result.returncode == 0, what, result.stderr.strip()[-300:])


INIT = ["init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "3"]
model = os.path.join(root, "model")
succeeded("init into a new folder", vitpipe(*INIT, "--out", model))
succeeded("init into its own previous output", vitpipe(*INIT, "--out", model))
refused("init into a folder of other files", vitpipe(*INIT, "--out", foreign("init-other")), os.path.join(root, "init-other"))
succeeded("init --force", vitpipe(*INIT, "--out", os.path.join(root, "init-other"), "--force"))

# export
exported = os.path.join(root, "exported")
os.makedirs(exported)  # empty
succeeded("export into an empty folder", vitpipe("export", model, "--out", exported))
succeeded("export into its own previous output", vitpipe("export", model, "--out", exported))
d = foreign("export-other")
refused("export into a folder of other files", vitpipe("export", model, "--out", d), d)
succeeded("export --force", vitpipe("export", model, "--out", d, "--force"))
checks.check(os.path.exists(os.path.join(d, "notes.txt")) and os.path.exists(os.path.join(d, "config.json")),
             "export --force: written beside the user's file")
r = vitpipe("export", model, "--out", d)
checks.check(r.returncode == 1 and d in r.stderr and "--force" in r.stderr,
             "export after an export --force: refused again (a forced folder never becomes vitpipe's own)",
             r.stderr.strip()[-300:])
r = vitpipe("explain", "--model", model, "--out", exported, images[0])
checks.check(r.returncode == 1 and "vitpipe export" in r.stderr and "--force" in r.stderr,
             "explain into export's output: refused, naming whose it is", r.stderr.strip()[-300:])

# explain: its own previous output is replaced; index.json lists exactly what the folder holds.
maps = os.path.join(root, "maps")
succeeded("explain into a new folder", vitpipe("explain", "--model", model, "--top", "2", "--out", maps, *images[:3]))
succeeded("explain again, other images", vitpipe("explain", "--model", model, "--out", maps, images[5]))
with open(os.path.join(maps, "index.json")) as f:
    index = json.load(f)
listed = {"index.json"} | {m["overlay"] for m in index["maps"]} | {m["map"] for m in index["maps"]}
held = {n for n in os.listdir(maps) if not n.startswith(".")}
checks.check(held == listed and len(index["maps"]) == 1, "explain again: index.json lists exactly what the folder holds",
             f"held {sorted(held)}, listed {sorted(listed)}")
d = foreign("explain-other")
refused("explain into a folder of other files", vitpipe("explain", "--model", model, "--out", d, images[0]), d)
succeeded("explain --force", vitpipe("explain", "--model", model, "--out", d, "--force", images[0]))

# data prepare
cache = os.path.join(root, "cache")
PREPARE = ["data", "prepare", "--data", f"csv:{csv}", "--image-size", "32", "--threads", "1"]
succeeded("data prepare into a new folder", vitpipe(*PREPARE, "--out", cache))
succeeded("data prepare into its own previous output", vitpipe(*PREPARE, "--out", cache))
d = foreign("cache-other")
refused("data prepare into a folder of other files", vitpipe(*PREPARE, "--out", d), d)
succeeded("data prepare --force", vitpipe(*PREPARE, "--out", d, "--force"))

# train: a folder of other files needs --force; its own run needs --resume.
TRAIN = e2e.train_args(model, f"csv:{csv}", "{out}", "--batch-size", "8", "--max-steps", "1", "--no-augment",
                       "--checkpoint-every", "1", "--eval-every", "1")


def train(out, *extra):
    return vitpipe(*[a.replace("{out}", out) for a in TRAIN], *extra)


d = foreign("train-other")
refused("train into a folder of other files", train(d), d)
succeeded("train --force", train(d, "--force"))
r = train(d, "--force")
checks.check(r.returncode == 1 and "--resume" in r.stderr, "train --force over its own run: still needs --resume",
             r.stderr.strip()[-300:])
r = train(cache)
checks.check(r.returncode == 1 and "vitpipe data prepare" in r.stderr, "train into a cache folder: refused, naming it",
             r.stderr.strip()[-300:])
# export --format onnx writes one file: a folder or a missing parent named up front in one line (it was "cannot
# rename OUT.tmp-PID to OUT: Is a directory" after the export's work).
for out, expected in ((os.path.join(root, "exported"), "is a folder; --format onnx writes one file"),
                      (os.path.join(root, "no-such-folder", "m.onnx"), "does not exist (create it first)")):
    r = vitpipe("export", model, "--format", "onnx", "--out", out)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error")]
    checks.check(r.returncode == 1 and len(errors) == 1 and out in errors[0] and expected in errors[0],
                 f"export --format onnx --out {os.path.basename(out)}: one line naming it", r.stderr.strip()[-300:])
e2e.cleanup(root)
checks.finish()
