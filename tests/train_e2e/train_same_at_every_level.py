"""The same `vitpipe train` (fp32, a few steps on the generated blob task, stages as threads) at every CPU level this
machine runs (VITPIPE_CPU=LEVEL with oneDNN capped to match) ends at the same weights within 1e-4 relative: the
levels differ only in summation order. Skipped (77) on a CPU that offers one level only (or a suite capped at the
lowest with VITPIPE_CPU)."""

import json
import os
import sys

import numpy as np

import e2e_common as e2e

ONEDNN_ISA = {"avx2": "AVX2", "avx512": "AVX512_CORE", "avx512_bf16": "AVX512_CORE_BF16", "amx": "AVX512_CORE_AMX"}

info = json.loads(e2e.run("info", "--json").stdout)
levels = info["cpu_levels_runnable"]
# A suite run capped (VITPIPE_CPU=LEVEL) stands for a CPU of that level: the levels above it are left out as there.
cap = os.environ.get("VITPIPE_CPU", "")
if cap in ONEDNN_ISA and cap in levels:
    levels = levels[: levels.index(cap) + 1]
if len(levels) < 2:
    who = f"the suite capped with VITPIPE_CPU={cap}" if cap else "this CPU"
    print(f"SKIP: {who} runs one kernel level only ({', '.join(levels)}): nothing to compare")
    sys.exit(77)

checks = e2e.Checks()
root = e2e.temp_dir("levels")
csv = e2e.make_blob_dataset(os.path.join(root, "data"), {"train": 64, "val": 16, "test": 0})
init = os.path.join(root, "init")
e2e.run("init", "--preset", "vit-micro", "--labels", ",".join(e2e.BLOB_LABELS), "--seed", "3", "--out", init)
weights = {}
for level in levels:
    env = dict(os.environ, VITPIPE_CPU=level, ONEDNN_MAX_CPU_ISA=ONEDNN_ISA[level])
    out = os.path.join(root, level)
    e2e.run(*e2e.train_args(init, "csv:" + csv, out, "--epochs", "2", "--batch-size", "16", "--micro-batch-size", "8",
                            "--lr", "1e-3", "--no-augment", "--pipeline-stages", "2", "--export-last"), env=env)
    weights[level] = e2e.read_safetensors(os.path.join(out, "model", "model.safetensors"))[0]
first = levels[0]
for level in levels[1:]:
    worst, where = e2e.max_relative_difference(weights[first], weights[level])
    checks.check(worst < 1e-4, f"{level} ends at {first}'s weights", f"max relative difference {worst:.2e} ({where})")
e2e.cleanup(root)
checks.finish()
