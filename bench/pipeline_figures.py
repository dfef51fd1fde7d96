"""Figures of pipeline x data parallelism, measured by running `vitpipe train` under mpirun (nothing is asserted):

  1. pipeline bubble, measured vs theory, for P = 2 and 4 stages at several micro-batch counts (1F1B, GPipe,
     interleaved 1F1B): the trainer's own figure (1 - a rank's compute / its pipeline's longest step, mean over
     ranks and steps after the first) and one recomputed independently from the --trace file (per step, the window
     from the first forward to the last backward over all ranks; a rank's bubble is the part of it where the rank
     did not compute). The theory, (P-1)/(m+P-1) (interleaved: (P-1)/(v m+P-1)), assumes equal stages and free
     messages;
  2. how much of the gradient all-reduce is hidden behind the backward pass with 2 replicas;
  3. peak activation memory per rank with and without --recompute: the trainer's plan and each rank's max RSS;
  4. ZB-H1 against 1F1B, same runs side by side, for P = 2 and 4 at m = P .. 4P micro-batches: measured bubble
     beside the theory, (P-1)/(m+P-1) for 1F1B and (P-1)/(3m+P-1) for ZB-H1 (forward, input and weight passes of
     equal cost);
  5. optimizer-state bytes per rank, unsharded and --shard-optimizer with 2 and 4 replicas (the trainer's count),
     and each rank's max RSS, on vit-small.

    /usr/bin/python3 bench/pipeline_figures.py [--vitpipe build/vitpipe] [--quick]

Uses the bundled ChestX-ray14 sample and randomly initialised models (`vitpipe init`). Ranks run one CPU thread
each. On a 2-core machine with 4 ranks, the ranks share cores: the P = 4 bubble then also counts the time a rank
waits for a core, and speed-ups are not to be expected. Prints a Markdown table per figure.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "chestxray14:" + os.path.join(ROOT, "data", "chestxray14-sample")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
COMMON = ["--data", DATA, "--schedule", "constant", "--warmup-steps", "0", "--val-fraction", "0", "--seed", "5",
          "--no-augment", "--loader-threads", "1", "--threads", "1", "--log-every", "1"]


def run(args, command):
    full = [args.mpirun, "--oversubscribe", "--allow-run-as-root"] + command
    result = subprocess.run(full, env=ENV, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(full)}\n{result.stdout}{result.stderr}")
    return result.stdout + result.stderr


def init_model(args, work, name, preset, image_size, patch_size):
    path = os.path.join(work, name)
    subprocess.run([args.vitpipe, "init", "--preset", preset, "--image-size", str(image_size), "--patch-size",
                    str(patch_size), "--out", path], check=True, capture_output=True)
    return path


def trainer_figures(log):
    bubble = re.search(r"pipeline bubble: measured ([\d.]+)% .* theory ([\d.]+)%", log)
    hidden = re.search(r"gradient all-reduce hidden behind backward: ([\d.]+)%", log)
    planned = re.search(r"peak activation memory per rank \(planned\): ([\d.]+ \w+)", log)
    return (float(bubble.group(1)) if bubble else None, float(bubble.group(2)) if bubble else None,
            float(hidden.group(1)) if hidden else None, planned.group(1) if planned else None)


def trace_bubble(path):
    """Mean over ranks and steps (the first excluded) of 1 - compute / (window of the step over all ranks), and each
    rank's mean compute per step in ms (unequal stages make a bubble the theory, which assumes equal ones, omits)."""
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    compute = [e for e in events if e.get("cat") == "compute" and e["args"].get("step", -1) > 0]
    steps = sorted({e["args"]["step"] for e in compute})
    ranks = sorted({e["pid"] for e in compute})
    samples = []
    busy_per_rank = {rank: 0.0 for rank in ranks}
    for step in steps:
        mine = [e for e in compute if e["args"]["step"] == step]
        start = min(e["ts"] for e in mine)
        end = max(e["ts"] + e["dur"] for e in mine)
        for rank in ranks:
            busy = sum(e["dur"] for e in mine if e["pid"] == rank)
            busy_per_rank[rank] += busy
            samples.append(1 - busy / (end - start))
    per_rank = [busy_per_rank[rank] / len(steps) / 1e3 for rank in ranks]
    return 100 * sum(samples) / len(samples), per_rank


def trace_allreduce(path):
    """Gradient all-reduce per rank and step (the first excluded): the time from the first bucket's launch to the
    last one's completion, and the part of it the rank spent waiting for them after its backward pass."""
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e["args"].get("step", -1) > 0]
    window = wait = 0.0
    buckets = set()
    for key in {(e["pid"], e["args"]["step"]) for e in events}:
        mine = [e for e in events if (e["pid"], e["args"]["step"]) == key]
        reductions = [e for e in mine if e["name"] == "allreduce"]
        buckets |= {e["args"].get("value") for e in reductions}
        if reductions:
            window += max(e["ts"] + e["dur"] for e in reductions) - min(e["ts"] for e in reductions)
        wait += sum(e["dur"] for e in mine if e["name"] == "allreduce wait")
    return window / 1e3, wait / 1e3, len(buckets)


