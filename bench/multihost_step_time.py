#!/usr/bin/python3
"""The seed's communication claim across namespaced hosts: step time, exposed and hidden communication and bytes per
step, measured beside `vitpipe plan`'s prediction, for data parallelism, pipeline stages across the link, both, and
`--layout auto`, at each link rate.

    sudo bench/multihost_step_time.py --vitpipe build/vitpipe [--rows 2x1:100mbit:dp,2x1:1gbit:pp,...]
        [--steps N] [--repeat N] [--json FILE]

A row is HOSTSxRANKS_PER_HOST:RATE:LAYOUT[:VARIANT]; variant "mpi" runs the gradient all-reduce as MPI_Iallreduce
with Open MPI's own choice of algorithm (VITPIPE_ALLREDUCE=mpi) instead of vitpipe's ring; "replica-major" keeps
one replica's stages on neighbouring ranks (VITPIPE_RANK_ORDER) instead of the order vitpipe chooses from the hosts
(the prediction then stays the planner's own choice). Layouts (W = the ranks):
  dp          1 stage x W replicas: the gradients cross the link
  dp-sharded  the same with --shard-optimizer (ZeRO-1)
  pp          W stages x 1 replica: the activations cross it
  pp2         2 stages x W/2 replicas
  auto        --layout auto (what it chose is printed beside the row)

A ViT-Base-shaped model (12 layers, hidden 768, 85.7 M parameters) at 32 px (4 patches: the compute is small, the
parameters, and so the gradient reduction, are ViT-Base's), global batch 8 (auto chooses its own micro-batch),
one thread per rank (micro-batch: the replica's share of the batch over the stages), on hosts made by tests/multihost/namespaced_hosts.py (veth, tbf at the rate). The namespaced
hosts share this machine's cores: W ranks run on its cores at once. Per row, in the same hosts, one after the other:
  - predicted: `vitpipe plan --nodes HOSTS --link RATE` with the layout's flags, run by the same mpirun as the
    training (every rank profiles at once, into a fresh profile cache: the prediction sees the machine's load and
    the ranks sharing it as the run does); its step_seconds, exposed_communication_seconds and bytes_per_step.wire.
    `auto` rows train with that cache too, so --layout auto predicts from the profile measured a moment before
    (not from whatever an earlier run left in the user's default cache);
  - measured, over the steps after the first (metrics.jsonl's per-step records): the median step interval (steps:
    --steps, or by default as many as fit in about 30 s of predicted steps, 4 to 24: short pipelined steps on a
    shared machine need more than 2 intervals for a stable median); exposed
    communication per rank (waiting for messages plus the part of the collectives not hidden) and hidden (the
    collectives' time behind compute); vitpipe's `wire_bytes`; the interfaces' bytes: host 0's eth0 tx + rx with
    2 hosts, every host's tx summed with more (all that crosses the links: TCP/IP headers, ACKs and the daemons'
    traffic too), sampled every 50 ms and interpolated at the step records' times.
With --repeat N, rows of steps under 2.5 s run N times (each a fresh prediction and a measurement) and the table
shows the run whose measured / predicted is the median, with every run's ratio beside the layout.
Prints a Markdown table (docs/clusters.md, "Measured: the seed's communication claim").
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
BATCH = 8
COMMON = ["--batch-size", str(BATCH), "--threads", "1", "--image-size", "32"]
FIXED = ["--pipeline-schedule", "1f1b", "--no-recompute"]
PLAN_LINK = {"100mbit": "100Mbit", "1gbit": "1Gbit", "10gbit": "10Gbit"}
VARIANTS = {"mpi": {"VITPIPE_ALLREDUCE": "mpi"}, "replica-major": {"VITPIPE_RANK_ORDER": "replica-major"}}
REPEAT_BELOW_S = 2.5
DEFAULT_ROWS = ",".join([
    "2x1:100mbit:dp", "2x1:100mbit:dp-sharded", "2x1:100mbit:pp", "2x1:100mbit:auto",
    "2x1:1gbit:dp", "2x1:1gbit:dp:mpi", "2x1:1gbit:dp-sharded", "2x1:1gbit:pp", "2x1:1gbit:auto",
    "2x1:10gbit:dp", "2x1:10gbit:pp",
    "4x1:1gbit:dp", "4x1:1gbit:pp", "4x1:1gbit:pp2",
    "2x2:100mbit:pp2", "2x2:100mbit:pp2:replica-major", "2x2:100mbit:auto",
])


def layout_flags(layout, ranks, rate):
    if layout == "auto":
        return ["--layout", "auto", "--link", PLAN_LINK[rate]]
    stages = {"dp": 1, "dp-sharded": 1, "pp": ranks, "pp2": 2}[layout]
    micro_batch = BATCH // (ranks // stages) // stages  # as many micro-batches per replica as stages
    return ["--pipeline-stages", str(stages), "--shard-optimizer" if layout == "dp-sharded" else "--no-shard-optimizer",
            "--micro-batch-size", str(micro_batch), *FIXED]


def steps_for(predicted_s):
    """Enough steps for about 30 s of measured intervals after the first step, 4 to 24."""
    return max(4, min(24, 2 + int(30 / max(predicted_s, 1e-3))))


def parse_json_output(text):
    return json.loads(text[text.index("{"):])


def predict(hosts, vitpipe, model, rate, per_host, flags, cache, env):
    """vitpipe plan, run by the same mpirun across the same hosts (every rank profiles at once)."""
    command = [vitpipe, "plan", "--model", model, "--nodes", str(hosts.count), "--link", PLAN_LINK[rate],
               "--profile-cache", cache, "--json", *COMMON, *flags]
    result = subprocess.run(hosts.mpirun(per_host, command), env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"vitpipe plan failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return parse_json_output(result.stdout)["layouts"][0]


def measure(hosts, vitpipe, model, rate, per_host, flags, steps, out, cache, env):
    shutil.rmtree(out, ignore_errors=True)
    samples = []  # (time, bytes across the links)
    stop = threading.Event()

    def link_total():
        if hosts.count == 2:
            return sum(hosts.interface_bytes(0))
        return sum(hosts.interface_bytes(h)[0] for h in range(hosts.count))

    def sample():
        while not stop.is_set():
            samples.append((time.time(), link_total()))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        train = [vitpipe, "train", "--model", model, "--data", "chestxray14:" + SAMPLE, "--output-dir", out,
                 "--max-steps", str(steps), "--val-fraction", "0", "--log-every", "1", "--loader-threads", "1",
                 "--comm-timeout", "600", "--profile-cache", cache, *COMMON, *flags]
        result = subprocess.run(hosts.mpirun(per_host, train), env=env, capture_output=True, text=True, timeout=1800)
    finally:
        stop.set()
        sampler.join()
    if result.returncode != 0:
        sys.exit(f"training failed ({result.returncode}):\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    train = sorted((r for r in records if r.get("type") == "train"), key=lambda r: r["step"])
    times = [r["time"] for r in train]
    intervals = [b - a for a, b in zip(times[1:], times[2:])]  # the steps after the first
    sample_times = [s[0] for s in samples]

    def link_bytes_at(t):
        i = bisect.bisect_left(sample_times, t)
        (t0, b0), (t1, b1) = samples[max(0, i - 1)], samples[min(len(samples) - 1, i)]
        return b0 if t1 == t0 else b0 + (b1 - b0) * (t - t0) / (t1 - t0)

    after_first = train[2:]
    ranks = hosts.count * per_host
    comm = [r["comm"] for r in after_first]
    chosen = next((r for r in records if r.get("type") == "layout"), None)
    return dict(
        measured_s=statistics.median(intervals),
        exposed_s=statistics.mean(c["p2p_wait_seconds"] + c["collective_exposed_seconds"] for c in comm) / ranks,
        rank_order=next((r["rank_order"] for r in records if r.get("type") == "topology"), None),
        hidden_s=statistics.mean(c["collective_hidden_seconds"] for c in comm) / ranks,
        vitpipe_bytes=statistics.mean(c["wire_bytes"] for c in comm),
        interface_bytes=(link_bytes_at(times[-1]) - link_bytes_at(times[1])) / (len(times) - 2),
        chosen=chosen and chosen["layout"], auto_predicted_s=chosen and chosen["predicted_step_seconds"],
        auto_predicted_exposed_s=chosen and chosen["predicted_exposed_communication_seconds"],
        auto_predicted_bytes=chosen and chosen["predicted_wire_bytes"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vitpipe", required=True)
    parser.add_argument("--rows", default=DEFAULT_ROWS)
    parser.add_argument("--steps", type=int, default=0, help="steps per row (default: by the predicted step time)")
    parser.add_argument("--repeat", type=int, default=1,
                        help=f"rows whose predicted step is under {REPEAT_BELOW_S:g} s: this many runs (prediction and "
                             "measurement each, fresh profile), the table shows the run of median measured / predicted")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.repeat < 1:
        sys.exit("--repeat: at least 1")
    rows = []
    for text in args.rows.split(","):
        parts = text.split(":")
        if len(parts) not in (3, 4) or parts[1] not in PLAN_LINK or parts[2] not in (
                "dp", "dp-sharded", "pp", "pp2", "auto") or (len(parts) == 4 and parts[3] not in VARIANTS):
            sys.exit(f"--rows: '{text}' is not HOSTSxRANKS:RATE:LAYOUT[:VARIANT] (rates {', '.join(PLAN_LINK)}; "
                     f"layouts dp, dp-sharded, pp, pp2, auto; variants {', '.join(VARIANTS)})")
        host_count, per_host = (int(x) for x in parts[0].split("x"))
        rows.append((host_count, per_host, parts[1], parts[2], parts[3] if len(parts) == 4 else ""))
    if args.steps and args.steps < 3:
        sys.exit("--steps: at least 3 (the first step is not counted)")
    skip_unless_possible()
    vitpipe = os.path.abspath(args.vitpipe)
    work = tempfile.mkdtemp(prefix="vitpipe_bench_multihost_")
    results = []
    try:
        model = os.path.join(work, "vit-base-32")
        subprocess.run([vitpipe, "init", "--preset", "vit-base", "--image-size", "32", "--seed", "1", "--out", model],
                       check=True, capture_output=True)
        print("| hosts x ranks | link | layout | variant | step measured | predicted | measured / predicted | "
              "exposed comm. measured (predicted) | hidden comm. | vitpipe bytes/step | planner bytes/step | "
              "interface bytes/step |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for number, (host_count, per_host, rate, layout, variant) in enumerate(rows):
            ranks = host_count * per_host
            flags = layout_flags(layout, ranks, rate)
            runs = []
            while True:
                with NamespacedHosts(host_count, rate=rate) as hosts:
                    env = hosts.env(**VARIANTS.get(variant, {}))
                    cache = os.path.join(work, f"cache{number}-{len(runs)}")  # fresh: profiled now, beside the run
                    plan_flags = flags if layout != "auto" else []
                    best = predict(hosts, vitpipe, model, rate, per_host, plan_flags, cache, env)
                    steps = args.steps or steps_for(best["step_seconds"])
                    got = measure(hosts, vitpipe, model, rate, per_host, flags, steps, os.path.join(work, "run"),
                                  cache, env)
                # `auto`: the prediction --layout auto made for the layout it chose (vitpipe plan's best, profiled a
                # moment earlier, may be another layout).
                auto = layout == "auto"
                got.update(steps=steps, predicted_s=got["auto_predicted_s"] if auto else best["step_seconds"],
                           predicted_exposed_s=got["auto_predicted_exposed_s"] if auto else
                           best["exposed_communication_seconds"],
                           planner_bytes=got["auto_predicted_bytes"] if auto else best["bytes_per_step"]["wire"])
                runs.append(got)
                # Short steps are cheap to repeat, and on a shared machine one run of them is one draw of its load.
                if len(runs) >= (args.repeat if best["step_seconds"] < REPEAT_BELOW_S else 1):
                    break
            # The run whose measured / predicted is the median of the runs (all runs are in --json).
            middle = sorted(runs, key=lambda r: r["measured_s"] / r["predicted_s"])[len(runs) // 2]
            name = layout if layout != "auto" else f"auto: {middle['chosen']}"
            if middle["rank_order"]:
                name += f" ({middle['rank_order']})"
            if len(runs) > 1:
                name += f"; median of {len(runs)} runs: " + ", ".join(
                    f"{r['measured_s'] / r['predicted_s']:.2f}" for r in runs)
            row = dict(hosts=host_count, ranks_per_host=per_host, rate=rate, layout=name,
                       variant=variant or "vitpipe's ring, its rank order", runs=runs, **middle)
            results.append(row)
            print(f"| {host_count} x {per_host} | {rate} | {name} | {variant or '-'} | {middle['measured_s']:.2f} s | "
                  f"{middle['predicted_s']:.2f} s | {middle['measured_s'] / middle['predicted_s']:.2f} | "
                  f"{middle['exposed_s']:.2f} s ({middle['predicted_exposed_s']:.2f} s) | {middle['hidden_s']:.2f} s | "
                  f"{middle['vitpipe_bytes'] / 1e6:.1f} MB | {middle['planner_bytes'] / 1e6:.1f} MB | "
                  f"{middle['interface_bytes'] / 1e6:.1f} MB |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
