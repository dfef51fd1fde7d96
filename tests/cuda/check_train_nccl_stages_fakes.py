#!/usr/bin/env python3
"""`vitpipe train --device cuda` with 2 pipeline stages exchanging activations over NCCL, through the real binary on
the fakes: the module is libvitpipe_cuda_on_fakes.so (the module's table, CudaBackend, and host-memory fakes of the
CUDA runtime, cuBLASLt, cuDNN and NCCL), opened through VITPIPE_CUDA_MODULE, with the fake driver as libcuda.so.1.
Without mpirun the trainer runs its stages as threads of one process, and the fake NCCL's ranks are threads
(calls/nccl_host_ranks.h), so this is the trainer's own path: the executor's NcclStageExchange on each rank's one
backend (an interleaved rank's chunks share it), not the host adapter of tools/train_seam_probe.
Checks, per schedule:
- the 2-stage run succeeds and its stages talked over NCCL: ncclSend and ncclRecv calls in equal numbers, as many as
  the schedule's boundary crossings (FAKE_NCCL_REPORT makes the fake print its calls at exit);
- its train and eval losses and every tensor of the exported model equal the one-stage --device cuda run's within
  fp32 rounding (1e-5 relative); against the one-stage CPU run the losses within 1e-5 and the tensors within 1e-3
  (the backends' kernels round differently, and AdamW carries that into the weights).
What this cannot prove: real NCCL between GPUs, and replicas (without mpirun the binary runs only stages as threads):
replicas over NCCL in a trainer run, across processes, are check_train_nccl_replicas_fakes.py's.

Usage: check_train_nccl_stages_fakes.py --module M --fake-driver D --case 1f1b|interleaved|zb-h1|gpipe"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

from train_fakes_common import check, compare, finish, make_model_and_data

parser = argparse.ArgumentParser()
parser.add_argument("--module", required=True)
parser.add_argument("--fake-driver", required=True)
parser.add_argument("--case", required=True, choices=["1f1b", "interleaved", "zb-h1", "gpipe"])
args = parser.parse_args()
if not os.path.exists(args.module):
    print(f"skipped: no module on fakes at {args.module}")
    sys.exit(77)

VITPIPE = os.environ["VITPIPE"]
TOLERANCE = 1e-5  # fp32 rounding: the stages run the same kernels as one stage, split at a layer boundary
# Against the CPU backend the kernels themselves differ by rounding (1e-6 relative), which AdamW's steps can carry
# into the weights (a rounding-sized gradient can become a step of lr): check_train_fakes.py's tolerance.
CPU_TENSOR_TOLERANCE = 1e-3
STEPS, BATCH, MICRO = 3, 8, 2
env = {**os.environ, "VITPIPE_CUDA_MODULE": args.module, "FAKE_NCCL_REPORT": "1", "OMP_NUM_THREADS": "2",
       "LD_LIBRARY_PATH": os.pathsep.join([os.path.dirname(args.fake_driver), os.environ.get("LD_LIBRARY_PATH", "")])}
def train(out, *flags):
    result = subprocess.run([VITPIPE, "train", *common, "--output-dir", out, *flags], env=env, capture_output=True,
                            text=True, timeout=120)
    calls = re.search(r"fake nccl calls:(.*)", result.stderr)
    counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", calls.group(1))} if calls else {}
    return result, counts


with tempfile.TemporaryDirectory() as tmp:
    csv, init = make_model_and_data(VITPIPE, tmp, env)
    common = ["--model", init, "--data", "csv:" + csv, "--loader-threads", "1", "--threads", "1", "--batch-size",
              str(BATCH), "--micro-batch-size", str(MICRO), "--lr", "1e-3", "--max-steps", str(STEPS), "--optimizer",
              "adamw"]

    cpu, _ = train(f"{tmp}/cpu", "--device", "cpu")
    one, one_calls = train(f"{tmp}/one", "--device", "cuda")
    two, two_calls = train(f"{tmp}/two", "--device", "cuda", "--pipeline-stages", "2", "--pipeline-schedule",
                           args.case)
    for name, result in (("the one-stage CPU run", cpu), ("the one-stage --device cuda run", one),
                         (f"the 2-stage {args.case} --device cuda run", two)):
        check(result.returncode == 0, name + " succeeds" + ("" if result.returncode == 0 else
                                                             ": " + result.stderr[-2000:]))
    check(one_calls.get("ncclSend", 0) == 0, f"one stage sends nothing over NCCL ({one_calls})")
    print("2-stage NCCL calls:", " ".join(f"{k}={v}" for k, v in sorted(two_calls.items())))
    # Each training micro-batch crosses each boundary between adjacent pieces forward (its activation) and back (its
    # gradient); an interleaved rank's V chunks make 2V-1 boundaries between 2V pieces. Evaluation's micro-batches
    # cross forward only.
    virtual = 2 if args.case == "interleaved" else 1
    boundaries = 2 * virtual - 1
    training = 2 * boundaries * STEPS * (BATCH // MICRO)
    sends, recvs = two_calls.get("ncclSend", 0), two_calls.get("ncclRecv", 0)
    check(sends == recvs and sends >= training and (sends - training) % boundaries == 0,
          f"the stages exchanged every activation and gradient over NCCL: {training} sends and receives for training "
          f"over {boundaries} boundary(ies) plus evaluation's forward ones, ncclSend={sends} ncclRecv={recvs}")
    check(two_calls.get("ncclCommInitRank", 0) == 2, "one communicator for the pipeline, one rank per stage")
    if all(r.returncode == 0 for r in (cpu, one, two)):
        compare(f"{args.case} vs one stage on the fakes", f"{tmp}/one", f"{tmp}/two", TOLERANCE)
        compare(f"{args.case} vs one stage on the CPU", f"{tmp}/cpu", f"{tmp}/two", TOLERANCE,
                CPU_TENSOR_TOLERANCE)

finish()
print("all passed")
