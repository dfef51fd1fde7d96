#!/usr/bin/env python3
"""The matrix-unit acceptance run (AMX, AVX-512-BF16): every figure the issue asks for, on this CPU, in one go.

  bench/matrix_unit_check.py --peer /path/to/torch_vit_bench.py            # all cases
  bench/matrix_unit_check.py --peer ... --skip-base                          # without ViT-Base (minutes on 2 cores)
  VITPIPE_CPU=avx2 ONEDNN_MAX_CPU_ISA=AVX2 bench/matrix_unit_check.py ...    # the AVX2 level's targets

It prints `vitpipe info`, then one line per acceptance target with the figure measured here and whether it is met,
for the level this CPU runs: the ratios beside the PyTorch peer come from bench/compare_with_pytorch.py (alternating
runs, --repeat of each), the rest from `vitpipe bench --json` (attention against the linear GEMMs' rate, the
elementwise passes' share of the step, the fraction of the GEMM peak, peak memory). On an AMX CPU it also times the
attention on AMX tiles against oneDNN's GEMMs (VITPIPE_ATTENTION_TILES=off). Under each target beside the peer it
prints the speed the target asks of this CPU (executed GFLOP/s at that multiple of the peer's runs) as a share of the
cores' own instruction peak (bench/bench_instruction_peak.cpp): above 100%, no code reaches it here. Ratios are from
single runs on what is usually a shared machine: read them as ranges over --repeat, not as one number.
"""
import argparse, json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, env=None):
    """stdout of cmd; on failure, one line naming the command and its last line of error, and exit 1."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    except OSError as e:
        sys.exit(f"matrix_unit_check: cannot run {cmd[0]}: {e.strerror}")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        sys.exit(f"matrix_unit_check: {' '.join(cmd)} failed ({proc.returncode}): {last}")
    return proc.stdout


def bench(a, preset, mode, precision, batch, steps, env=None):
    out = run([a.vitpipe, "bench", "--preset", preset, "--mode", mode, "--precision", precision, "--batch", str(batch),
               "--steps", str(steps), "--threads", str(a.threads), "--json"], env)
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def elementwise_share(result):
    """What is neither a GEMM nor attention: GELU, LayerNorm, embeddings, optimizer, conversions, unaccounted time,
    and GELU's part of the fused GEMM+GELU calls (the part beyond the linear GEMMs' rate)."""
    b = result["breakdown"]
    return 1.0 - b.get("GEMM", 0.0) - b.get("attention", 0.0) - b.get("GEMM+GELU", 0.0) + result.get(
        "gelu_in_fused_gemms_share", 0.0)


def peer_runs(a, case):
    """compare_with_pytorch.py's rows for case: ratio, peer_images_per_s, ..."""
    cmd = [sys.executable, os.path.join(HERE, "compare_with_pytorch.py"), "--peer", a.peer, "--vitpipe", a.vitpipe,
           "--cases", case, "--steps", str(a.steps), "--repeat", str(a.repeat), "--threads", str(a.threads), "--json"]
    rows = [json.loads(l) for l in run(cmd).splitlines() if l.startswith("{")]
    if not rows:
        print(f"matrix_unit_check: the peer gave no result for {case} (compare_with_pytorch.py says why when run "
              f"alone)", file=sys.stderr)
    return rows


