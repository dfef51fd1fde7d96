#!/usr/bin/python3
"""The seed's communication claim across 2 namespaced hosts: step time and bytes per step, measured beside
`vitpipe plan`'s prediction, for pure data parallelism and pipeline stages across the link, with and without
--shard-optimizer, at each link rate.

    sudo bench/multihost_step_time.py --vitpipe build/vitpipe [--rates 100mbit,1gbit] [--layouts dp,dp-sharded,pp]
        [--steps 4] [--mca coll_libnbc_iallreduce_algorithm=1] [--json FILE]

A ViT-Base-shaped model (12 layers, hidden 768, 85.7 M parameters) at 32 px (4 patches: the compute is small, the
parameters, and so the gradient reduction, are ViT-Base's), global batch 8, micro-batch 4, 1 rank per host, one
thread per rank, on hosts made by tests/multihost/namespaced_hosts.py (veth, tbf at the rate). Measured per step,
over the steps after the first (metrics.jsonl's per-step records):
  - step time: the median of the steps' wall-clock intervals;
  - vitpipe's bytes: the per-step `wire_bytes` vitpipe counts (every rank's sends);
  - the interface's bytes: host 0's eth0 tx + rx (all that crosses the link: vitpipe's payload plus TCP/IP
    headers, ACKs and the daemons' traffic), sampled every 50 ms and interpolated at the step records' times.
Predicted: `vitpipe plan --processes 2 --nodes 2 --link RATE` with the same layout flags (its step_seconds and
bytes_per_step.wire). Prints a Markdown table (the README's "Measured: the seed's communication claim"). About 15
minutes for the default rows on 2 cores, most of it the data-parallel rows at 100 Mbit/s.
"""
import argparse
import bisect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multihost"))
from namespaced_hosts import NamespacedHosts, skip_unless_possible  # noqa: E402

SAMPLE = os.path.join(HERE, "..", "data", "chestxray14-sample")
LAYOUTS = {  # name: layout flags (1 rank per host, 2 hosts)
    "dp": ["--pipeline-stages", "1", "--no-shard-optimizer"],  # 1 stage x 2 replicas: gradients cross the link
    "dp-sharded": ["--pipeline-stages", "1", "--shard-optimizer"],  # the same, ZeRO-1
    "pp": ["--pipeline-stages", "2", "--no-shard-optimizer"],  # 2 stages x 1 replica: activations cross it
}
COMMON = ["--batch-size", "8", "--micro-batch-size", "4", "--pipeline-schedule", "1f1b", "--no-recompute",
          "--threads", "1", "--image-size", "32"]
PLAN_LINK = {"100mbit": "100Mbit", "1gbit": "1Gbit", "10gbit": "10Gbit"}


def plan(vitpipe, model, rate, flags, cache):
    out = subprocess.run([vitpipe, "plan", "--model", model, "--processes", "2", "--nodes", "2", "--link",
                          PLAN_LINK[rate], "--profile-cache", cache, "--json", *COMMON, *flags],
                         capture_output=True, text=True, check=True).stdout
    best = json.loads(out)["layouts"][0]
    return best["step_seconds"], best["bytes_per_step"]["wire"]


def measure(vitpipe, model, rate, flags, steps, work, extra_mca):
    out = os.path.join(work, "run")
    shutil.rmtree(out, ignore_errors=True)
    samples = []  # (time, tx + rx of host 0's eth0)
    with NamespacedHosts(2, rate=rate) as hosts:
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                tx, rx = hosts.interface_bytes(0)
                samples.append((time.time(), tx + rx))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            train = [vitpipe, "train", "--model", model, "--data", "chestxray14:" + SAMPLE, "--output-dir", out,
                     "--max-steps", str(steps), "--val-fraction", "0", "--log-every", "1", "--loader-threads", "1",
                     "--comm-timeout", "600", *COMMON, *flags]
            result = subprocess.run(hosts.mpirun(1, train, extra_mca), env=hosts.env(), capture_output=True,
                                    text=True, timeout=1800)
        finally:
            stop.set()
            sampler.join()
    if result.returncode != 0:
        sys.exit(f"training failed ({result.returncode}):\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    train = sorted((r for r in records if r.get("type") == "train"), key=lambda r: r["step"])
    times = [r["time"] for r in train]
    intervals = [b - a for a, b in zip(times[1:], times[2:])]  # the steps after the first

    def link_bytes_at(t):
        i = bisect.bisect_left([s[0] for s in samples], t)
        (t0, b0), (t1, b1) = samples[max(0, i - 1)], samples[min(len(samples) - 1, i)]
        return b0 if t1 == t0 else b0 + (b1 - b0) * (t - t0) / (t1 - t0)

    link = (link_bytes_at(times[-1]) - link_bytes_at(times[1])) / (len(times) - 2)
    vitpipe_bytes = statistics.mean(r["comm"]["wire_bytes"] for r in train[1:])
    return statistics.median(intervals), vitpipe_bytes, link


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vitpipe", required=True)
    parser.add_argument("--rates", default="100mbit,1gbit")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--json")
    # e.g. "coll_libnbc_iallreduce_algorithm=1": Open MPI's non-blocking all-reduce takes a binomial tree (reduce,
    # then broadcast: every byte crosses the link twice, one direction at a time) below 4 ranks unless told ring.
    parser.add_argument("--mca", action="append", default=[], help="NAME=VALUE for mpirun")
    args = parser.parse_args()
    skip_unless_possible()
    vitpipe = os.path.abspath(args.vitpipe)
    work = tempfile.mkdtemp(prefix="vitpipe_bench_multihost_")
    rows = []
    try:
        model = os.path.join(work, "vit-base-32")
        subprocess.run([vitpipe, "init", "--preset", "vit-base", "--image-size", "32", "--seed", "1", "--out", model],
                       check=True, capture_output=True)
        print("| link | layout | step time measured | predicted | measured/predicted | vitpipe bytes/step | "
              "planner bytes/step | interface bytes/step |")
        print("|---|---|---|---|---|---|---|---|")
        for rate in args.rates.split(","):
            for name in args.layouts.split(","):
                flags = LAYOUTS[name]
                predicted, planned_bytes = plan(vitpipe, model, rate, flags, os.path.join(work, "cache"))
                extra_mca = [part for setting in args.mca for part in ["--mca", *setting.split("=", 1)]]
                measured, counted, link = measure(vitpipe, model, rate, flags, args.steps, work, extra_mca)
                rows.append(dict(rate=rate, layout=name, measured_s=measured, predicted_s=predicted,
                                 vitpipe_bytes=counted, planner_bytes=planned_bytes, interface_bytes=link))
                print(f"| {rate} | {name} | {measured:.2f} s | {predicted:.2f} s | {measured / predicted:.2f} | "
                      f"{counted / 1e6:.1f} MB | {planned_bytes / 1e6:.1f} MB | {link / 1e6:.1f} MB |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
