"""The disk filling up (ENOSPC) or failing (EIO) under a running `vitpipe train` / `vitpipe data prepare`, through
the LD_PRELOAD shim tools/fault_shim (built by CMake: $FAULT_SHIM). Each case checks that the fault really fired
(the shim says so on stderr), that vitpipe stopped with exit code 1 and one clear error line, that what was already
written (the previous checkpoint, model/, no half-written cache that looks valid) is intact, and that `--resume`
then ends bit for bit at the weights of an uninterrupted run.

Usage: check_disk_faults.py [CASE ...]   cases: checkpoint_enospc checkpoint_fsync_eio checkpoint_rename_eio
latest_rename_enospc export_enospc cache_enospc cache_eio (default: all)."""

import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

SHIM = os.environ["FAULT_SHIM"]
checks = e2e.Checks()
root = e2e.temp_dir("faults")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 32, "val": 8}, size=16, seed=3)
data = "csv:" + csv
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--image-size", "16", "--seed", "2",
        "--out", init)
# 2 epochs of 4 steps, a checkpoint after every step, an evaluation (and so an export of model/) every 2. A constant
# learning rate, so a run stopped after N steps holds exactly what an uninterrupted run held at step N.
common = ["--batch-size", "8", "--micro-batch-size", "4", "--lr", "1e-3", "--schedule", "constant",
          "--warmup-steps", "0", "--checkpoint-every", "1", "--eval-every", "2", "--log-every", "1",
          "--threads", "1"]


def train(out, *extra, fault=None, expect_ok=True, source=data):
    if "--max-steps" not in extra and "--epochs" not in extra:
        extra = ("--epochs", "2", *extra)
    env = dict(os.environ)
    if fault:
        env.update({"LD_PRELOAD": SHIM, **fault})
    return e2e.run(*e2e.train_args(init, source, out, *common, *extra), expect_ok=expect_ok, env=env)


def weights(directory, name="model.safetensors"):
    return e2e.read_safetensors(os.path.join(directory, name))[0]


def latest(out):
    return open(os.path.join(out, "checkpoints", "latest")).read().strip()


