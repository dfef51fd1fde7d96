#!/usr/bin/env python3
"""bench_instruction_peak (the cores' own arithmetic ceiling that bench/matrix_unit_check.py weighs the targets
against) reports a rate for each instruction this CPU has and skips, with an error, each one it lacks: CPUs with
AVX2 alone must not crash on the AVX-512 chains, and no chain may vanish from the report. The compiled chains are
counted too: twice GCC merged chains it could prove equal, and the benchmark then reported several times the real
rate. Usage: PATH_TO_BENCHMARK (with $VITPIPE, whose `info --json` says what the CPU has, as the benchmark reads it)."""
import json, os, re, subprocess, sys

# The same detection as the benchmark's (CPUID and XGETBV), not /proc/cpuinfo, which a kernel option can mask apart.
info = json.loads(subprocess.run([os.environ["VITPIPE"], "info", "--json"], capture_output=True, text=True,
                                 check=True).stdout)
flags = set(info["cpu"]["features"])
has = {"BM_Fp32FmaYmm": {"avx2", "fma"} <= flags, "BM_Fp32FmaZmm": "avx512f" in flags,
       "BM_Bf16DotZmm": {"avx512f", "avx512_bf16"} <= flags}

# Each chain function's loop body holds one multiply-add per chain, none merged.
disassembly = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", sys.argv[1]], capture_output=True,
                             text=True, check=True).stdout
ok = True
for function, pattern, chains in (("fma_ymm_chains", r"vfmadd\w+ps\s+%ymm", 12),
                                  ("fma_zmm_chains", r"vfmadd\w+ps\s+%zmm", 16),
                                  ("bf16_dot_zmm_chains", r"vdpbf16ps\s+%zmm", 16)):
    body = re.search(r"<[^>]*" + function + r"\(long\)>:\n(.*?)\n\n", disassembly, re.S)
    count = len(re.findall(pattern, body.group(1))) if body else 0
    good = count >= chains
    print(("ok  " if good else "BAD ") + f"{function}: {count} multiply-adds compiled, {chains} chains")
    ok &= good

proc = subprocess.run([sys.argv[1], "--benchmark_format=json", "--benchmark_min_time=0.01"], capture_output=True,
                      text=True, timeout=120)
if proc.returncode != 0:
    sys.exit(f"BAD bench_instruction_peak exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
report = {b["name"].split("/")[0]: b for b in json.loads(proc.stdout)["benchmarks"]}
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
