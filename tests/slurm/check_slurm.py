#!/usr/bin/python3
"""`vitpipe train` under a real Slurm 22.05 (slurm_cluster.py: a controller and 2 compute nodes in network
namespaces), through the repository's template scripts/slurm/train.sbatch.

    check_slurm.py CASE

  template   sbatch the template on 2 nodes x 1 rank (srun --mpi=pmix, 1 CPU per task): 2 data-parallel replicas,
             one on each node (the run's topology record: hosts [0, 1]), 1 thread per rank from Slurm; the weights
             equal one process within 1e-4
  mpirun     one allocation of 2 nodes x 1 task, 1 CPU each: `mpirun vitpipe train` without --threads takes 1 thread
             per rank from SLURM_CPUS_PER_TASK (the nodes have 2 CPUs) and equals one process within 1e-4;
             `srun vitpipe plan --json` in the same allocation finds the 2 nodes Slurm gave; `srun --mpi=none` of 2
             tasks (each would train alone) is refused, saying to use --mpi=pmix
  srun-2x2   `srun --mpi=pmix -N2 --ntasks-per-node=2 vitpipe train --pipeline-stages 2` without --threads or
             --cpus-per-task: 4 ranks, 2 on each node as MPI's shared-memory split finds them (stage-major: a stage's
             replicas share a node), 1 thread per rank (the node's 2 CPUs over srun's 2 tasks there,
             SLURM_STEP_TASKS_PER_NODE); the weights equal one process within 1e-4
  requeue    the template, 2 pipeline stages on 2 nodes; `scontrol requeue` once the run has a checkpoint (SIGTERM to
             every rank), then `scontrol update StartTime=now`: the requeued start (restart count 1 in the appended
             log) continues with --resume auto and ends with exactly the weights of an uninterrupted run
  usr1-requeue  the template (--requeue), `scancel --signal=USR1 --batch` once the run has a checkpoint (what
             --signal=B:USR1@120 sends before the time limit): the ranks stop with a checkpoint (exit 138), the trap
             runs `scontrol requeue`, and the requeued start (Restarts=1) ends at exactly the uninterrupted weights
  usr1       the template submitted with --no-requeue, `scancel --signal=USR1 --batch` once the run has a
             checkpoint: the trap forwards it, the ranks stop with a checkpoint (exit 138), the job cannot requeue
             and says so; the same template submitted again continues with --resume auto to exactly the
             uninterrupted weights

Exits 77 (skipped) without root or Slurm's packages. Every case is bounded in time and removes its cluster.
"""
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "train_e2e"))
import slurm_cluster  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402

VITPIPE = os.environ["VITPIPE"]
SOURCE = os.environ.get("VITPIPE_SOURCE_DIR", os.path.join(HERE, "..", ".."))
TEMPLATE = os.path.join(SOURCE, "scripts", "slurm", "train.sbatch")
TOLERANCE = 1e-4  # data parallel vs one process: the same sums in another order
# How long a job may take to reach a state: a bound for a hung job, not a speed test (2 cores at load 15 run a job
# that takes 10 s alone in well over a minute).
JOB_SECONDS = 300


class Case:
    def __init__(self, work, epochs, stages, micro_batch=4):
        import e2e_common as e2e
        self.e2e = e2e
        self.work = work
        self.csv = e2e.make_blob_dataset(os.path.join(work, "data"), {"train": 64, "val": 8}, seed=5)
        self.init = os.path.join(work, "init")
        e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "2", "--out",
                self.init)
        # 8 steps an epoch; a checkpoint every 4.
        self.flags = ["--epochs", str(epochs), "--batch-size", "8", "--micro-batch-size", str(micro_batch),
                      "--checkpoint-every", "4", "--export-last", "--log-every", "0", "--seed", "3",
                      "--pipeline-stages", str(stages)]
        self.reference = os.path.join(work, "reference")
        # One process, the stages as threads: what the 2 ranks must equal.
        e2e.run(*e2e.train_args(self.init, "csv:" + self.csv, self.reference, "--threads", "1", *self.flags))

    def template_env(self, out, launcher=None):
        env = {"VITPIPE": VITPIPE, "VITPIPE_MODEL": self.init, "VITPIPE_DATA": "csv:" + self.csv,
               "VITPIPE_OUTPUT_DIR": out, "VITPIPE_TRAIN_FLAGS": " ".join(["--loader-threads", "1", *self.flags])}
        if launcher:
            env["VITPIPE_LAUNCHER"] = launcher
        return env

    def weights(self, out):
        return self.e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))[0]

    def expect_exactly_the_reference(self, out, what):
        same, detail = self.e2e.same_tensors(self.weights(self.reference), self.weights(out))
        assert same, f"{what}: the weights differ from the uninterrupted run's: {detail}"
        print(f"{what}: the weights equal the uninterrupted run's bit for bit")

    def expect_near_the_reference(self, out, what):
        difference, where = self.e2e.max_relative_difference(self.weights(self.reference), self.weights(out))
        print(f"{what}: max relative difference to one process {difference:.3g} ({where or '-'})")
        assert difference <= TOLERANCE, f"{what}: {difference} > {TOLERANCE} at {where}"


