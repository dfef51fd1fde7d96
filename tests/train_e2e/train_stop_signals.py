"""`vitpipe train` stopped by a signal mid-run loses nothing:
- SIGINT (one process), SIGTERM (2 pipeline stages as threads), SIGTERM to one rank of a 2-rank mpirun job, and
  SIGUSR1 to mpirun (which forwards it to every rank) stop the run at a step boundary: exit status 128 + the signal
  (130, 143, 138), one "stopped by" line, every rank at the same step, and a complete checkpoint of that step;
- every run is started with --resume auto: in an empty --output-dir it starts afresh, and the same command run again
  after the stop resumes it and ends with exactly the weights of an uninterrupted run (bit for bit); so does
  `train --resume --output-dir DIR` alone (the run's own train_options.json), while flags beside it that disagree
  with the run are refused, every one named in one message, with nothing touched;
- a second SIGTERM while that checkpoint is being written changes nothing (exit 143, the checkpoint complete); a
  second SIGINT then stops at once (exit 130) and leaves the previous checkpoint, which resumes exactly. The
  checkpoint's fsyncs are slowed by the fault shim (VITPIPE_FAULT_OP=delay) so the second signal lands mid-write.

usage: train_stop_signals.py --mpiexec MPIRUN   (FAULT_SHIM: the shim library; without it those cases are skipped)
"""
import argparse
import json
import os
import signal
import subprocess
import threading
import time

import e2e_common as e2e

ap = argparse.ArgumentParser()
ap.add_argument("--mpiexec", required=True)
args = ap.parse_args()
checks = e2e.Checks()
root = e2e.temp_dir("stop_signals")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 64, "val": 8}, seed=5)
data = "csv:" + csv
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "2", "--out", init)
# 8 steps an epoch, 160 in all: long enough (seconds) that a signal sent after the first checkpoint lands mid-run.
TOTAL = 160
common = ["--epochs", "20", "--batch-size", "8", "--micro-batch-size", "4", "--checkpoint-every", "4",
          "--threads", "1", "--export-last", "--log-every", "0"]
mpirun = [args.mpiexec, "--oversubscribe", "--allow-run-as-root", "-np", "2"]


def final_weights(out):
    return e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))[0]


def latest_checkpoint(out):
    latest = os.path.join(out, "checkpoints", "latest")
    return os.path.join(out, "checkpoints", open(latest).read().strip()) if os.path.exists(latest) else None


def reference(stages):
    out = os.path.join(root, f"reference_{stages}")
    e2e.run(*e2e.train_args(init, data, out, *common, "--pipeline-stages", stages))
    return final_weights(out)


