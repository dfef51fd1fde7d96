#!/usr/bin/env python3
"""The evaluation layer's place (issue 44): every metric (ROC-AUC and PR-AUC, the bootstrap and its unit, curves,
operating points and the thresholds chosen on val, calibration, subgroups, localization) lives in src/evaluation/,
which reads no layer above it (train, report, explain, serve, cli), and the report reaches into evaluation, never
into train. Fails, naming the file and the include, when a metric moves back or a layer reaches across."""
import os
import pathlib
import re
import sys

root = pathlib.Path(os.environ.get("VITPIPE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
src = root / "src"
problems = []

metrics = ["ranking_metrics", "bootstrap", "bootstrap_unit", "curves", "operating_point", "calibration",
           "operating_thresholds", "subgroups", "subgroup_attributes", "box_list", "box_localization"]
for name in metrics:
    for ext in ("h", "cpp"):
        if not (src / "evaluation" / f"{name}.{ext}").is_file():
            problems.append(f"src/evaluation/{name}.{ext}: missing (the evaluation layer's {name})")
for old in ["metrics", "curves", "operating_thresholds", "bootstrap_unit"]:
    if (src / "train" / f"{old}.h").exists():
        problems.append(f"src/train/{old}.h: a metric in the training layer (it belongs in src/evaluation/)")

include = re.compile(r'#include "([a-z_]+)/')
forbidden = {"evaluation": {"train", "report", "explain", "serve", "cli", "parallel", "inference"},
             "report": {"train", "cli", "serve"}}
for layer, banned in forbidden.items():
    for path in sorted((src / layer).glob("*")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = include.match(line.strip())
            if m and m.group(1) in banned:
                problems.append(f"{path.relative_to(root)}:{number}: {layer} includes {m.group(1)}/ ({line.strip()})")

for p in problems:
    print(p)
print(f"{'FAIL' if problems else 'ok'}: {len(problems)} layering problem(s)")
sys.exit(1 if problems else 0)
