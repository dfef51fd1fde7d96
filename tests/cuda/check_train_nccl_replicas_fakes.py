#!/usr/bin/env python3
"""`vitpipe train --device cuda` with data-parallel replicas under mpirun, reducing their gradients over NCCL, through
the real binary on the fakes: each rank loads libvitpipe_cuda_on_fakes.so (VITPIPE_CUDA_MODULE; the module's table,
CudaBackend and host-memory fakes of the CUDA runtime, cuBLASLt, cuDNN and NCCL) with the fake driver as libcuda.so.1.
The ranks are processes, so the fake NCCL runs its communicators through shared memory (FAKE_NCCL_PROCESSES=1,
tests/cuda/executors/fake_nccl_processes.h) with the in-process ranks' arithmetic; the fake runtime sees 4 GPUs
(FAKE_CUDA_DEVICES=4), one per rank.
Checks, per case (2 replicas with the plain all-reduce; with --shard-optimizer's reduce to the owner and broadcast of
its parameters; mpirun -np 4 as 2 pipeline stages x 2 replicas, the stages' send / recv between processes too):
- mpirun succeeds, and every rank's fake NCCL made the case's collectives (FAKE_NCCL_REPORT: ncclAllReduce, or
  ncclReduce and ncclBroadcast) on one communicator per rank (and one more for the pipeline), every send received;
- its train and eval losses and every tensor of the exported model equal the one-process --device cuda run's within
  1e-5 relative;
- no shared-memory segment of the fake is left in /dev/shm.
What this cannot prove: real NCCL between GPUs.

Usage: check_train_nccl_replicas_fakes.py --module M --fake-driver D --mpiexec MPIEXEC --case all-reduce|shard-optimizer|stages-x-replicas"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from train_fakes_common import check, compare, finish, make_model_and_data

parser = argparse.ArgumentParser()
parser.add_argument("--module", required=True)
parser.add_argument("--fake-driver", required=True)
parser.add_argument("--mpiexec", default="")
# case: (processes, flags, the collectives each process must make)
CASES = {"all-reduce": (2, [], ("ncclAllReduce",)),
         "shard-optimizer": (2, ["--shard-optimizer"], ("ncclReduce", "ncclBroadcast")),
         "stages-x-replicas": (4, ["--pipeline-stages", "2"], ("ncclAllReduce",))}
parser.add_argument("--case", required=True, choices=sorted(CASES))
args = parser.parse_args()
if not os.path.exists(args.module):
    print(f"skipped: no module on fakes at {args.module}")
    sys.exit(77)
mpiexec = args.mpiexec if args.mpiexec and os.path.exists(args.mpiexec) else shutil.which("mpirun")
if not mpiexec:
    print("skipped: no mpirun")
    sys.exit(77)

if not os.path.isdir("/dev/shm"):
    print("skipped: no /dev/shm for the fake NCCL's POSIX shared memory")
    sys.exit(77)

VITPIPE = os.environ["VITPIPE"]
TOLERANCE = 1e-5
STEPS, BATCH, MICRO = 3, 8, 2
SCOPE = f"check{os.getpid()}"  # this run's segments only: other tests may hold theirs at the same time
SEGMENTS = f"/dev/shm/vitpipe-fake-nccl-{SCOPE}-*"
env = {**os.environ, "VITPIPE_CUDA_MODULE": args.module, "FAKE_NCCL_REPORT": "1", "FAKE_NCCL_PROCESSES": "1", "FAKE_NCCL_SCOPE": SCOPE,
       "FAKE_CUDA_DEVICES": "4", "OMP_NUM_THREADS": "1", "OMPI_ALLOW_RUN_AS_ROOT": "1",
       "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1",
       "LD_LIBRARY_PATH": os.pathsep.join([os.path.dirname(args.fake_driver), os.environ.get("LD_LIBRARY_PATH", "")])}
def nccl_calls(stderr):
    """Each process's fake NCCL call counts (one report line per process)."""
    return [{k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
            for line in re.findall(r"fake nccl calls:(.*)", stderr)]


with tempfile.TemporaryDirectory() as tmp:
    csv, init = make_model_and_data(VITPIPE, tmp, env)
    common = ["train", "--model", init, "--data", "csv:" + csv, "--loader-threads", "1", "--threads", "1",
              "--batch-size", str(BATCH), "--micro-batch-size", str(MICRO), "--lr", "1e-3", "--max-steps",
              str(STEPS), "--optimizer", "adamw", "--device", "cuda"]
    processes, flags, wanted = CASES[args.case]
    stages = 2 if "--pipeline-stages" in flags else 1

    one = subprocess.run([VITPIPE, *common, "--output-dir", f"{tmp}/one"], env=env, capture_output=True, text=True,
                         timeout=120)
    check(one.returncode == 0, "the one-process --device cuda run succeeds" +
          ("" if one.returncode == 0 else ": " + one.stderr[-2000:]))
    two = subprocess.run([mpiexec, "--oversubscribe", "--allow-run-as-root", "-np", str(processes), VITPIPE, *common,
                          "--output-dir", f"{tmp}/two", *flags], env=env, capture_output=True, text=True, timeout=120)
    check(two.returncode == 0, f"mpirun -np {processes} --device cuda {' '.join(flags)} succeeds" +
          ("" if two.returncode == 0 else ": " + two.stderr[-3000:]))
    ranks = nccl_calls(two.stderr)
    print(f"{processes} processes' NCCL calls:", ranks)
    check(len(ranks) == processes, f"every process loaded the fake NCCL and reported ({len(ranks)} reports)")
    for r, counts in enumerate(ranks):
        # One communicator among the replicas, and with stages one more for the pipeline.
        check(counts.get("ncclCommInitRank", 0) == stages, f"report {r}: {stages} communicator(s)")
        for function in wanted:
            check(counts.get(function, 0) >= STEPS, f"report {r}: {function} ran every step ({counts.get(function, 0)})")
    if len(ranks) == processes:
        check(all(ranks[0].get(f) == c.get(f) for c in ranks for f in wanted), "every rank made the same collectives")
        sends, recvs = sum(c.get("ncclSend", 0) for c in ranks), sum(c.get("ncclRecv", 0) for c in ranks)
        # Each replica's 2 stages exchange each training micro-batch's activation and gradient: at least 2 per
        # micro-batch per step, the replicas sharing the batch.
        training = 2 * STEPS * BATCH // MICRO if stages > 1 else 0
        check(sends == recvs and (sends >= training if stages > 1 else sends == 0),
              f"the stages' sends all received ({sends} sends, {recvs} recvs; {training} or more for training)")
    if one.returncode == 0 and two.returncode == 0:
        compare(f"mpirun -np {processes} ({args.case}) vs one process", f"{tmp}/one", f"{tmp}/two", TOLERANCE)
left = glob.glob(SEGMENTS)
check(not left, f"no shared-memory segment left behind ({sorted(left)})")

finish()
print("all passed")
