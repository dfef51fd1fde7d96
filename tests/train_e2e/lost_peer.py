#!/usr/bin/python3
"""A rank that stops answering mid-run ends the job instead of hanging it.

`mpirun -np 2 vitpipe train` (2 pipeline stages) with VITPIPE_COMM_TIMEOUT=6 (the environment's default for
--comm-timeout); once the run has written its first checkpoint, rank 1 is frozen with SIGSTOP: to rank 0 it looks
like a peer behind a lost link (it neither answers nor closes its sockets). Rank 0's wait must pass its deadline and
end the job: mpirun exits non-zero within the timeout plus a margin (without the deadline MPI waits for ever), rank
0's one line names its rank, host, the operation and its peer, on stderr and in <output-dir>/failures.log, and the
checkpoint written before the freeze stays whole (`--resume` from it runs to the end).

usage: lost_peer.py --mpiexec MPIRUN
"""
import argparse
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import e2e_common as e2e  # noqa: E402

TIMEOUT = 6

ap = argparse.ArgumentParser()
ap.add_argument("--mpiexec", required=True)
args = ap.parse_args()
checks = e2e.Checks()
root = e2e.temp_dir("lost_peer")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 64, "val": 8}, seed=5)
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "2", "--out", init)
out = os.path.join(root, "run")
common = ["--epochs", "20", "--batch-size", "8", "--micro-batch-size", "4", "--pipeline-stages", "2",
          "--checkpoint-every", "2", "--threads", "1"]
env = dict(os.environ, VITPIPE_COMM_TIMEOUT=str(TIMEOUT))
command = [args.mpiexec, "--oversubscribe", "--allow-run-as-root", "-np", "2", e2e.VITPIPE,
           *e2e.train_args(init, "csv:" + csv, out, *common)]
process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
latest = os.path.join(out, "checkpoints", "latest")
deadline = time.monotonic() + 300
while not os.path.exists(latest) and process.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
ranks = e2e.rank_pids(process.pid)
stopped_at = None
if checks.check(process.poll() is None and 1 in ranks, "the 2-rank run started and wrote a checkpoint",
                f"ranks {ranks}"):
    os.kill(ranks[1], signal.SIGSTOP)
    stopped_at = time.monotonic()
try:
    _, stderr = process.communicate(timeout=TIMEOUT + 60)
    took = time.monotonic() - stopped_at if stopped_at else float("nan")
except subprocess.TimeoutExpired:
    process.kill()
    _, stderr = process.communicate()
    took = None
finally:
    for pid in ranks.values():  # a frozen rank that mpirun did not take down
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
lines = [line for line in stderr.splitlines() if line.startswith("error: rank")]
print(f"mpirun exited {process.returncode} {took:.1f} s after rank 1 froze" if took else "mpirun did not exit")
print("\n".join(lines[:3]))
checks.check(took is not None and took < TIMEOUT + 60, "the job ended instead of hanging",
             f"{took} s" if took else "still waiting after the margin")
checks.check(process.returncode != 0, "mpirun exits non-zero", str(process.returncode))
checks.check(any(line.startswith("error: rank 0: ") and "[host " in line and f"did not complete in {TIMEOUT} s" in line
                 and ("from rank 1 " in line or "to rank 1 " in line or "among ranks 0, 1 " in line) for line in lines),
             "rank 0 names itself, its host, the operation and its peer (deadline from VITPIPE_COMM_TIMEOUT)",
             stderr[-1500:])
failures_log = os.path.join(out, "failures.log")
logged = open(failures_log).read().splitlines() if os.path.exists(failures_log) else []
checks.check(any(line.startswith("error: rank 0: ") and "did not complete" in line for line in logged),
             "rank 0's line is also in <output-dir>/failures.log", str(logged[:3]))
resumed = e2e.run(*e2e.train_args(init, "csv:" + csv, out, *common, "--resume"), expect_ok=False)  # stages as threads
checks.check(resumed.returncode == 0, "the checkpoint before the freeze resumes", resumed.stderr[-800:])
e2e.cleanup(root)
checks.finish()