# Every job gets the cluster's 2 nodes with 1 task of 1 CPU each (the template asks for 16: these nodes have 2).
SBATCH = ["--nodes", "2", "--ntasks-per-node", "1", "--cpus-per-task", "1"]


def wait_for_checkpoint(cluster, job, out, timeout=JOB_SECONDS):
    latest = os.path.join(out, "checkpoints", "latest")
    deadline = time.monotonic() + timeout
    while not os.path.exists(latest) and time.monotonic() < deadline:
        state = cluster.job(job).get("JobState")
        assert state in (None, "PENDING", "RUNNING", "CONFIGURING"), f"job {job} {state} before its first checkpoint:\n" \
            + read(os.path.join(os.path.dirname(out), "job.log"))[-3000:] + cluster.logs_tail(1500)
        time.sleep(0.05)
    assert os.path.exists(latest), f"no checkpoint within {timeout} s"


def read(path):
    return open(path, errors="replace").read() if os.path.exists(path) else ""


def topology_hosts(out):
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    topology = next((r for r in records if r.get("type") == "topology"), {})
    return topology.get("host_of_rank")


def case_template(work):
    case = Case(work, epochs=2, stages=1)
    with SlurmCluster(2) as cluster:
        out = os.path.join(work, "run")
        log = os.path.join(work, "job.log")
        job = cluster.sbatch([*SBATCH, "--output", log, TEMPLATE], **case.template_env(out))
        fields = cluster.wait_for_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), JOB_SECONDS)
        text = read(log)
        print(text[-1500:])
        assert fields["JobState"] == "COMPLETED", f"job {job}: {fields.get('JobState')} {fields.get('ExitCode')}"
        assert "2 MPI ranks = 1 pipeline stage(s) x 2 replica(s)" in text, "not 2 ranks over srun --mpi=pmix"
        assert "; 1 CPU thread(s) per rank" in text, "the threads per rank are not Slurm's --cpus-per-task"
        assert f"on {cluster.nodes[0]}" in text or "start 1 (restart count 0)" in text, text[:500]
    hosts = topology_hosts(out)
    print("the run's hosts:", hosts)
    assert hosts == [0, 1], f"the ranks did not see the 2 nodes Slurm gave: {hosts}"
    case.expect_near_the_reference(out, "template, srun --mpi=pmix, 2 nodes x 1 rank")


MPIRUN_JOB = """#!/bin/bash
set -euo pipefail
# Open MPI's mpirun reads the allocation and starts its daemons with srun; no --threads: Slurm's CPUs per task.
mpirun --map-by node "$VITPIPE" train --model "$VITPIPE_MODEL" --data "$VITPIPE_DATA" \\
  --output-dir "$VITPIPE_OUTPUT_DIR" $VITPIPE_TRAIN_FLAGS
srun --mpi=pmix "$VITPIPE" plan --model "$VITPIPE_MODEL" --data "$VITPIPE_DATA" --batch-size 8 --micro-batch-size 4 \\
  --pipeline-stages 1 --profile-cache "$VITPIPE_OUTPUT_DIR/profiles" --json > "$VITPIPE_OUTPUT_DIR/plan.json"
"""


