#!/usr/bin/env python3
"""The golden cases on a GPU (issue 24's GPU check): tests/model/reference_vit.py and reference_families.py run the
probe with every stage on the real CUDA module (VITPIPE_PROBE_CUDA_DEVICE=1) and compare logits, loss, every gradient
and the trained parameters with their float64 PyTorch references at the cases' own tolerances (TF32 off). The
multi-stage cases put 2 or 3 stages on the one GPU, each with its own backend. Exits 77 (skipped) before running any
case where `vitpipe info --json` says no CUDA backend can run. Prints ctest's summary line (scripts/gpu_check.sh
counts it).

usage: golden_on_gpu.py --reference-dir tests/model --probe PATH [--probe-library-path P] --case vit:NAME ...
       (vit: a case of reference_vit.py, families: one of reference_families.py)"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--reference-dir", required=True)
    ap.add_argument("--case", action="append", required=True)
    ap.add_argument("--probe-library-path", help="LD_LIBRARY_PATH for vitpipe and the probe alone (a pack's)")
    a = ap.parse_args()
    tool_env = dict(os.environ)
    if a.probe_library_path:
        tool_env["LD_LIBRARY_PATH"] = a.probe_library_path
    info = subprocess.run([os.environ["VITPIPE"], "info", "--json"], env=tool_env, capture_output=True, text=True,
                          timeout=120)
    cuda = json.loads(info.stdout)["cuda"] if info.returncode == 0 else {}
    if not cuda.get("usable"):
        print(f"SKIP golden on a GPU: no CUDA backend can run here ({cuda.get('error')})")
        return 77
    failed = []
    with tempfile.TemporaryDirectory(prefix="vitpipe-golden-gpu-") as tmp:
        probe = a.probe
        if a.probe_library_path:  # the reference's Python keeps this machine's libraries; the probe gets the pack's
            probe = os.path.join(tmp, "probe")
            with open(probe, "w") as f:
                f.write(f'#!/bin/sh\nLD_LIBRARY_PATH="{a.probe_library_path}" exec "{a.probe}" "$@"\n')
            os.chmod(probe, 0o755)
        env = {**os.environ, "VITPIPE_PROBE_CUDA_DEVICE": "1"}
        env.pop("VITPIPE_PROBE_SEAM", None)
        for case in a.case:
            suite, name = case.split(":", 1)
            script = os.path.join(a.reference_dir, {"vit": "reference_vit.py", "families": "reference_families.py"}[suite])
            r = subprocess.run([sys.executable, script, "--probe", probe, "--case", name], env=env, timeout=600)
            print(f"golden on GPU {case}: {'passed' if r.returncode == 0 else 'FAILED'}", flush=True)
            if r.returncode != 0:
                failed.append(case)
    total = len(a.case)
    print(f"{100 * (total - len(failed)) // total}% tests passed, {len(failed)} tests failed out of {total}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
