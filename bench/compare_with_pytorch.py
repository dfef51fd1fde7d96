#!/usr/bin/env python3
"""vitpipe beside the PyTorch peer: same model, batch, threads and precision, one run each, printed as ratios.

  bench/compare_with_pytorch.py                        # the issue's table: ViT-Tiny/Small, train/infer, fp32/bf16
  bench/compare_with_pytorch.py --cases vit-tiny:train:fp32 --steps 3
  bench/compare_with_pytorch.py --peer /path/to/torch_vit_bench.py --vitpipe build/vitpipe
  bench/compare_with_pytorch.py --repeat 3               # each case 3 times, alternating; one row per run

The peer (eager PyTorch, Debian's python3-torch) is ../shared/peers/torch_vit_bench.py by default. Its fp32 GEMMs go
through the system BLAS: install libopenblas0-pthread (scripts/setup.sh --tests does) or it falls back to the
reference BLAS and looks ~15x slower than it really is. OPENBLAS_CORETYPE is cleared for the peer (see
--openblas-coretype). Peak memory is each process's max RSS (wait4's rusage).
"""
import argparse, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_CASES = ["vit-tiny:train:fp32", "vit-tiny:train:bf16", "vit-tiny:infer:fp32", "vit-tiny:infer:bf16",
                 "vit-small:train:fp32"]


def run_with_rss(cmd, env=None, may_fail=False):
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err_file, env=env)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)  # per-child rusage: its own max RSS
        err_file.seek(0)
        err = err_file.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        message = f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.decode()}"
        if not may_fail:
            sys.exit(message)
        # The peer under ONEDNN_MAX_CPU_ISA=AVX2 has no bf16 convolution: say so and go on with the other cases.
        print(f"peer failed, its row is left out: {message.strip().splitlines()[-1]}", file=sys.stderr)
        return None, 0
    lines = [l for l in out.decode().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]), usage.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", default=os.path.join(ROOT, "..", "shared", "peers", "torch_vit_bench.py"))
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter with Debian's torch")
    ap.add_argument("--vitpipe", default=os.path.join(ROOT, "build", "vitpipe"))
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES), help="preset:mode:precision,...")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every case this many times (vitpipe and peer alternate), one row per run")
    ap.add_argument("--json", action="store_true", help="print one JSON object per case")
    ap.add_argument("--openblas-coretype", default="auto",
                    help="OPENBLAS_CORETYPE for the peer: 'auto' (default) lets OpenBLAS pick this CPU's kernels, "
                         "or Haswell when VITPIPE_CPU=avx2 caps vitpipe, so both sides use the same instructions; "
                         "'inherit' keeps this shell's value")
    a = ap.parse_args()
    # Some machines export OPENBLAS_CORETYPE=Haswell, which holds the peer's fp32 GEMMs to AVX2 on an AVX-512 CPU.
    peer_env = dict(os.environ)
    if a.openblas_coretype == "auto":
        peer_env.pop("OPENBLAS_CORETYPE", None)
        if os.environ.get("VITPIPE_CPU") == "avx2":
            peer_env["OPENBLAS_CORETYPE"] = "Haswell"
    elif a.openblas_coretype != "inherit":
        peer_env["OPENBLAS_CORETYPE"] = a.openblas_coretype
    if not os.path.exists(a.peer):
        sys.exit(f"peer not found: {a.peer} (pass --peer PATH)")

    if a.repeat < 1:
        sys.exit("--repeat must be at least 1")
    rows = []
    for case in [c for c in a.cases.split(",") for _ in range(a.repeat)]:
        preset, mode, precision = case.split(":")
        ours, our_rss = run_with_rss([a.vitpipe, "bench", "--preset", preset, "--mode", mode, "--precision", precision,
                                      "--batch", str(a.batch), "--steps", str(a.steps), "--threads", str(a.threads),
                                      "--json"])
        peer, peer_rss = run_with_rss([a.python, a.peer, "--preset", preset, "--mode", mode, "--precision", precision,
                                       "--batch", str(a.batch), "--steps", str(a.steps), "--threads",
                                       str(a.threads)], env=peer_env, may_fail=True)
        if peer is None:
            continue
        row = {"case": case, "vitpipe_images_per_s": ours["images_per_s"], "peer_images_per_s": peer["images_per_s"],
               "ratio": ours["images_per_s"] / peer["images_per_s"],
               "fraction_of_gemm_peak": ours["fraction_of_gemm_peak"], "vitpipe_max_rss": our_rss,
               "peer_max_rss": peer_rss, "torch": peer.get("torch")}
        rows.append(row)
        if a.json:
            print(json.dumps(row), flush=True)
    if a.json:
        return
    print(f"batch {a.batch}, {a.threads} threads, {a.steps} timed steps each, one row per side-by-side run (ratios, "
          f"not absolutes, are meaningful on a shared machine); VITPIPE_CPU={os.environ.get('VITPIPE_CPU', '(best)')}, "
          f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(all)')}, peer's "
          f"OPENBLAS_CORETYPE={peer_env.get('OPENBLAS_CORETYPE', '(its own choice)')}")
    print(f"{'case':<22}{'vitpipe img/s':>14}{'peer img/s':>12}{'ratio':>8}{'GEMM peak':>11}{'RSS vitpipe':>13}"
          f"{'RSS peer':>10}")
    for r in rows:
        print(f"{r['case']:<22}{r['vitpipe_images_per_s']:>14.2f}{r['peer_images_per_s']:>12.2f}{r['ratio']:>7.2f}x"
              f"{100 * r['fraction_of_gemm_peak']:>10.0f}%{r['vitpipe_max_rss'] / 2**30:>11.2f}G"
              f"{r['peer_max_rss'] / 2**30:>9.2f}G")


if __name__ == "__main__":
    main()