def case_mpirun(work):
    case = Case(work, epochs=2, stages=1)
    script = os.path.join(work, "mpirun.sbatch")
    with open(script, "w") as f:
        f.write(MPIRUN_JOB)
    with SlurmCluster(2) as cluster:
        out = os.path.join(work, "run")
        log = os.path.join(work, "job.log")
        job = cluster.sbatch([*SBATCH, "--output", log, script], **case.template_env(out))
        fields = cluster.wait_for_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), JOB_SECONDS)
        text = read(log)
        print(text[-1500:])
        assert fields["JobState"] == "COMPLETED", f"job {job}: {fields.get('JobState')} {fields.get('ExitCode')}"
        assert "2 MPI ranks = 1 pipeline stage(s) x 2 replica(s)" in text, "not 2 ranks under mpirun"
        assert "; 1 CPU thread(s) per rank" in text, "--threads 0 did not take Slurm's CPUs per task (1)"
        # srun without PMIx starts 2 lone processes: refused before any work, saying how to launch.
        alone = os.path.join(work, "alone")
        refused = cluster.run(["srun", "--mpi=none", *SBATCH, VITPIPE, "train", "--model", case.init, "--data",
                               "csv:" + case.csv, "--output-dir", alone, *case.flags], check=False)
        print("srun --mpi=none:", refused.returncode, refused.stderr.strip()[-600:])
        assert refused.returncode != 0 and "srun started 2 tasks (SLURM_STEP_NUM_TASKS) but MPI did not start" in \
            refused.stderr, "2 srun tasks without MPI were not refused"
        assert not os.path.exists(os.path.join(alone, "checkpoints")), "a lone task trained"
    hosts = topology_hosts(out)
    print("the run's hosts:", hosts)
    assert hosts == [0, 1], f"the ranks did not see the 2 nodes Slurm gave: {hosts}"
    plan_text = read(os.path.join(out, "plan.json"))
    plan = json.loads(plan_text[plan_text.index("{"):])
    print("plan's hosts:", plan["hosts"])
    assert plan["hosts"]["count"] == 2 and plan["hosts"]["host_of_rank"] == [0, 1], plan["hosts"]
    case.expect_near_the_reference(out, "mpirun inside an allocation, 2 nodes x 1 rank")


def case_srun_2x2(work):
    case = Case(work, epochs=2, stages=2, micro_batch=2)  # a micro-batch per stage in each replica
    out = os.path.join(work, "run")
    with SlurmCluster(2) as cluster:
        result = cluster.run(["srun", "--mpi=pmix", "-N2", "--ntasks-per-node=2", VITPIPE, "train", "--model",
                              case.init, "--data", "csv:" + case.csv, "--output-dir", out, "--loader-threads", "1",
                              *case.flags], timeout=JOB_SECONDS)
    lines = [line for line in result.stderr.splitlines() if line.startswith(("hosts:", "parallelism:"))]
    print("\n".join(lines))
    assert "parallelism: 4 MPI ranks = 2 pipeline stage(s) x 2 replica(s)" in result.stderr, "not 4 ranks"
    assert "; 1 CPU thread(s) per rank" in result.stderr, "2 ranks on a 2-CPU node did not take 1 thread each"
    hosts = topology_hosts(out)
    print("the run's hosts:", hosts)
    assert hosts == [0, 0, 1, 1], f"the ranks did not see 2 nodes of 2 ranks: {hosts}"
    case.expect_near_the_reference(out, "srun --mpi=pmix, 2 nodes x 2 ranks, 2 stages x 2 replicas")


def case_requeue(work):
    case = Case(work, epochs=12, stages=2)
    with SlurmCluster(2) as cluster:
        out = os.path.join(work, "run")
        log = os.path.join(work, "job.log")
        job = cluster.sbatch([*SBATCH, "--output", log, TEMPLATE], **case.template_env(out))
        wait_for_checkpoint(cluster, job, out)
        cluster.run(["scontrol", "requeue", str(job)])
        requeued_at = time.monotonic()
        fields = cluster.wait_for_state(job, ("PENDING",), 90)
        print(f"requeued: pending after {time.monotonic() - requeued_at:.1f} s, Restarts={fields.get('Restarts')}")
        cluster.start_requeued_now(job)
        fields = cluster.wait_for_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), JOB_SECONDS)
        text = read(log)
        print(text[-2500:])
        assert fields["JobState"] == "COMPLETED", f"job {job}: {fields.get('JobState')} {fields.get('ExitCode')}"
        assert fields.get("Restarts") == "1", f"Restarts={fields.get('Restarts')}"
        assert "(restart count 0)" in text and "(restart count 1)" in text, "the log does not hold both starts"
        assert "stopped by SIGTERM after step " in text, "the requeue's SIGTERM did not stop the ranks at a step"
        assert "vitpipe-train: training exited 143 after Slurm's SIGTERM" in text, "the batch shell did not wait"
        assert "--resume auto: continuing" in text, "the requeued start did not resume"
    case.expect_exactly_the_reference(out, "requeued by scontrol mid-run")


