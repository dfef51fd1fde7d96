"""`vitpipe train --resume` end to end, one process, --threads 2, augmentation on, a partial last batch per epoch:
- a run SIGKILLed at checkpoints and at random moments, resumed each time, ends with exactly the weights, optimizer
  state, exported model/ and metrics of the uninterrupted run (bit for bit); after every kill the latest checkpoint
  is complete and loadable (independent reader, `vitpipe export`, `vitpipe eval`);
- metrics.jsonl has no duplicate records after resuming (the killed run's later lines are dropped);
- resuming with a larger --epochs extends a finished run: with a constant schedule, 1 epoch + resume to 2 equals
  2 epochs straight;
- resuming a finished run with the same flags changes nothing and duplicates no record;
- `train` refuses an output directory that holds a run unless --resume, and --resume with a changed --batch-size,
  touching nothing;
- a pipeline of 2 stages (threads) killed and resumed = uninterrupted, and its checkpoint resumed by 1 stage
  continues as 2 stages do."""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import time

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("resume")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 100, "val": 32}, seed=5)  # 6 batches of 16 + one of 4
data = "csv:" + csv
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "1", "--out", init)

common = ["--epochs", "3", "--batch-size", "16", "--micro-batch-size", "4", "--lr", "1e-3", "--checkpoint-every", "1",
          "--eval-every", "4", "--log-every", "1", "--threads", "2"]
steps = 3 * 7


def checkpoint_dir(out):
    latest = os.path.join(out, "checkpoints", "latest")
    if not os.path.exists(latest):
        return None
    return os.path.join(out, "checkpoints", open(latest).read().strip())


def weights(directory, name="model.safetensors"):
    return e2e.read_safetensors(os.path.join(directory, name))[0]