def digest(directory):
    """The model's files by content. README.md (the model card) is left out: a finished run writes it from its own
    run directory's files, so it names that run; a run stopped by a fault never gets that far."""
    result = {}
    for base, _, files in os.walk(directory):
        for name in files:
            if name == "README.md" and base == directory:
                continue
            path = os.path.join(base, name)
            result[os.path.relpath(path, directory)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return result


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def check_fault(result, what, errno_name, reason):
    """The shim fired, vitpipe exited 1 with one clear error line naming the reason."""
    checks.check(f"fault_shim: {errno_name}" in result.stderr, f"{what}: the shim injected {errno_name}",
                 result.stderr[-1500:])
    errors = error_lines(result.stderr)
    checks.check(result.returncode == 1 and len(errors) == 1 and reason in errors[0],
                 f"{what}: exit code 1 and one error line saying '{reason}'",
                 f"exit {result.returncode}: {errors or result.stderr[-800:]}")
    if errors:
        print(f"{what}: {errors[0]}")


def check_no_temporaries(out, what):
    leftovers = [os.path.join(base, name) for base, dirs, files in os.walk(out) for name in dirs + files
                 if ".tmp-" in name]
    checks.check(not leftovers, f"{what}: no half-written temporaries left", f"{leftovers[:3]}")


# The uninterrupted run, and the same run stopped after 2 steps (what the faulty runs must still hold).
straight = os.path.join(root, "straight")
train(straight)
final_weights = weights(os.path.join(straight, "checkpoints", latest(straight)))
at_step_2 = os.path.join(root, "at_step_2")
train(at_step_2, "--max-steps", "2")
checkpoint_bytes = sum(os.path.getsize(os.path.join(base, name))
                       for base, _, files in os.walk(os.path.join(at_step_2, "checkpoints", "step-00000002"))
                       for name in files)
pointer_bytes = len("step-00000002\n")


def resume_matches_straight(out, what):
    train(out, "--resume")
    ok, detail = e2e.same_tensors(weights(os.path.join(out, "checkpoints", latest(out))), final_weights)
    checks.check(ok and latest(out) == latest(straight),
                 f"{what}: --resume then ends bit for bit at the uninterrupted run's weights", detail)


def checkpoint_case(name, fault, errno_name, reason, expect_latest="step-00000002"):
    out = os.path.join(root, name)
    result = train(out, fault=fault, expect_ok=False)
    check_fault(result, name, errno_name, reason)
    checks.check(latest(out) == expect_latest, f"{name}: checkpoints/latest still names {expect_latest}",
                 latest(out))
    previous = os.path.join(out, "checkpoints", expect_latest)
    reference = os.path.join(at_step_2, "checkpoints", "step-00000002") if expect_latest == "step-00000002" else None
    if reference:
        ok, detail = e2e.same_tensors(weights(previous), weights(reference))
        checks.check(ok, f"{name}: the previous checkpoint is intact (= the run stopped at step 2)", detail)
        checks.check(digest(os.path.join(out, "model")) == digest(os.path.join(at_step_2, "model")),
                     f"{name}: model/ intact (= the run stopped at step 2, file for file)")
    check_no_temporaries(out, name)
    resume_matches_straight(out, name)


cases = sys.argv[1:] or ["checkpoint_enospc", "checkpoint_fsync_eio", "checkpoint_rename_eio", "latest_rename_enospc",
                         "export_enospc", "cache_enospc", "cache_eio"]

if "checkpoint_enospc" in cases:
    # The disk fills up halfway through the third checkpoint (2 whole ones and their pointer files fit).
    checkpoint_case("checkpoint_enospc", {"VITPIPE_FAULT_PATH": "/checkpoints/",
                                          "VITPIPE_FAULT_AFTER_BYTES": str(2 * (checkpoint_bytes + pointer_bytes) +
                                                                           checkpoint_bytes // 2)},
                    "ENOSPC", "No space left on device")
if "checkpoint_fsync_eio" in cases:
    checkpoint_case("checkpoint_fsync_eio", {"VITPIPE_FAULT_PATH": "/checkpoints/step-00000003.tmp-",
                                             "VITPIPE_FAULT_OP": "fsync", "VITPIPE_FAULT_ERRNO": "EIO"},
                    "EIO", "Input/output error")
if "checkpoint_rename_eio" in cases:
    # The finished staging directory cannot be renamed into place.
    checkpoint_case("checkpoint_rename_eio", {"VITPIPE_FAULT_PATH": "/checkpoints/step-00000003$",
                                              "VITPIPE_FAULT_OP": "rename", "VITPIPE_FAULT_ERRNO": "EIO"},
                    "EIO", "Input/output error")
if "latest_rename_enospc" in cases:
    # step-00000003/ is complete but checkpoints/latest cannot be updated: latest keeps naming step 2.
    checkpoint_case("latest_rename_enospc", {"VITPIPE_FAULT_PATH": "/checkpoints/latest$",
                                             "VITPIPE_FAULT_OP": "rename", "VITPIPE_FAULT_AFTER_CALLS": "2"},
                    "ENOSPC", "No space left on device")
if "export_enospc" in cases:
    # model/ of a finished run (--export-last: written once, at the end); the run extended by an epoch runs out of
    # space while it replaces model/: the old model/ stays, file for file, and the extended run's checkpoints too.
    out = os.path.join(root, "export_enospc")
    train(out, "--export-last")
    before = digest(os.path.join(out, "model"))
    model_bytes = sum(os.path.getsize(os.path.join(out, "model", n)) for n in os.listdir(os.path.join(out, "model")))
    result = train(out, "--resume", "--export-last", "--epochs", "3", expect_ok=False,
                   fault={"VITPIPE_FAULT_PATH": "/model.tmp-", "VITPIPE_FAULT_AFTER_BYTES": str(model_bytes // 3)})
    check_fault(result, "export_enospc", "ENOSPC", "No space left on device")
    checks.check(digest(os.path.join(out, "model")) == before, "export_enospc: model/ intact, file for file")
    checks.check(latest(out) == "step-00000012", "export_enospc: the extended run's last checkpoint is complete",
                 latest(out))
    check_no_temporaries(out, "export_enospc")
    train(out, "--resume", "--export-last", "--epochs", "3")
    ok, detail = e2e.same_tensors(weights(os.path.join(out, "model")),
                                  weights(os.path.join(out, "checkpoints", "step-00000012")))
    checks.check(ok, "export_enospc: --resume then exports the last checkpoint's weights to model/", detail)


def prepare(out, fault=None, expect_ok=True):
    env = dict(os.environ)
    if fault:
        env.update({"LD_PRELOAD": SHIM, **fault})
    return e2e.run("data", "prepare", "--data", data, "--image-size", "16", "--threads", "1", "--out", out,
                   expect_ok=expect_ok, env=env)


for case, fault, errno_name, reason in (
        ("cache_enospc", {"VITPIPE_FAULT_AFTER_BYTES": "3000"}, "ENOSPC", "No space left on device"),
        ("cache_eio", {"VITPIPE_FAULT_OP": "fsync", "VITPIPE_FAULT_ERRNO": "EIO"}, "EIO", "Input/output error")):
    if case not in cases:
        continue
    cache = os.path.join(root, case)
    result = prepare(cache, fault={"VITPIPE_FAULT_PATH": cache + "/", **fault}, expect_ok=False)
    check_fault(result, case, errno_name, reason)
    checks.check(not os.path.exists(os.path.join(cache, "manifest.json")),
                 f"{case}: no manifest.json, so nothing looks like a finished cache")
    refused = train(os.path.join(root, case + "_train"), source="cache:" + cache, expect_ok=False)
    checks.check(refused.returncode == 1 and "not a finished cache" in refused.stderr,
                 f"{case}: training on the broken cache is refused clearly", refused.stderr[-400:])
    check_no_temporaries(cache, case)
    prepare(cache)  # the disk is back: the same command now succeeds, over what the failed run left
    again = train(os.path.join(root, case + "_retrained"), "--max-steps", "2", source="cache:" + cache)
    checks.check(again.returncode == 0, f"{case}: after a successful prepare the cache trains")

e2e.cleanup(root)
checks.finish()