def figure_bubble(args, work):
    model = init_model(args, work, "tiny64", "vit-tiny", 64, 8)  # 12 layers, 65 tokens
    rows = []
    cases = []
    for stages, counts in ((2, [2, 4, 8]), (4, [4, 8, 16])):
        for m in counts[: 2 if args.quick else 3]:
            cases.append((stages, m, "1f1b", []))
        cases.append((stages, counts[1], "gpipe", []))
    for m in ([2, 4] if args.quick else [2, 4, 8]):
        cases.append((2, m, "interleaved", ["--virtual-stages", "2"]))
    for stages, m, schedule, extra in cases:
        out = os.path.join(work, f"bubble-{stages}-{m}-{schedule}")
        trace = out + ".json"
        log = run(args, ["-np", str(stages), args.vitpipe, "train", "--model", model] + COMMON + [
            "--batch-size", str(4 * m), "--micro-batch-size", "4", "--max-steps", str(args.steps),
            "--pipeline-stages", str(stages), "--pipeline-schedule", schedule, "--trace", trace,
            "--output-dir", out] + extra)
        measured, theory, _, _ = trainer_figures(log)
        traced, per_rank = trace_bubble(trace)
        rows.append((stages, m, schedule + (" v=2" if extra else ""), theory, measured, traced, per_rank))
        print(f"  bubble P={stages} m={m} {schedule}: theory {theory}%, trainer {measured}%, trace {traced:.1f}%",
              file=sys.stderr, flush=True)
    print("\n### Pipeline bubble (vit-tiny, 12 layers, 64 px / patch 8, micro-batch 4, one thread per rank)\n")
    print("| stages P | micro-batches m | schedule | theory | measured (trainer) | measured (trace) | "
          "compute per step by rank (ms) |")
    print("|---|---|---|---|---|---|---|")
    for stages, m, schedule, theory, measured, traced, per_rank in rows:
        print(f"| {stages} | {m} | {schedule} | {theory:.1f}% | {measured:.1f}% | {traced:.1f}% | "
              f"{' / '.join(f'{v:.0f}' for v in per_rank)} |")


def figure_allreduce(args, work):
    rows = []
    for name, preset in (("tiny64", "vit-tiny"), ("small64", "vit-small")):
        model = os.path.join(work, name)
        if not os.path.exists(model):
            init_model(args, work, name, preset, 64, 8)
        for m in (1, 4):
            out = os.path.join(work, f"allreduce-{name}-{m}")
            trace = out + ".json"
            log = run(args, ["-np", "2", args.vitpipe, "train", "--model", model] + COMMON + [
                "--batch-size", str(2 * 4 * m), "--micro-batch-size", "4", "--max-steps", str(args.steps),
                "--trace", trace, "--output-dir", out])
            params = re.search(r"(\d+) parameters", log).group(1)
            _, _, hidden, _ = trainer_figures(log)
            window, wait, buckets = trace_allreduce(trace)
            rows.append((preset, params, buckets, m, hidden, window, wait))
            print(f"  all-reduce {preset} m={m}: hidden {hidden}%", file=sys.stderr, flush=True)
    print("\n### Gradient all-reduce hidden behind the backward pass (2 replicas x 1 stage, 64 px / patch 8)\n")
    print("| model | parameters | buckets (25 MB) | micro-batches per replica | hidden (trainer) | "
          "all-reduce window per step (trace) | waited after backward per step (trace) |")
    print("|---|---|---|---|---|---|---|")
    steps = 2 * (args.steps - 1)  # ranks x measured steps
    for preset, params, buckets, m, hidden, window, wait in rows:
        print(f"| {preset} | {int(params) / 1e6:.1f} M | {buckets} | {m} | {hidden:.0f}% | {window / steps:.1f} ms | "
              f"{wait / steps:.1f} ms |")


def max_rss_per_rank(log):
    return {int(rank): int(kib) for rank, kib in re.findall(r"rank (\d+) max-rss-kib (\d+)", log)}


def figure_memory(args, work):
    model = init_model(args, work, "tiny224", "vit-tiny", 224, 16)  # 197 tokens
    rows = []
    for schedule in ("1f1b", "gpipe"):
        for recompute in (False, True):
            out = os.path.join(work, f"memory-{schedule}-{recompute}")
            train = [args.vitpipe, "train", "--model", model] + COMMON + [
                "--batch-size", "32", "--micro-batch-size", "4", "--max-steps", "2", "--pipeline-stages", "2",
                "--pipeline-schedule", schedule, "--output-dir", out] + (["--recompute"] if recompute else [])
            # GNU time reports each rank's peak resident set; the shell adds the rank to the line.
            log = run(args, ["-np", "2", "sh", "-c", 'exec /usr/bin/time -f "rank $OMPI_COMM_WORLD_RANK max-rss-kib '
                             '%M" "$@"', "time"] + train)
            _, _, _, planned = trainer_figures(log)
            rss = max_rss_per_rank(log)
            rows.append((schedule, recompute, planned, rss))
            print(f"  memory {schedule} recompute={recompute}: planned {planned}, rss {rss}", file=sys.stderr,
                  flush=True)
    print("\n### Activation memory (vit-tiny, 224 px, 2 stages, 8 micro-batches of 4, fp32, AdamW)\n")
    print("| schedule | --recompute | planned activations (rank with the most) | max RSS rank 0 (stage 0) | "
          "max RSS rank 1 (stage 1) |")
    print("|---|---|---|---|---|")
    for schedule, recompute, planned, rss in rows:
        print(f"| {schedule} | {'yes' if recompute else 'no'} | {planned} | {rss.get(0, 0) / 1024:.0f} MiB | "
              f"{rss.get(1, 0) / 1024:.0f} MiB |")


