#!/usr/bin/env python3
"""`vitpipe plan --device cuda` and `train --layout auto --device cuda` through the real binary on the fakes: the
module is libvitpipe_cuda_on_fakes.so (the module's table and CudaBackend over host-memory fakes of the CUDA runtime,
cuBLASLt, cuDNN and NCCL), opened through VITPIPE_CUDA_MODULE, and the driver is the fake libcuda.so.1 (one "Fake GPU",
its total and free memory set by FAKE_CUDA_TOTAL_MEMORY / FAKE_CUDA_FREE_MEMORY). Checks:
- the profile is measured through the module and keyed by the fake GPU (name, compute capability, memory, the
  libraries), not by the CPU and its threads; the plan's budget is the fake GPU's free memory less the stated margin;
  the CUDA workspaces are counted (at the backend's sizes, read from workspace_sizes.h) and host memory is not;
- a layout that fits only without the workspaces is refused, in one line;
- more processes per node than the node's GPUs is refused in one line, and spread over nodes it plans one per GPU;
- cpu and cuda profiles share one cache without colliding (each measured once, then read back);
- the printout names the GPU and labels the link between GPUs an assumption; train --layout auto --device cuda plans
  the same way.
Timings on fakes mean nothing: no speed is asserted."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_e2e"))
import e2e_common as e2e  # noqa: E402

VITPIPE = os.environ["VITPIPE"]
SOURCE = os.environ.get("VITPIPE_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GIB = 1 << 30
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def workspace_sizes():
    """The backend's sizes, as src/backend/cuda/workspace_sizes.h declares them (NAME = A << B or A)."""
    text = open(os.path.join(SOURCE, "src", "backend", "cuda", "workspace_sizes.h")).read()
    sizes = {}
    for name, a, b in re.findall(r"k(\w+)Bytes\w* = (\d+)u?(?: << (\d+))?;", text):
        sizes[name] = int(a) << int(b or 0)
    return sizes


parser = argparse.ArgumentParser()
parser.add_argument("--module", required=True)
parser.add_argument("--fake-driver", required=True)
args = parser.parse_args()

TOTAL = 8 * GIB
MARGIN = max(GIB, 0.05 * TOTAL)  # plan/gpu_memory_budget.h
base_env = {**os.environ, "VITPIPE_CUDA_MODULE": args.module, "FAKE_CUDA_TOTAL_MEMORY": str(TOTAL),
            "LD_LIBRARY_PATH": os.pathsep.join([os.path.dirname(args.fake_driver),
                                                os.environ.get("LD_LIBRARY_PATH", "")])}


def vitpipe(*argv, free=6 * GIB, timeout=240):
    env = {**base_env, "FAKE_CUDA_FREE_MEMORY": str(int(free))}
    return subprocess.run([VITPIPE, *map(str, argv)], env=env, capture_output=True, text=True, timeout=timeout)


def plan_json(result):
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        return None


