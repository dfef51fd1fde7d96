#!/usr/bin/env python3
"""`vitpipe bench --scaling 1,2` and `vitpipe plan --scaling` (issue 46, how it scales with cores):
- bench runs the training step at 1 and 2 threads and reports per operation group (GEMM, GEMM+GELU, attention,
  LayerNorm, GELU, the optimizer, the loader's decode + resize) the seconds per step at each count; its efficiency,
  serial fraction (Karp-Flatt) and Amdahl predictions for 16, 32 and 64 cores are recomputed here from its own
  times (this machine is shared: nothing about the times themselves is asserted, only that they are there and the
  figures follow from them);
- plan --scaling FILE --cores 16 ranks every split of 16 cores into ranks x threads by predicted images/s; with the
  profile edited so that every operation but the GEMMs stays as slow on 2 threads as on 1 it prefers 16 ranks of 1
  thread, with every operation halving on 2 threads it prefers 1 rank of 16;
- bad input (thread counts out of order, --threads beside --scaling, a file that is not a profile) is one line naming the flag, file and field."""
import copy
import json
import os
import subprocess
import sys
import tempfile

VITPIPE = os.environ["VITPIPE"]
failures = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)


def run(*args, ok=True):
    result = subprocess.run([VITPIPE, *args], capture_output=True, text=True, timeout=300)
    if ok and result.returncode != 0:
        sys.exit(f"FAILED: vitpipe {' '.join(args)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return result


def amdahl(serial, threads):
    return 1.0 / (serial + (1.0 - serial) / threads)


def karp_flatt(speedup, threads):
    return min(1.0, max(0.0, (1.0 / speedup - 1.0 / threads) / (1.0 - 1.0 / threads)))


bench = json.loads(run("bench", "--preset", "vit-micro", "--batch", "4", "--steps", "1", "--scaling", "1,2",
                       "--json").stdout)
scaling = bench["scaling"]
check(scaling["threads"] == [1, 2], f"measured at 1 and 2 threads ({scaling['threads']})")
check([r["threads"] for r in bench["runs"]] == [1, 2], "one full bench run per thread count, at that count")
ops = {op["name"]: op for op in scaling["operations"]}
for name in ["GEMM", "GEMM+GELU", "attention", "LayerNorm", "GELU", "optimizer", "loader (decode + resize)"]:
    check(name in ops and len(ops[name]["seconds_per_step"]) == 2 and ops[name]["seconds_per_step"][0] > 0 and
          ops[name]["seconds_per_step"][1] > 0, f"{name}: a time per step at each thread count")
check(ops.get("optimizer", {}).get("bandwidth_bound") is True, "the optimizer (AdamW, no FLOPs counted) is memory-bound")
check(ops.get("loader (decode + resize)", {}).get("bandwidth_bound") is False, "the loader is not counted as memory-bound")
for row in bench["predictions"]["operations"]:
    op = ops[row["operation"]]
    t1, t2 = op["seconds_per_step"]
    if t1 <= 0 or t2 <= 0:
        continue
    serial = karp_flatt(t1 / t2, 2)
    check(abs(row["efficiency_at_2"] - t1 / t2 / 2) <= 1e-9 * (t1 / t2), f"{op['name']}: efficiency at 2 = "
          f"speedup / 2 ({row['efficiency_at_2']:.3f})")
    check(abs(row["serial_fraction"] - serial) <= 1e-9, f"{op['name']}: serial fraction by Karp-Flatt ({serial:.3f})")
    if not op["bandwidth_bound"]:
        for cores in (16, 32, 64):
            expected = amdahl(serial, cores) / cores
            got = row[f"predicted_efficiency_at_{cores}"]
            check(abs(got - expected) <= 1e-9 + 1e-9 * expected,
                  f"{op['name']}: predicted efficiency at {cores} cores is Amdahl's ({expected:.3f})")

with tempfile.TemporaryDirectory() as work:
    def splits(profile, cores):
        path = os.path.join(work, "scaling.json")
        with open(path, "w") as f:
            json.dump(profile, f)
        return json.loads(run("plan", "--scaling", path, "--cores", str(cores), "--json").stdout)["node_splits"]

    measured = splits(bench, 16)
    check(sorted((s["ranks"], s["threads"]) for s in measured) == [(1, 16), (2, 8), (4, 4), (8, 2), (16, 1)],
          "plan --scaling --cores 16 weighs every split of 16 cores")
    check(all(a["images_per_s"] >= b["images_per_s"] for a, b in zip(measured, measured[1:])),
          "... fastest first")
    serial_profile = copy.deepcopy(bench)
    parallel_profile = copy.deepcopy(bench)
    for serial_op, parallel_op in zip(serial_profile["scaling"]["operations"],
                                      parallel_profile["scaling"]["operations"]):
        t1 = serial_op["seconds_per_step"][0]
        serial_op["seconds_per_step"] = [t1, t1 / 2 if serial_op["name"] == "GEMM" else t1]
        serial_op["bandwidth_bound"] = False
        parallel_op["seconds_per_step"] = [t1, t1 / 2]
        parallel_op["bandwidth_bound"] = False
    chosen = splits(serial_profile, 16)[0]
    check((chosen["ranks"], chosen["threads"]) == (16, 1),
          f"operations that do not scale: 16 ranks x 1 thread chosen ({chosen['ranks']} x {chosen['threads']})")
    chosen = splits(parallel_profile, 16)[0]
    check((chosen["ranks"], chosen["threads"]) == (1, 16),
          f"operations that all scale: 1 rank x 16 threads chosen ({chosen['ranks']} x {chosen['threads']})")

    bad = os.path.join(work, "bad.json")
    with open(bad, "w") as f:
        json.dump({"scaling": {"threads": [1, 2]}}, f)
    result = run("plan", "--scaling", bad, ok=False)
    lines = [x for x in result.stderr.splitlines() if x.startswith("error")]
    check(result.returncode != 0 and len(lines) == 1 and bad in lines[0] and "bandwidth_bytes_per_s" in lines[0],
          f"a file that is not a profile: one line naming it and the field ({result.stderr.strip()[:200]})")
result = run("bench", "--scaling", "2,1", ok=False)
check(result.returncode != 0 and result.stderr.count("error") == 1 and "--scaling" in result.stderr,
      f"--scaling 2,1: one line naming the flag ({result.stderr.strip()[:200]})")
result = run("bench", "--scaling", "1,2", "--threads", "2", ok=False)
check(result.returncode != 0 and result.stderr.count("error") == 1 and "--threads" in result.stderr,
      f"--scaling with --threads: one line naming the conflict ({result.stderr.strip()[:200]})")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