def figure_zero_bubble(args, work):
    model = os.path.join(work, "tiny64")
    if not os.path.exists(model):
        init_model(args, work, "tiny64", "vit-tiny", 64, 8)
    rows = []
    for stages in (2, 4):
        counts = [stages, 2 * stages, 4 * stages] if args.quick else [stages, 2 * stages, 3 * stages, 4 * stages]
        for m in counts:
            row = [stages, m]
            for schedule in ("1f1b", "zb-h1"):
                out = os.path.join(work, f"zb-{stages}-{m}-{schedule}")
                trace = out + ".json"
                log = run(args, ["-np", str(stages), args.vitpipe, "train", "--model", model] + COMMON + [
                    "--batch-size", str(4 * m), "--micro-batch-size", "4", "--max-steps", str(args.steps),
                    "--pipeline-stages", str(stages), "--pipeline-schedule", schedule, "--trace", trace,
                    "--output-dir", out])
                measured, theory, _, _ = trainer_figures(log)
                traced, _ = trace_bubble(trace)
                row += [theory, measured, traced]
                print(f"  zero bubble P={stages} m={m} {schedule}: theory {theory}%, trainer {measured}%, "
                      f"trace {traced:.1f}%", file=sys.stderr, flush=True)
            rows.append(row)
    print("\n### ZB-H1 against 1F1B (vit-tiny, 12 layers, 64 px / patch 8, micro-batch 4, one thread per rank)\n")
    print("| P | m | 1F1B theory | 1F1B measured (trainer / trace) | ZB-H1 theory | ZB-H1 measured (trainer / trace) |")
    print("|---|---|---|---|---|---|")
    for stages, m, t1, m1, r1, t2, m2, r2 in rows:
        print(f"| {stages} | {m} | {t1:.1f}% | {m1:.1f}% / {r1:.1f}% | {t2:.1f}% | {m2:.1f}% / {r2:.1f}% |")


def figure_sharded_memory(args, work):
    model = init_model(args, work, "small64", "vit-small", 64, 8) if not os.path.exists(
        os.path.join(work, "small64")) else os.path.join(work, "small64")
    rows = []
    for processes, shard in ((1, False), (2, False), (2, True), (4, True)):
        out = os.path.join(work, f"shard-{processes}-{shard}")
        train = [args.vitpipe, "train", "--model", model] + COMMON + [
            "--batch-size", "8", "--micro-batch-size", "2", "--max-steps", "2", "--optimizer", "adamw",
            "--output-dir", out] + (["--shard-optimizer"] if shard else [])
        log = run(args, ["-np", str(processes), "sh", "-c", 'exec /usr/bin/time -f "rank $OMPI_COMM_WORLD_RANK '
                         'max-rss-kib %M" "$@"', "time"] + train)
        state = re.search(r"optimizer state per rank \(most on any rank\): ([\d.]+ \w+)", log)
        rss = max_rss_per_rank(log)
        rows.append((processes, shard, state.group(1) if state else "?", rss))
        print(f"  optimizer state {processes} replicas shard={shard}: {rows[-1][2]}, rss {rss}", file=sys.stderr,
              flush=True)
    print("\n### Optimizer state per rank (vit-small, 64 px / patch 8, AdamW, fp32, data parallel only)\n")
    print("| replicas | --shard-optimizer | optimizer state per rank (trainer) | max RSS per rank |")
    print("|---|---|---|---|")
    for processes, shard, state, rss in rows:
        print(f"| {processes} | {'yes' if shard else 'no'} | {state} | "
              f"{' / '.join(f'{rss[r] / 1024:.0f} MiB' for r in sorted(rss))} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vitpipe", default=os.path.join(ROOT, "build", "vitpipe"))
    parser.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run (the first is not measured)")
    parser.add_argument("--quick", action="store_true", help="fewer micro-batch counts")
    parser.add_argument("--only", choices=["bubble", "allreduce", "memory", "zero-bubble", "sharded"])
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="vitpipe-figures-")
    try:
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
        if args.only in (None, "bubble"):
            figure_bubble(args, work)
        if args.only in (None, "allreduce"):
            figure_allreduce(args, work)
        if args.only in (None, "memory"):
            figure_memory(args, work)
        if args.only in (None, "zero-bubble"):
            figure_zero_bubble(args, work)
        if args.only in (None, "sharded"):
            figure_sharded_memory(args, work)
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
