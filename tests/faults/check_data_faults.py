"""Images and caches that change under (or before) a training run: never a crash; a clear error (exit code 1, one
line naming the file), or with --skip-unreadable the image skipped and counted.
- image files deleted and truncated while an epoch runs (csv: data, decoded from disk every epoch);
- a packed cache whose pixels.u8 was edited in place, truncated, or whose index.json was edited after `prepare`;
- a packed cache truncated while training reads it (memory-mapped: SIGBUS, turned into a clear error)."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

checks = e2e.Checks()
root = e2e.temp_dir("data_faults")
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--image-size", "16", "--seed", "2",
        "--out", init)
common = ["--batch-size", "8", "--micro-batch-size", "4", "--lr", "1e-3", "--log-every", "1", "--eval-every", "0",
          "--threads", "1"]


def fresh_dataset(name):
    return e2e.make_blob_dataset(os.path.join(root, name), {"train": 32, "val": 8}, size=16, seed=4)


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def start(data, out, *extra):
    args = e2e.train_args(init, data, out, *common, *extra)
    return subprocess.Popen([e2e.VITPIPE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for_training(process, out, timeout=120):
    """Until the first training step is logged (the epoch is running)."""
    deadline = time.monotonic() + timeout
    metrics = os.path.join(out, "metrics.jsonl")
    while time.monotonic() < deadline and process.poll() is None:
        if os.path.exists(metrics) and os.path.getsize(metrics) > 0:
            return True
        time.sleep(0.002)
    return False


def check_clear_error(process, what, phrase):
    _, stderr = process.communicate(timeout=300)
    errors = error_lines(stderr)
    checks.check(process.returncode == 1 and len(errors) == 1 and phrase in errors[0],
                 f"{what}: exit code 1 (no crash) and one error line saying '{phrase}'",
                 f"exit {process.returncode}: {errors or stderr[-800:]}")
    if errors:
        print(f"{what}: {errors[0]}")
    return stderr


def check_skipped(process, what, at_least):
    _, stderr = process.communicate(timeout=300)
    checks.check(process.returncode == 0, f"{what}: --skip-unreadable finishes the run",
                 stderr[-800:] if process.returncode else "")
    counted = [line for line in stderr.splitlines() if "unreadable images were skipped" in line]
    skipped = int(counted[-1].split()[-5]) if counted else 0
    checks.check(skipped >= at_least, f"{what}: the skipped images are counted ({skipped} skips, at least "
                 f"{at_least})", counted[-1] if counted else stderr[-400:])


def spoil_images(directory, names):
    """Half of `names` deleted, half truncated to 20 bytes (a PNG cut short)."""
    for k, name in enumerate(names):
        path = os.path.join(directory, name)
        if k % 2 == 0:
            os.remove(path)
        else:
            with open(path, "r+b") as f:
                f.truncate(20)


def train_image_names(csv):
    return [row["path"] for row in e2e.read_csv_rows(csv) if row["split"] == "train"]


# --- image files deleted and truncated while an epoch runs ---
for skip in (False, True):
    what = "images spoiled mid-run" + (" with --skip-unreadable" if skip else "")
    csv = fresh_dataset(f"images_{int(skip)}")
    out = os.path.join(root, f"images_out_{int(skip)}")
    process = start("csv:" + csv, out, "--epochs", "60", *(["--skip-unreadable"] if skip else []))
    running = wait_for_training(process, out)
    # Four of 32: every batch of 8 keeps at least the 2 rows its 2 micro-batches need.
    spoil_images(os.path.dirname(csv), train_image_names(csv)[::8])
    checks.check(running, f"{what}: the files changed while the run was training")
    if skip:
        check_skipped(process, what, at_least=4)
    else:
        check_clear_error(process, what, "images/train_")

# --- a packed cache modified after prepare ---
csv = fresh_dataset("cache_source")


def prepared(name):
    cache = os.path.join(root, name)
    e2e.run("data", "prepare", "--data", "csv:" + csv, "--image-size", "16", "--threads", "1", "--out", cache)
    return cache


def train_on(cache, name, *extra, expect_ok=False):
    return e2e.run(*e2e.train_args(init, "cache:" + cache, os.path.join(root, name), *common, "--epochs", "2",
                                   *extra), expect_ok=expect_ok)


def check_refused(result, what, phrase):
    errors = error_lines(result.stderr)
    checks.check(result.returncode == 1 and len(errors) == 1 and phrase in errors[0],
                 f"{what}: exit code 1 and one error line saying '{phrase}'",
                 f"exit {result.returncode}: {errors or result.stderr[-800:]}")
    if errors:
        print(f"{what}: {errors[0]}")


manifest_of = lambda cache: json.load(open(os.path.join(cache, "manifest.json")))  # noqa: E731
index_of = lambda cache: json.load(open(os.path.join(cache, "index.json")))  # noqa: E731

# Pixels edited in place (same size): the records' checksums catch it on read.
cache = prepared("cache_edited")
index = index_of(cache)
train_rows = [i for i, split in enumerate(index["source_split"]) if split == "train"]
with open(os.path.join(cache, "pixels.u8"), "r+b") as f:
    for i in train_rows[::8]:
        f.seek(index["offsets"][i] + 5)
        f.write(b"\x00\x01\x02")
check_refused(train_on(cache, "edited_out"), "cache pixels edited after prepare", "do not match the checksum")
result = train_on(cache, "edited_skip", "--skip-unreadable", expect_ok=True)
counted = [line for line in result.stderr.splitlines() if "unreadable images were skipped" in line]
checks.check(bool(counted) and int(counted[-1].split()[-5]) >= 4,
             "cache pixels edited after prepare, --skip-unreadable: finishes and counts the skipped images",
             counted[-1] if counted else result.stderr[-400:])

# pixels.u8 truncated, index.json edited: refused when the cache is opened.
cache = prepared("cache_truncated")
size = os.path.getsize(os.path.join(cache, "pixels.u8"))
with open(os.path.join(cache, "pixels.u8"), "r+b") as f:
    f.truncate(size // 2)
check_refused(train_on(cache, "truncated_out"), "cache pixels.u8 truncated after prepare",
              f"pixels.u8: {size // 2} bytes, the manifest says {size}")
cache = prepared("cache_index_edited")
with open(os.path.join(cache, "index.json"), "r+b") as f:
    f.seek(10)
    f.write(b"X")
check_refused(train_on(cache, "index_out"), "cache index.json edited after prepare", "does not match manifest.json")

# pixels.u8 truncated while training reads it (mapped into memory: the next read of a vanished page is SIGBUS).
cache = prepared("cache_truncated_live")
out = os.path.join(root, "live_out")
process = start("cache:" + cache, out, "--epochs", "400")
running = wait_for_training(process, out)
with open(os.path.join(cache, "pixels.u8"), "r+b") as f:
    f.truncate(0)
checks.check(running, "cache truncated mid-run: the file changed while the run was training")
check_clear_error(process, "cache truncated mid-run", "pixels.u8 changed while it was being read")

e2e.cleanup(root)
checks.finish()
