#!/usr/bin/env python3
"""Runs a test command with vitpipe's kernels and oneDNN capped at a lower CPU level (VITPIPE_CPU=LEVEL,
ONEDNN_MAX_CPU_ISA=its ISA), so a machine with more runs the lower level's code too. Where LEVEL is this CPU's best
level (or the level the whole suite is capped at with VITPIPE_CPU) the plain test already covers it: exit 77 (CTest's
SKIP_RETURN_CODE) with the reason.

usage: at_cpu_level.py LEVEL -- COMMAND ARGS...     ($VITPIPE: the vitpipe binary)
"""
import json
import os
import subprocess
import sys

LEVELS = ["avx2", "avx512", "avx512_bf16", "amx"]
ONEDNN_ISA = {"avx2": "AVX2", "avx512": "AVX512_CORE", "avx512_bf16": "AVX512_CORE_BF16", "amx": "AVX512_CORE_AMX"}

level, separator, *command = sys.argv[1:]
assert separator == "--" and level in LEVELS and command, __doc__
environment = {k: v for k, v in os.environ.items() if k not in ("VITPIPE_CPU", "ONEDNN_MAX_CPU_ISA")}
info = json.loads(subprocess.run([os.environ["VITPIPE"], "info", "--json"], env=environment, check=True,
                                 capture_output=True, text=True).stdout)
best, why = info["cpu"]["best_level"], "this CPU's best level"
# A suite run capped (VITPIPE_CPU=LEVEL) stands for a CPU of that level: levels above it are skipped as there.
cap = os.environ.get("VITPIPE_CPU", "")
if cap in LEVELS and LEVELS.index(cap) < LEVELS.index(best):
    best, why = cap, "the suite's cap (VITPIPE_CPU)"
if LEVELS.index(level) >= LEVELS.index(best):
    print(f"SKIP: {why} is {best}: the test's plain run already runs {level} or less")
    sys.exit(77)
environment.update(VITPIPE_CPU=level, ONEDNN_MAX_CPU_ISA=ONEDNN_ISA[level])
capped = json.loads(subprocess.run([os.environ["VITPIPE"], "info", "--json"], env=environment, check=True,
                                   capture_output=True, text=True).stdout)
if capped["cpu_kernels"] != level:
    sys.exit(f"VITPIPE_CPU={level} ran {capped['cpu_kernels']} kernels")
print(f"running at {level} (this CPU offers {best}; oneDNN ISA {capped['onednn']['isa']})", flush=True)
sys.exit(subprocess.run(command, env=environment).returncode)