def interrupted(name, command, send, env=None, wait_for=None):
    """Starts `command`, waits for its first checkpoint (or for a stderr line containing `wait_for`), calls
    send(process); returns (exit status, stderr)."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, **(env or {})))
    lines = []
    seen = threading.Event()

    def read():
        for line in process.stderr:
            lines.append(line)
            if wait_for and wait_for in line:
                seen.set()
    reader = threading.Thread(target=read)
    reader.start()
    out = command[command.index("--output-dir") + 1]
    deadline = time.monotonic() + 120
    while (latest_checkpoint(out) is None and process.poll() is None and time.monotonic() < deadline):
        time.sleep(0.02)
    if process.poll() is None:
        send(process, lines, seen)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    reader.join()
    stderr = "".join(lines)
    print(f"{name}: exit {process.returncode}; " + " | ".join(
        line.strip() for line in stderr.splitlines() if "stopped by" in line or "vitpipe: SIG" in line))
    return process.returncode, stderr


def check_stopped(name, status, stderr, expected_status, signal_name, out, ranks=1):
    checks.check("--resume auto: no checkpoint in " in stderr and ": starting" in stderr,
                 f"{name}: --resume auto in an empty --output-dir starts afresh", stderr[-800:])
    checks.check(status == expected_status, f"{name}: exit status {expected_status}", f"{status}\n{stderr[-1500:]}")
    stopped = [line for line in stderr.splitlines() if f"stopped by {signal_name} after step " in line]
    checks.check(len(stopped) == 1, f"{name}: one 'stopped by {signal_name}' line", "\n".join(stopped))
    directory = latest_checkpoint(out)
    state = json.load(open(os.path.join(directory, "trainer_state.json"))) if directory else {}
    step = state.get("step")
    checks.check(step is not None and 0 < step < TOTAL and stopped and f"after step {step} of" in stopped[0],
                 f"{name}: a complete checkpoint of the step it stopped at, mid-run", f"{directory} step {step}")
    if directory:
        e2e.read_safetensors(os.path.join(directory, "model.safetensors"))  # complete and well-formed
    if ranks > 1:  # every rank said which signal it saw; the ranks stopped together (one checkpoint of that step)
        checks.check(stderr.count("vitpipe: SIG") >= 1, f"{name}: the signal was received", stderr[-800:])


def check_resumes_exactly(name, command, expected):
    out = command[command.index("--output-dir") + 1]
    resumed = subprocess.run(command, capture_output=True, text=True)
    checks.check(resumed.returncode == 0 and "--resume auto: continuing " in resumed.stderr,
                 f"{name}: the same command (--resume auto) continues the run to the end",
                 resumed.stderr[-1500:])
    if resumed.returncode == 0:
        same, detail = e2e.same_tensors(expected, final_weights(out))
        checks.check(same, f"{name}: ends with exactly the weights of the uninterrupted run", detail)


def signal_once(signum):
    return lambda process, lines, seen: process.send_signal(signum)


one_stage = reference("1")
two_stages = reference("2")

# One process, Ctrl-C.
out = os.path.join(root, "sigint")
command = [e2e.VITPIPE, *e2e.train_args(init, data, out, *common), "--resume", "auto"]
status, stderr = interrupted("SIGINT", command, signal_once(signal.SIGINT))
check_stopped("SIGINT", status, stderr, 130, "SIGINT", out)
before = {name: open(os.path.join(out, name), "rb").read() for name in ("train_options.json", "metrics.jsonl")}
refused = subprocess.run([e2e.VITPIPE, "train", "--resume", "--output-dir", out, "--lr", "0.5", "--seed", "9",
                          "--epochs", "30"], capture_output=True, text=True)
checks.check(refused.returncode == 1 and "--lr 0.5 (the run: 0.0002)" in refused.stderr and
             "--seed 9 (the run: 42)" in refused.stderr and "--epochs" not in refused.stderr and
             refused.stderr.count("error:") == 1,
             "--resume with flags that disagree with the run: one message naming each (--epochs may change)",
             refused.stderr[-800:])
checks.check(all(open(os.path.join(out, name), "rb").read() == data_ for name, data_ in before.items()),
             "the refused command touched nothing")
alone = subprocess.run([e2e.VITPIPE, "train", "--resume", "--output-dir", out], capture_output=True, text=True)
checks.check(alone.returncode == 0, "`train --resume --output-dir DIR` alone continues the run", alone.stderr[-1500:])
if alone.returncode == 0:
    same, detail = e2e.same_tensors(one_stage, final_weights(out))
    checks.check(same, "SIGINT, resumed by --resume --output-dir alone: exactly the uninterrupted run's weights",
                 detail)

# Two pipeline stages as threads of one process, SIGTERM.
out = os.path.join(root, "sigterm")
command = [e2e.VITPIPE, *e2e.train_args(init, data, out, *common, "--pipeline-stages", "2"), "--resume",
               "auto"]
status, stderr = interrupted("SIGTERM, 2 stages", command, signal_once(signal.SIGTERM))
check_stopped("SIGTERM, 2 stages", status, stderr, 143, "SIGTERM", out)
check_resumes_exactly("SIGTERM, 2 stages", command, two_stages)


# Two MPI ranks: SIGTERM to rank 1 alone (rank 0 must stop at the same step, through the collective flag), and
# SIGUSR1 to mpirun (Open MPI forwards it to every rank).
def rank_one(process, lines, seen):
    ranks = e2e.rank_pids(process.pid)
    os.kill(ranks[1], signal.SIGTERM)


for name, send, expected_status, signal_name in (
        ("SIGTERM to rank 1 of 2", rank_one, 143, "SIGTERM"),
        ("SIGUSR1 to mpirun, 2 ranks", signal_once(signal.SIGUSR1), 138, "SIGUSR1")):
    out = os.path.join(root, "mpi_" + signal_name)
    command = [*mpirun, e2e.VITPIPE, *e2e.train_args(init, data, out, *common, "--pipeline-stages", "2"), "--resume",
               "auto"]
    status, stderr = interrupted(name, command, send)
    check_stopped(name, status, stderr, expected_status, signal_name, out, ranks=2)
    check_resumes_exactly(name, command, two_stages)

# A second signal while the stop's checkpoint is being written (its fsyncs slowed down by the fault shim).
shim = os.environ.get("FAULT_SHIM")
if shim:
    slow = {"LD_PRELOAD": shim, "VITPIPE_FAULT_OP": "delay", "VITPIPE_FAULT_PATH": "/checkpoints/step-",
            "VITPIPE_FAULT_DELAY_MS": "150"}

    def twice(signum):
        def send(process, lines, seen):
            process.send_signal(signum)
            before = len(lines)
            deadline = time.monotonic() + 60  # the next checkpoint file's fsync: a checkpoint is being written
            while (not any("fault_shim: delay" in line for line in lines[before:]) and process.poll() is None and
                   time.monotonic() < deadline):
                time.sleep(0.005)
            process.send_signal(signum)
        return send

    out = os.path.join(root, "sigterm_twice")
    command = [e2e.VITPIPE, *e2e.train_args(init, data, out, *common), "--resume", "auto"]
    status, stderr = interrupted("SIGTERM twice", command, twice(signal.SIGTERM), env=slow)
    check_stopped("SIGTERM twice", status, stderr, 143, "SIGTERM", out)
    check_resumes_exactly("SIGTERM twice", command, one_stage)

    out = os.path.join(root, "sigint_twice")
    command = [e2e.VITPIPE, *e2e.train_args(init, data, out, *common), "--resume", "auto"]
    status, stderr = interrupted("SIGINT twice", command, twice(signal.SIGINT), env=slow)
    checks.check(status == 130, "SIGINT twice: exit status 130 at once", f"{status}\n{stderr[-1500:]}")
    checks.check("SIGINT again: stopping now" in stderr and "stopped by" not in stderr,
                 "SIGINT twice: the second one stopped it in the middle of a checkpoint", stderr[-1500:])
    directory = latest_checkpoint(out)
    checks.check(directory is not None, "SIGINT twice: checkpoints/latest names a checkpoint", str(directory))
    if directory:
        e2e.read_safetensors(os.path.join(directory, "model.safetensors"))
    check_resumes_exactly("SIGINT twice", command, one_stage)
else:
    print("skipped: the second-signal cases (FAULT_SHIM not set)")

e2e.cleanup(root)
checks.finish()