def case_usr1_requeue(work):
    case = Case(work, epochs=12, stages=2)
    with SlurmCluster(2) as cluster:
        out = os.path.join(work, "run")
        log = os.path.join(work, "job.log")
        job = cluster.sbatch([*SBATCH, "--output", log, TEMPLATE], **case.template_env(out))
        wait_for_checkpoint(cluster, job, out)
        cluster.run(["scancel", "--signal=USR1", "--batch", str(job)])
        fields = cluster.wait_for_state(job, ("PENDING",), 90)
        print(f"requeued by its trap: Restarts={fields.get('Restarts')}")
        cluster.start_requeued_now(job)
        fields = cluster.wait_for_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), JOB_SECONDS)
        text = read(log)
        print(text[-2500:])
        assert fields["JobState"] == "COMPLETED", f"job {job}: {fields.get('JobState')} {fields.get('ExitCode')}"
        assert fields.get("Restarts") == "1", f"Restarts={fields.get('Restarts')}"
        assert "stopped by SIGUSR1 after step " in text, "the trap did not stop the ranks with SIGUSR1"
        assert f"stopped with a checkpoint (exit 138); requeueing job {job}" in text, "the trap did not requeue"
        assert "(restart count 1)" in text and "--resume auto: continuing" in text, "the requeued start did not resume"
    case.expect_exactly_the_reference(out, "stopped by SIGUSR1, requeued by the template's trap")


def case_usr1(work):
    case = Case(work, epochs=12, stages=2)
    with SlurmCluster(2) as cluster:
        out = os.path.join(work, "run")
        log = os.path.join(work, "job.log")
        job = cluster.sbatch([*SBATCH, "--no-requeue", "--output", log, TEMPLATE], **case.template_env(out))
        wait_for_checkpoint(cluster, job, out)
        cluster.run(["scancel", "--signal=USR1", "--batch", str(job)])
        fields = cluster.wait_for_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), JOB_SECONDS)
        text = read(log)
        print(text[-2500:])
        assert "stopped by SIGUSR1 after step " in text, "the trap did not stop the ranks with SIGUSR1"
        assert "stopped with a checkpoint (exit 138)" in text, "the ranks did not exit 138"
        assert "cannot be requeued" in text, "the template did not say the job cannot requeue"
        assert fields["JobState"] != "COMPLETED", f"a stopped, unrequeued job reads {fields['JobState']}"
        stopped_at = open(os.path.join(out, "checkpoints", "latest")).read().strip()
        print(f"job {job}: {fields['JobState']} {fields.get('ExitCode')}; the newest checkpoint: {stopped_at}")
        second = cluster.sbatch([*SBATCH, "--no-requeue", "--output", log, "--open-mode", "append", TEMPLATE],
                                **case.template_env(out))
        fields = cluster.wait_for_state(second, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), JOB_SECONDS)
        text = read(log)
        print(text[-1500:])
        assert fields["JobState"] == "COMPLETED", f"job {second}: {fields.get('JobState')} {fields.get('ExitCode')}"
        assert "--resume auto: continuing" in text, "the second submission did not resume"
    case.expect_exactly_the_reference(out, "stopped by SIGUSR1, submitted again")


def main():
    slurm_cluster.skip_unless_possible()
    name = sys.argv[1]
    cases = {"template": case_template, "mpirun": case_mpirun, "srun-2x2": case_srun_2x2, "requeue": case_requeue,
             "usr1-requeue": case_usr1_requeue, "usr1": case_usr1}
    if name not in cases:
        sys.exit(f"unknown case {name}; expected one of {', '.join(cases)}")
    work = tempfile.mkdtemp(prefix=f"vitpipe_slurm_{name}_")
    os.chmod(work, 0o755)
    started = time.monotonic()
    try:
        cases[name](work)
    finally:
        if os.environ.get("VITPIPE_KEEP_TEMP"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"PASS ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