def instruction_peaks(path, threads):
    """bench_instruction_peak's FLOP/s on `threads` threads per benchmark name, the best of 5 runs ({} when it is not
    built or fails); skipped ones are left out."""
    if not os.path.isfile(path):
        print(f"matrix_unit_check: {path} not built: the targets' distance to the cores' peak is not shown",
              file=sys.stderr)
        return {}
    try:
        proc = subprocess.run([path, "--benchmark_format=json", "--benchmark_repetitions=5"], capture_output=True,
                              text=True, timeout=300,
                              env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        out = json.loads(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        proc, out = None, str(e)
    if proc is None or proc.returncode != 0 or not isinstance(out, dict):
        # Context for the targets, not a target: its failure leaves the acceptance run going.
        why = out if proc is None else f"exit status {proc.returncode}"
        print(f"matrix_unit_check: {path} failed ({why}): the targets' distance to the cores' peak is not shown",
              file=sys.stderr)
        return {}
    peaks = {}  # the best of the repetitions: a peak is what the cores can do, and a shared host only takes away
    for b in out["benchmarks"]:
        if "FLOP/s" in b and b.get("run_type", "iteration") == "iteration":
            name = b["name"].split("/")[0]
            peaks[name] = max(peaks.get(name, 0.0), b["FLOP/s"])
    return peaks


def needed_speed(rows, need, result, peak):
    """What `need` x the peer asks of this CPU: the executed GFLOP/s it takes (the peer's fastest and slowest runs),
    against the cores' own instruction peak (bench_instruction_peak.cpp)."""
    gflop_per_image = result["gflops_per_s"] / result["images_per_s"]
    speeds = [need * r["peer_images_per_s"] * gflop_per_image for r in rows]
    text = span(speeds, "{:.0f}") + " GFLOP/s"
    if peak:
        text += f" = {span([v / (peak / 1e9) for v in speeds], '{:.0%}')} of {peak / 1e9:.0f}"
    return text


def span(values, fmt):
    if not values:
        return "(no run)"
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low if low == high else f"{low}-{high}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", required=True, help="the PyTorch peer, torch_vit_bench.py")
    ap.add_argument("--vitpipe", default=os.path.join(ROOT, "build", "vitpipe"))
    ap.add_argument("--repeat", type=int, default=2, help="side-by-side runs per peer case")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--skip-base", action="store_true", help="leave out ViT-Base bf16 training")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads for vitpipe, the peer and the instruction peak alike (default: every core)")
    ap.add_argument("--instruction-peak", help="bench_instruction_peak, for how far each peer target lies from the "
                    "cores' own peak (default: build/bench/bench_instruction_peak, left out when not built)")
    a = ap.parse_args()
    if not os.path.isfile(a.peer):
        sys.exit(f"matrix_unit_check: --peer {a.peer}: no such file (expected torch_vit_bench.py)")
    if not os.path.isfile(a.vitpipe):
        sys.exit(f"matrix_unit_check: --vitpipe {a.vitpipe}: no such file (build it first: see the README)")
    if a.repeat < 1 or a.steps < 1:
        sys.exit(f"matrix_unit_check: --repeat and --steps must be at least 1 (got {a.repeat} and {a.steps})")
    if a.threads < 1:
        sys.exit(f"matrix_unit_check: --threads must be at least 1 (got {a.threads})")
    if a.instruction_peak is None:
        a.instruction_peak = os.path.join(ROOT, "build", "bench", "bench_instruction_peak")
    elif not os.path.isfile(a.instruction_peak):
        sys.exit(f"matrix_unit_check: --instruction-peak {a.instruction_peak}: no such file (expected "
                 f"build/bench/bench_instruction_peak)")

    info = run([a.vitpipe, "info"])
    print(info.rstrip())
    tiny_bf16 = bench(a, "vit-tiny", "train", "bf16", 32, a.steps)
    level = tiny_bf16["cpu_kernels"]
    amx, avx2 = level == "amx", level == "avx2"
    tiny_fp32 = bench(a, "vit-tiny", "train", "fp32", 32, a.steps)
    # The peak of the precision this level has targets for: bf16 where it is in hardware, else fp32.
    peak_run, peak_type = (tiny_bf16, "bf16") if tiny_bf16["bf16_in_hardware"] else (tiny_fp32, "fp32")
    print(f"\nlevel {level}, oneDNN {tiny_bf16['onednn_isa']}, {tiny_bf16['threads']} threads, batch 32; "
          f"GEMM peak {peak_run['gemm_peak_gflops_per_s']:.0f} GFLOP/s ({peak_type} operands)")

    rows = []  # (target, measured, met: True / False / None where this level has no such target)

    def add(target, measured, met):
        rows.append((target, measured, met))

    for name, result in (("bf16", tiny_bf16), ("fp32", tiny_fp32)):
        if not result["bf16_in_hardware"] and name == "bf16":
            continue  # bf16 is emulated below avx512_bf16: no target there
        ratio = result["attention_gflops_per_s"] / result["linear_gemm_gflops_per_s"]
        need = 0.5 if amx and name == "bf16" else 0.75 if avx2 else 0.6
        add(f"ViT-Tiny {name} training: attention >= {need:.0%} of the linear GEMMs' rate",
            f"{ratio:.1%} ({result['attention_gflops_per_s']:.0f} / {result['linear_gemm_gflops_per_s']:.0f} GFLOP/s)",
            ratio >= need)
    share = elementwise_share(tiny_bf16 if tiny_bf16["bf16_in_hardware"] else tiny_fp32)
    add("ViT-Tiny training: elementwise passes <= 8% of the step", f"{share:.1%}", share <= 0.08)
    if amx:
        off = bench(a, "vit-tiny", "train", "bf16", 32, a.steps,
                    env=dict(os.environ, VITPIPE_ATTENTION_TILES="off"))
        add("ViT-Tiny bf16 attention: AMX tiles against oneDNN's GEMMs (no target; for the note)",
            f"{tiny_bf16['attention_gflops_per_s']:.0f} vs {off['attention_gflops_per_s']:.0f} GFLOP/s", None)

    peaks = instruction_peaks(a.instruction_peak, a.threads)
    # The AMX unit's own peak is not measured: on an AMX CPU the bf16 line shows AVX-512-BF16's, which AMX exceeds.
    bf16_peak = peaks.get("BM_Bf16DotZmm")
    fp32_peak = peaks.get("BM_Fp32FmaYmm" if avx2 else "BM_Fp32FmaZmm")
    if tiny_bf16["bf16_in_hardware"]:
        runs = peer_runs(a, "vit-tiny:train:bf16")
        r = [x["ratio"] for x in runs]
        need = 3.0 if amx else 2.2
        add(f"ViT-Tiny bf16 training >= {need}x the peer", span(r, "{:.2f}x"), min(r) >= need if r else None)
        if runs:
            add(f"  {need}x the peer needs (executed; of the cores' {'AVX-512-BF16 ' if amx else ''}instruction peak)",
                needed_speed(runs, need, tiny_bf16, bf16_peak), None)
        r = [x["ratio"] for x in peer_runs(a, "vit-tiny:infer:bf16")]
        add("ViT-Tiny bf16 inference >= 3x the peer (AMX)", span(r, "{:.2f}x"), min(r) >= 3.0 if amx and r else None)
    runs = peer_runs(a, "vit-tiny:train:fp32")
    r = [x["ratio"] for x in runs]
    need = 3.0 if avx2 else 4.0
    add(f"ViT-Tiny fp32 training >= {need:.0f}x the peer", span(r, "{:.2f}x"), min(r) >= need if r else None)
    if runs:
        add(f"  {need:.0f}x the peer needs (executed; of the cores' fp32 FMA instruction peak)",
            needed_speed(runs, need, tiny_fp32, fp32_peak), None)

    if not a.skip_base and tiny_bf16["bf16_in_hardware"]:
        base = bench(a, "vit-base", "train", "bf16", 32, 3)
        frac = base["fraction_of_gemm_peak"]
        add("ViT-Base bf16 training >= 80% of the GEMM peak (AMX)", f"{frac:.0%}", frac >= 0.8 if amx else None)
        rss = base["peak_rss_bytes"] / 2**30
        add("ViT-Base bf16 training, batch 32: peak RSS < 3.95 GiB", f"{rss:.2f} GiB", rss < 3.95)

    width = max(len(target) for target, _, _ in rows) + 2
    print(f"\n{'target':<{width}}{'measured':>40}  met ('-': no target at this level, or no run)")
    for target, measured, met in rows:
        print(f"{target:<{width}}{measured:>40}  {'-' if met is None else 'yes' if met else 'NO'}")


if __name__ == "__main__":
    main()
