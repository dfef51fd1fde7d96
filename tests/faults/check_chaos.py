"""Chaos: RUNS trainings of 2 pipeline stages x 2 replicas under mpirun (4 ranks), each with one random rank
SIGKILLed at a random moment, then resumed with --resume (or restarted when the kill came before the first
checkpoint). Every run must end bit for bit at the weights, optimizer moments and exported model of an
uninterrupted run with the same layout, and mpirun must go down within 30 s of the kill.

Usage: check_chaos.py --mpiexec MPIEXEC [--runs N (default 3)] [--seed S]"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--mpiexec", required=True)
parser.add_argument("--runs", type=int, default=3)
parser.add_argument("--seed", type=int, default=11)
args = parser.parse_args()

env = dict(os.environ)
env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1", "OMPI_MCA_mpi_yield_when_idle": "1"})
checks = e2e.Checks()
root = e2e.temp_dir("chaos")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 32, "val": 8}, size=16, seed=6)
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--image-size", "16", "--seed", "3",
        "--out", init)
# 3 epochs of 4 steps (global batch 8 = micro-batch 2 x 2 micro-batches x 2 replicas), a checkpoint after every
# step, an evaluation (and export of the best model) every 3.
flags = ["train", "--model", init, "--data", "csv:" + csv, "--pipeline-stages", "2", "--epochs", "3",
         "--batch-size", "8", "--micro-batch-size", "2", "--lr", "1e-3", "--checkpoint-every", "1",
         "--eval-every", "3", "--log-every", "1", "--threads", "1", "--loader-threads", "1"]
mpirun = [args.mpiexec, "--oversubscribe", "--allow-run-as-root", "-np", "4"]


def train(out, *extra, timeout=300):
    return subprocess.run(mpirun + [e2e.VITPIPE, *flags, "--output-dir", out, *extra], env=env, capture_output=True,
                          text=True, timeout=timeout)


def latest(out):
    path = os.path.join(out, "checkpoints", "latest")
    return open(path).read().strip() if os.path.exists(path) else None


def state_of(out):
    directory = os.path.join(out, "checkpoints", latest(out))
    return {name: e2e.read_safetensors(os.path.join(directory, name))[0]
            for name in ("model.safetensors", "optimizer.safetensors")}


def running(pid):
    """Whether `pid` still runs: not exited, and not a zombie waiting for its parent."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


# The uninterrupted run.
reference = os.path.join(root, "reference")
started = time.monotonic()
result = train(reference)
reference_seconds = time.monotonic() - started
if result.returncode != 0:
    sys.exit(f"FAIL: the uninterrupted run failed:\n{result.stderr[-3000:]}")
expected = state_of(reference)
expected_model = e2e.read_safetensors(os.path.join(reference, "model", "model.safetensors"))[0]
print(f"uninterrupted run: {latest(reference)} in {reference_seconds:.1f} s")

rng = random.Random(args.seed)
outcomes = []
for run in range(args.runs):
    out = os.path.join(root, f"run{run:02d}")
    rank = rng.randrange(4)
    delay = rng.uniform(0.3, 0.95) * reference_seconds  # mostly after start-up, while it trains
    for attempt in range(6):  # a run that finishes before its kill is run again, killed earlier
        shutil.rmtree(out, ignore_errors=True)
        process = subprocess.Popen(mpirun + [e2e.VITPIPE, *flags, "--output-dir", out], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        start = time.monotonic()
        pids = {}
        while process.poll() is None and (time.monotonic() - start < delay or len(pids) < 4):
            pids = e2e.rank_pids(process.pid)
            time.sleep(0.005)
        # A rank already exited (a zombie until mpirun reaps it) ignores the kill, and the job ends 0: finished before
        # its kill, as when mpirun itself is done (run 0 of one CI run: killed "after 0.8 s" of a 0.9 s run).
        killed = process.poll() is None and rank in pids and running(pids[rank])
        if killed:
            break
        process.communicate()
        delay /= 2
    mid_write = False
    if killed:
        try:
            mid_write = any(".tmp-" in n for n in os.listdir(os.path.join(out, "checkpoints")))
        except FileNotFoundError:
            pass
        os.kill(pids[rank], signal.SIGKILL)
        kill_time = time.monotonic()
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        checks.check(False, f"run {run}: mpirun went down after rank {rank} was killed", "still running after 60 s")
        continue
    down_seconds = time.monotonic() - kill_time if killed else 0.0
    at_kill = latest(out)
    if killed:
        checks.check(process.returncode != 0 and down_seconds < 30,
                     f"run {run}: rank {rank} killed after {delay:.1f} s; mpirun exited {process.returncode} "
                     f"{down_seconds:.1f} s later", stderr[-300:] if process.returncode == 0 else "")
        resumed = train(out, *(["--resume"] if at_kill else []))
        checks.check(resumed.returncode == 0, f"run {run}: " + ("--resume from " + at_kill if at_kill else
                                                                "restart (killed before the first checkpoint)") +
                     " finishes", resumed.stderr[-2000:] if resumed.returncode else "")
    else:
        checks.check(False, f"run {run}: rank {rank} killed", "every attempt finished before its kill")
    if latest(out) is None:
        outcomes.append((run, rank, delay, at_kill, mid_write, False))
        continue
    same = True
    for name, tensors in state_of(out).items():
        ok, detail = e2e.same_tensors(tensors, expected[name])
        same &= checks.check(ok, f"run {run}: {name} bit for bit equal to the uninterrupted run's", detail)
    ok, detail = e2e.same_tensors(e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))[0],
                                  expected_model)
    same &= checks.check(ok, f"run {run}: exported model/ bit for bit equal to the uninterrupted run's", detail)
    outcomes.append((run, rank, delay, at_kill, mid_write, same))
    e2e.cleanup(out)

print("\nrun  killed rank  at (s)  latest checkpoint at the kill  checkpoint write cut  bit-exact after resume")
for run, rank, delay, at_kill, mid_write, same in outcomes:
    print(f"{run:3d}  {rank:11d}  {delay:6.1f}  {at_kill or '(none: restarted)':29s}  {str(mid_write):20s}  {same}")
print(f"{sum(1 for o in outcomes if o[5])} of {args.runs} runs end bit for bit at the uninterrupted run's weights")
e2e.cleanup(root)
checks.finish()
