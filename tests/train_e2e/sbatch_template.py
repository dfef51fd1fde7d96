"""scripts/slurm/train.sbatch, run as Slurm would run it but without Slurm: bash with SLURM_* variables, a stub
`scontrol` that records its arguments, and VITPIPE_LAUNCHER=env in place of `srun --mpi=pmix` (one process).
- SIGUSR1 to the batch shell (what `--signal=B:USR1@120` does before the time limit) is forwarded to the training,
  which stops with a checkpoint (exit 138); the shell then runs `scontrol requeue $SLURM_JOB_ID` and exits 0;
- the threads per rank come from SLURM_CPUS_PER_TASK;
- the requeued start (SLURM_RESTART_COUNT=1), the same script unchanged, continues from that checkpoint
  (--resume auto), runs to the end without requeueing, and ends with exactly the weights of an uninterrupted run.
The real-Slurm run of the template is the Slurm harness's (issue 46), not this test's."""
import json
import os
import signal
import stat
import subprocess
import time

import e2e_common as e2e

checks = e2e.Checks()
root = e2e.temp_dir("sbatch")
template = os.path.join(os.environ.get("VITPIPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                        "scripts", "slurm", "train.sbatch")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 64, "val": 8}, seed=5)
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "2", "--out", init)
flags = ["--epochs", "20", "--batch-size", "8", "--micro-batch-size", "4", "--checkpoint-every", "4", "--export-last",
         "--log-every", "0", "--loader-threads", "1"]
reference = os.path.join(root, "reference")
e2e.run("train", "--model", init, "--data", "csv:" + csv, "--output-dir", reference, "--threads", "1", *flags)

stubs = os.path.join(root, "bin")
os.makedirs(stubs)
requeues = os.path.join(root, "scontrol.log")
with open(os.path.join(stubs, "scontrol"), "w") as f:
    f.write(f"#!/bin/sh\necho \"$@\" >> {requeues}\n")
os.chmod(os.path.join(stubs, "scontrol"), stat.S_IRWXU)
out = os.path.join(root, "run")
env = dict(os.environ, PATH=stubs + os.pathsep + os.environ["PATH"], SLURM_JOB_ID="4242", SLURM_CPUS_PER_TASK="1",
           SLURM_JOB_NODELIST="node[1-2]", VITPIPE_LAUNCHER="env", VITPIPE=e2e.VITPIPE, VITPIPE_MODEL=init,
           VITPIPE_DATA="csv:" + csv, VITPIPE_OUTPUT_DIR=out, VITPIPE_TRAIN_FLAGS=" ".join(flags))
env.pop("VITPIPE_THREADS", None)

# First start: SIGUSR1 to the batch shell once the run has a checkpoint.
shell = subprocess.Popen(["bash", template], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
latest = os.path.join(out, "checkpoints", "latest")
deadline = time.monotonic() + 120
while not os.path.exists(latest) and shell.poll() is None and time.monotonic() < deadline:
    time.sleep(0.02)
if shell.poll() is None:
    shell.send_signal(signal.SIGUSR1)
log, _ = shell.communicate(timeout=120)
print(log[-600:])
checks.check(shell.returncode == 0, "first start: the batch shell exits 0 after the stop", str(shell.returncode))
checks.check("stopped by SIGUSR1 after step " in log and "stopped with a checkpoint (exit 138)" in log,
             "first start: SIGUSR1 reached the training, which stopped with a checkpoint (exit 138)", log[-800:])
recorded = open(requeues).read().split("\n") if os.path.exists(requeues) else []
checks.check(recorded[:1] == ["requeue 4242"], "first start: the trap ran `scontrol requeue $SLURM_JOB_ID`",
             str(recorded))
options = json.load(open(os.path.join(out, "train_options.json")))
checks.check(options.get("threads") == 1, "threads per rank from SLURM_CPUS_PER_TASK", str(options.get("threads")))

# The requeued start: the same script, to the end.
env["SLURM_RESTART_COUNT"] = "1"
second = subprocess.run(["bash", template], env=env, capture_output=True, text=True, timeout=300)
checks.check(second.returncode == 0 and "restart count 1" in second.stdout and "--resume auto: continuing" in
             second.stderr + second.stdout, "the requeued start continues the run to the end",
             (second.stdout + second.stderr)[-1200:])
checks.check(open(requeues).read().count("requeue") == 1, "the finished run does not requeue itself")
if second.returncode == 0:
    same, detail = e2e.same_tensors(e2e.read_safetensors(os.path.join(reference, "model", "model.safetensors"))[0],
                                    e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))[0])
    checks.check(same, "stopped, requeued and resumed = uninterrupted, bit for bit", detail)
e2e.cleanup(root)
checks.finish()