def tree_digest(out):
    """Every file under `out` with its content hash, to show a refused command touched nothing."""
    digest = {}
    for base, _, files in os.walk(out):
        for name in files:
            path = os.path.join(base, name)
            digest[os.path.relpath(path, out)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return digest


def record_keys(records):
    return [(x["type"], x.get("split"), x["step"]) for x in records]


def comparable(records):
    """The deterministic part of each record (throughput is not). A step_time record times the steps of one process:
    every process that trained writes one, so a run extended by --resume holds one per process."""
    fields = ("type", "split", "step", "loss", "lr", "grad_norm", "mean_auc", "auc", "epoch")
    return [{k: x[k] for k in fields if k in x} for x in records if x["type"] != "step_time"]


def check_checkpoint_complete(out, what):
    directory = checkpoint_dir(out)
    if not checks.check(directory is not None and os.path.isdir(directory), f"{what}: checkpoints/latest names a "
                        "directory", str(directory)):
        return None
    state = json.load(open(os.path.join(directory, "trainer_state.json")))
    model = weights(directory)
    optimizer = weights(directory, "optimizer.safetensors")
    config = json.load(open(os.path.join(directory, "config.json")))
    numel = sum(t.size for t in model.values())
    checks.check(state["step"] == int(os.path.basename(directory)[5:]) and config["id2label"]["3"] == "white" and
                 all(t.size == numel for t in optimizer.values()) and len(optimizer) >= 2,
                 f"{what}: checkpoint step {state['step']} complete (state, config, model, optimizer moments)")
    exported = os.path.join(root, f"export_{state['step']}_{random.randrange(10**6)}")
    e2e.run("export", directory, "--out", exported)
    ok, detail = e2e.same_tensors(weights(exported), model)
    checks.check(ok, f"{what}: `vitpipe export` of the checkpoint loads it", detail)
    evaluation = json.loads(e2e.run("eval", "--model", directory, "--data", data, "--split", "val", "--json",
                                    "--threads", "1").stdout)
    checks.check(evaluation["rows"] == 32 and 0 <= evaluation["mean_auc"] <= 1, f"{what}: `vitpipe eval` runs on it")
    return state["step"]


# --- the uninterrupted run ---
straight = os.path.join(root, "straight")
e2e.run(*e2e.train_args(init, data, straight, *common))
straight_records = e2e.read_metrics(straight)

# --- the same run, killed and resumed ---
# Kill 1 right after the first checkpoint appears; kill 2 the moment a checkpoint's staging directory appears (a
# write in progress); kill 3 after a random pause of up to about a step (inside a step, an evaluation, an export or
# a write). The pause scales with this machine's speed (the straight run's time per step).
killed = os.path.join(root, "killed")
started = time.monotonic()
e2e.run(*e2e.train_args(init, data, os.path.join(root, "timing"), *common))
seconds_per_step = (time.monotonic() - started) / steps
rng = random.Random(7)
kills, resume = 0, []


def staging_present(out, pid=None):
    """A checkpoint being written (by process `pid`, or any)."""
    try:
        return any((f".tmp-{pid}" if pid else ".tmp-") in name for name in os.listdir(os.path.join(out, "checkpoints")))
    except FileNotFoundError:
        return False


while True:
    args = e2e.train_args(init, data, killed, *common, *resume)
    process = subprocess.Popen([e2e.VITPIPE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kills < 3:
        start_step = -1
        if resume:
            start_step = json.load(open(os.path.join(checkpoint_dir(killed), "trainer_state.json")))["step"]
        if kills == 1:
            while process.poll() is None and not staging_present(killed, process.pid):
                pass  # busy: a checkpoint write of this small model takes a few milliseconds
        else:
            while process.poll() is None:
                directory = checkpoint_dir(killed)
                if directory and int(os.path.basename(directory)[5:]) > start_step:
                    break
                time.sleep(0.002)
            if kills == 2:
                time.sleep(rng.uniform(0.0, 1.5 * seconds_per_step))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
            process.stderr.close()
            kills += 1
            mid_write = staging_present(killed, process.pid)
            step = check_checkpoint_complete(killed, f"after kill {kills}")
            print(f"kill {kills}: latest checkpoint at step {step}" +
                  (", a checkpoint write was cut" if mid_write else ""))
            resume = ["--resume"]
            continue
    _, stderr = process.communicate()
    checks.check(process.returncode == 0, "the resumed run finishes", stderr[-2000:] if process.returncode else "")
    break
checks.check(kills >= 2, "the run was killed at least twice before it finished", f"{kills} kills")

# What a kill inside a write leaves (whatever these kills happened to hit): removed when the run is resumed (here a
# finished one, which changes nothing else).
os.makedirs(os.path.join(killed, "model.tmp-999999"), exist_ok=True)
os.makedirs(os.path.join(killed, "checkpoints", "step-00000099.tmp-999999"), exist_ok=True)
for name in ("metrics.jsonl.tmp-999999", os.path.join("checkpoints", "latest.tmp-999999"), "notes.tmp-1"):
    open(os.path.join(killed, name), "w").close()
e2e.run(*e2e.train_args(init, data, killed, *common, "--resume"))

final = checkpoint_dir(killed)
checks.check(os.path.basename(final) == f"step-{steps:08d}", "the killed run reaches the last step", final)
for name in ("model.safetensors", "optimizer.safetensors"):
    ok, detail = e2e.same_tensors(weights(final, name), weights(checkpoint_dir(straight), name))
    checks.check(ok, f"killed + resumed = uninterrupted: {name} bit for bit", detail)
ok, detail = e2e.same_tensors(weights(os.path.join(killed, "model")), weights(os.path.join(straight, "model")))
checks.check(ok, "killed + resumed = uninterrupted: exported model/ bit for bit", detail)
killed_records = e2e.read_metrics(killed)
checks.check(len(record_keys(killed_records)) == len(set(record_keys(killed_records))),
             "metrics.jsonl after resuming: no duplicate records")
checks.check(comparable(killed_records) == comparable(straight_records),
             "metrics.jsonl after resuming = the uninterrupted run's (losses, learning rates, evaluations)",
             f"{len(killed_records)} vs {len(straight_records)} records")
leftovers = [name for base in (killed, os.path.join(killed, "checkpoints")) for name in os.listdir(base)
             if ".tmp" in name]
checks.check(leftovers == ["notes.tmp-1"], "no temporaries of killed runs left behind (and no other file removed)",
             f"{leftovers}")
kept = sorted(name for name in os.listdir(os.path.join(killed, "checkpoints")) if name.startswith("step-"))
best_step = json.load(open(os.path.join(killed, "checkpoints", kept[-1], "trainer_state.json")))["best_step"]
newest_and_best = set(kept[-2:]) | ({f"step-{best_step:08d}"} & set(kept))
checks.check(set(kept) == newest_and_best and len(kept) <= 3,
             "old checkpoints are pruned (the newest 2 kept, and the best model's)", f"{kept}, best step {best_step}")

# --- resuming a finished run with the same flags: nothing changes, nothing is duplicated ---
before = tree_digest(os.path.join(straight, "checkpoints"))
r = e2e.run(*e2e.train_args(init, data, straight, *common, "--resume"))
checks.check(tree_digest(os.path.join(straight, "checkpoints")) == before, "resuming a finished run: checkpoints "
             "unchanged")
again = e2e.read_metrics(straight)
checks.check(comparable(again) == comparable(straight_records), "resuming a finished run: metrics.jsonl the same, no "
             "duplicated final evaluation", f"{record_keys(again)[-3:]}")

# --- refusals that must touch nothing ---
before = tree_digest(straight)
r = e2e.run(*e2e.train_args(init, data, straight, *common), expect_ok=False)
checks.check(r.returncode != 0 and "already holds a training run" in r.stderr and "--resume" in r.stderr,
             "train refuses an output directory holding a run (without --resume)", r.stderr.strip()[-200:])
checks.check(tree_digest(straight) == before, "... and touches nothing in it")
without_checkpoints = os.path.join(root, "without_checkpoints")
shutil.copytree(straight, without_checkpoints)
shutil.rmtree(os.path.join(without_checkpoints, "checkpoints"))
before_copy = tree_digest(without_checkpoints)
r = e2e.run(*e2e.train_args(init, data, without_checkpoints, *common), expect_ok=False)
checks.check(r.returncode != 0 and "already holds an exported model" in r.stderr,
             "train refuses an output directory holding an exported model/ (its checkpoints deleted)",
             r.stderr.strip()[-200:])
checks.check(tree_digest(without_checkpoints) == before_copy, "... and touches nothing in it")
common_b32 = [x if x != "16" else "32" for x in common]
r = e2e.run(*e2e.train_args(init, data, straight, *common_b32, "--resume"), expect_ok=False)
checks.check(r.returncode != 0 and "--batch-size 32 (the run: 16)" in r.stderr,
             "--resume with another --batch-size is refused", r.stderr.strip()[-200:])
checks.check(tree_digest(straight) == before, "... and touches nothing")

# --- extending a finished run: constant schedule, 1 epoch + resume to 2 = 2 epochs straight ---
constant = ["--batch-size", "16", "--micro-batch-size", "8", "--lr", "1e-3", "--schedule", "constant",
            "--warmup-steps", "0", "--log-every", "1", "--threads", "2"]
two = os.path.join(root, "two_epochs")
e2e.run(*e2e.train_args(init, data, two, "--epochs", "2", *constant))
extended = os.path.join(root, "one_then_two")
e2e.run(*e2e.train_args(init, data, extended, "--epochs", "1", *constant))
one_step = json.load(open(os.path.join(checkpoint_dir(extended), "trainer_state.json")))["step"]
e2e.run(*e2e.train_args(init, data, extended, "--epochs", "2", "--resume", *constant))
checks.check(os.path.basename(checkpoint_dir(extended)) == os.path.basename(checkpoint_dir(two)) and one_step == 7,
             "the extended run ends at the 2-epoch step", checkpoint_dir(extended))
for name in ("model.safetensors", "optimizer.safetensors"):
    ok, detail = e2e.same_tensors(weights(checkpoint_dir(extended), name), weights(checkpoint_dir(two), name))
    checks.check(ok, f"1 epoch + resume to 2 = 2 epochs: {name} bit for bit", detail)
extended_records, two_records = e2e.read_metrics(extended), e2e.read_metrics(two)
# Each process times its own steps after its first (the resumed one's first also creates oneDNN's primitives).
checks.check([(x["step"], x["measured_steps"]) for x in extended_records if x["type"] == "step_time"] ==
             [(7, 6), (14, 6)], "1 epoch + resume to 2: a step_time record per process, its first step left out",
             f"{[x for x in extended_records if x['type'] == 'step_time']}")
checks.check(comparable(extended_records) == comparable(two_records),
             "1 epoch + resume to 2 = 2 epochs: the same metrics.jsonl records", f"{record_keys(extended_records)}")

# --- a pipeline of 2 stages (threads of this process): killed once and resumed = uninterrupted; and its checkpoint
# resumed by a single stage (another layout) continues from the same weights ---
staged = ["--epochs", "2", "--batch-size", "16", "--micro-batch-size", "4", "--lr", "1e-3", "--checkpoint-every", "1",
          "--log-every", "1", "--threads", "2", "--pipeline-stages", "2"]
pipeline_straight = os.path.join(root, "pipeline_straight")
e2e.run(*e2e.train_args(init, data, pipeline_straight, *staged))
pipeline_killed = os.path.join(root, "pipeline_killed")
process = subprocess.Popen([e2e.VITPIPE, *e2e.train_args(init, data, pipeline_killed, *staged)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
# From the 3rd step's checkpoint on (a loaded machine may poll past step 3 itself: what matters is a kill mid-run).
while process.poll() is None and not (checkpoint_dir(pipeline_killed) and
                                      int(checkpoint_dir(pipeline_killed).rsplit("-", 1)[1]) >= 3):
    time.sleep(0.002)
cut = process.poll() is None
process.send_signal(signal.SIGKILL)
process.wait()
checks.check(cut, "2 stages: killed mid-run")
e2e.run(*e2e.train_args(init, data, pipeline_killed, *staged, "--resume"))
for name in ("model.safetensors", "optimizer.safetensors"):
    ok, detail = e2e.same_tensors(weights(checkpoint_dir(pipeline_killed), name),
                                  weights(checkpoint_dir(pipeline_straight), name))
    checks.check(ok, f"2 stages: killed + resumed = uninterrupted: {name} bit for bit", detail)
# Another layout resumes the same checkpoint: a 3rd epoch on 1 stage ends where it does on 2 (up to rounding).
continued = {}
for layout, flags in (("two_stages", staged), ("one_stage", staged[:-2])):
    directory = os.path.join(root, f"continued_{layout}")
    shutil.copytree(pipeline_straight, directory)
    flags = ["--epochs", "3", *flags[2:]]  # staged starts with --epochs 2
    e2e.run(*e2e.train_args(init, data, directory, *flags, "--resume"))
    continued[layout] = directory
checks.check(all(os.path.basename(checkpoint_dir(d)) == "step-00000021" for d in continued.values()),
             "a 2-stage checkpoint resumed by 1 and by 2 stages: 3 epochs")
difference, where = e2e.max_relative_difference(weights(checkpoint_dir(continued["two_stages"])),
                                                weights(checkpoint_dir(continued["one_stage"])))
checks.check(difference < 1e-4, "a 2-stage checkpoint resumed by 1 stage continues as 2 stages do",
             f"max relative difference {difference:.2e} ({where})")
moved, _ = e2e.max_relative_difference(weights(checkpoint_dir(continued["one_stage"])),
                                       weights(checkpoint_dir(pipeline_straight)))
checks.check(moved > 1e-3, "... and the 3rd epoch moved the weights", f"{moved:.2e}")

e2e.cleanup(root)
checks.finish()