with tempfile.TemporaryDirectory() as tmp:
    model = os.path.join(tmp, "model")
    init = vitpipe("init", "--preset", "vit-micro", "--labels", "a,b,c", "--seed", "1", "--out", model)
    assert init.returncode == 0, init.stderr
    cache = os.path.join(tmp, "cache")
    common = ["plan", "--model", model, "--batch-size", "8", "--profile-cache", cache, "--threads", "1"]

    # 1. The profile, the key and the budget.
    first = vitpipe(*common, "--device", "cuda", "--json")
    check(first.returncode == 0, "plan --device cuda runs on the fakes" +
          ("" if first.returncode == 0 else ": " + first.stderr[-2000:]))
    j = plan_json(first) or {}
    key = j.get("profile", {}).get("key", "")
    gpu = j.get("profile", {}).get("describe", {}).get("gpu", {})
    print("profile key:", key)
    check(j.get("device") == "cuda", "the plan says device cuda")
    check(j.get("profile_measured") is True, "the cuda profile was measured (empty cache)")
    check(f"device=cuda gpu=Fake GPU sm=9.0 memory={TOTAL}" in key and " cpu=" not in key and " threads=" not in key,
          "the profile key names the fake GPU (name, compute capability, memory), not the CPU and its threads")
    check("libraries=" in key and "cudnn" in key and "tf32=0" in key, "the key names the loaded libraries and TF32")
    check(gpu.get("name") == "Fake GPU" and gpu.get("compute_capability") == "9.0" and gpu.get("memory_bytes") == TOTAL,
          f"the profile describes the fake GPU ({gpu})")
    budget = j.get("gpu_memory", {})
    check(budget.get("free_bytes") == 6 * GIB and budget.get("margin_bytes") == MARGIN,
          f"the budget is read from the fake GPU: 6 GiB free, margin {MARGIN / GIB:.2f} GiB ({j.get('gpu_memory')})")
    check(j.get("memory_per_process_bytes") == 6 * GIB - MARGIN,
          f"memory per process = the GPU's free memory less the margin ({j.get('memory_per_process_bytes')})")
    check(j.get("gpus_per_node") == 1 and j.get("processes_per_node") == 1, "one process on the one GPU")
    check("ASSUMED" in j.get("link", {}).get("source", ""), "the link between GPUs is labelled an assumption")
    sizes = workspace_sizes()
    layouts = j.get("layouts", [])
    check(len(layouts) > 0, f"{len(layouts)} layouts fit")
    for x in layouts:
        w, m = x["memory"]["cuda_workspaces"], x["memory"]
        if not (w["cublaslt"] == sizes["CublasLtWorkspace"] and w["cudnn"] == sizes["CudnnWorkspace"]
                and w["arena"] == sizes["Arena"] and m["overhead"] == 0 and m["loader"] == 0
                and x["memory_per_rank_bytes"] <= j["memory_per_process_bytes"]):
            check(False, f"layout {x['train_flags']}: workspaces at the backend's sizes, no host memory, within budget")
            break
    else:
        check(bool(layouts), "every layout counts the workspaces at the backend's sizes and no host memory")

    # 2. A layout that fits only without the workspaces is refused.
    if layouts:
        chosen = layouts[0]
        flags = chosen["train_flags"]
        total = chosen["memory_per_rank_bytes"]
        workspaces = sum(chosen["memory"]["cuda_workspaces"].values())
        budget = total - workspaces / 2  # above what it needs without them, below what it needs with them
        tight = vitpipe(*common, *flags, "--device", "cuda", "--json", free=MARGIN + budget)
        lines = tight.stderr.strip().splitlines()
        check(tight.returncode == 1 and len(lines) == 1 and "no layout of 1 process(es) fits" in lines[0]
              and "device memory" in lines[0],
              f"{' '.join(flags)} with {budget / 2**20:.1f} MiB (it needs {(total - workspaces) / 2**20:.1f} MiB "
              f"without the workspaces, {total / 2**20:.1f} MiB with them) is refused in one line: {lines[-1:]}")
        roomy = vitpipe(*common, *flags, "--device", "cuda", "--json", free=MARGIN + total + 2**20)
        check(roomy.returncode == 0, "the same layout with 1 MiB more than it needs with the workspaces is planned")

    # 3. Ranks per node never exceed the GPUs.
    two = vitpipe(*common, "--device", "cuda", "--processes", "2")
    lines = two.stderr.strip().splitlines()
    check(two.returncode == 1 and len(lines) == 1 and "2 process(es) per node for 1 GPU(s)" in lines[0],
          f"--processes 2 on a node of 1 GPU is refused in one line: {lines[-1:]}")
    spread = vitpipe(*common, "--device", "cuda", "--processes", "2", "--nodes", "2", "--json")
    s = plan_json(spread) or {}
    check(spread.returncode == 0 and s.get("processes_per_node") == 1 and s.get("processes") == 2,
          "--processes 2 --nodes 2 plans one process per GPU" +
          ("" if spread.returncode == 0 else ": " + spread.stderr[-1000:]))
    check("ASSUMED" in s.get("local_link", {}).get("source", ""),
          "across nodes the link within a node is the labelled assumption")

    # 4. cpu and cuda profiles in one cache.
    cpu = vitpipe(*common, "--device", "cpu", "--json")
    c = plan_json(cpu) or {}
    check(cpu.returncode == 0 and c.get("profile_measured") is True and " cpu=" in c.get("profile", {}).get("key", "")
          and "device=cuda" not in c["profile"]["key"], "the cpu plan measures its own profile beside the cuda one")
    again_cuda = plan_json(vitpipe(*common, "--device", "cuda", "--json")) or {}
    again_cpu = plan_json(vitpipe(*common, "--device", "cpu", "--json")) or {}
    check(again_cuda.get("profile_measured") is False and again_cuda.get("profile", {}).get("key") == key,
          "the cuda plan reads its own profile back from the cache")
    check(again_cpu.get("profile_measured") is False and " cpu=" in again_cpu.get("profile", {}).get("key", ""),
          "the cpu plan reads its own profile back from the cache")
    files = sorted(glob.glob(os.path.join(cache, "profile-*.json")))
    keys = sorted(json.load(open(f))["key"] for f in files)
    check(len(files) == 2 and sum("device=cuda" in k for k in keys) == 1,
          f"two cache files, one per device ({[os.path.basename(f) for f in files]})")

    # 5. The printout.
    text = vitpipe(*common, "--device", "cuda")
    check(text.returncode == 0 and "--device cuda" in text.stdout and "Fake GPU" in text.stdout
          and "of device memory per process" in text.stdout and "ASSUMED, not measured" in text.stdout,
          "the printout names the GPU, the device-memory budget and the assumed link")

    # 6. train --layout auto --device cuda plans the same way, then trains a step on the fakes.
    csv = e2e.make_blob_dataset(os.path.join(tmp, "data"), {"train": 16, "val": 8}, seed=3)
    out = os.path.join(tmp, "run")
    train = vitpipe("train", "--model", model, "--data", "csv:" + csv, "--device", "cuda", "--layout", "auto",
                    "--batch-size", "8", "--max-steps", "1", "--threads", "1", "--loader-threads", "1",
                    "--profile-cache", cache, "--output-dir", out, timeout=280)
    check(train.returncode == 0 and "plan: --device cuda" in train.stderr and "Fake GPU" in train.stderr
          and "--layout auto chose" in train.stderr,
          "train --layout auto --device cuda plans on the GPU's profile and budget" +
          ("" if train.returncode == 0 else ": " + train.stderr[-2000:]))

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
