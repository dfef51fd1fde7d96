#!/usr/bin/env python3
"""bench_instruction_peak (the cores' own arithmetic ceiling that bench/matrix_unit_check.py weighs the targets
against) reports a rate for each instruction this CPU has and skips, with an error, each one it lacks: CPUs with
AVX2 alone must not crash on the AVX-512 chains, and no chain may vanish from the report. Usage: PATH_TO_BENCHMARK."""
import json, subprocess, sys

flags = set()
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
has = {"BM_Fp32FmaYmm": {"avx2", "fma"} <= flags, "BM_Fp32FmaZmm": "avx512f" in flags,
       "BM_Bf16DotZmm": {"avx512f", "avx512_bf16"} <= flags}

proc = subprocess.run([sys.argv[1], "--benchmark_format=json", "--benchmark_min_time=0.01"], capture_output=True,
                      text=True, timeout=120)
if proc.returncode != 0:
    sys.exit(f"BAD bench_instruction_peak exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
report = {b["name"].split("/")[0]: b for b in json.loads(proc.stdout)["benchmarks"]}
ok = True
for name, present in has.items():
    b = report.get(name)
    if b is None:
        good, what = False, "missing from the report"
    elif present:
        good, what = b.get("FLOP/s", 0) > 0 and not b.get("error_occurred"), f"{b.get('FLOP/s', 0) / 1e9:.0f} GFLOP/s"
    else:
        good, what = bool(b.get("error_occurred")) and "FLOP/s" not in b, f"skipped: {b.get('error_message')}"
    print(("ok  " if good else "BAD ") + f"{name} (CPU has it: {present}): {what}")
    ok &= good
sys.exit(0 if ok else 1)
