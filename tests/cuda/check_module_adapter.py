#!/usr/bin/env python3
"""The CUDA module's C boundary on the CPU: runs a golden case's probe twice, once on the CPU backend and once with
every backend call marshalled by backend/cuda_module_backend.h into the module's C table and unmarshalled by the
loopback table (backend/cuda_module_loopback.h) onto the CPU backend, and requires the two dumps (logits, loss,
every gradient, and the trained parameters where the case steps) to be identical byte for byte. A swapped argument,
a lost optional tensor or a wrong dtype code changes some number.

usage: check_module_adapter.py --probe PATH --case NAME   (a case of tests/model/reference_vit.py or
                                                           reference_families.py)
"""
import argparse, filecmp, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
import reference_vit  # noqa: E402
import reference_families  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probe", required=True)
    ap.add_argument("--case", required=True)
    a = ap.parse_args()
    cases = {**reference_vit.CASES, **reference_families.CASES}
    if a.case not in cases:
        sys.exit(f"unknown case {a.case}")
    args = cases[a.case][0]
    with tempfile.TemporaryDirectory(prefix="vitpipe-module-adapter-") as tmp:
        outs = []
        for name, extra in (("plain", {}), ("loopback", {"VITPIPE_PROBE_MODULE_LOOPBACK": "1"})):
            out = os.path.join(tmp, name)
            env = {**os.environ, **extra}
            env.pop("VITPIPE_PROBE_SEAM", None)
            r = subprocess.run([a.probe, *args, "--out", out], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{name} run failed ({r.returncode}):\n{r.stderr}")
            if name == "loopback":
                report = [line for line in r.stderr.splitlines() if "crossed the module table" in line]
                if not report:
                    sys.exit(f"the loopback run did not report its calls:\n{r.stderr}")
                print(report[0])
            outs.append(out)
        files = sorted(os.listdir(outs[0]))
        if files != sorted(os.listdir(outs[1])):
            sys.exit(f"different files: {files} vs {sorted(os.listdir(outs[1]))}")
        differing = [f for f in files if not filecmp.cmp(os.path.join(outs[0], f), os.path.join(outs[1], f), False)]
        if differing:
            sys.exit(f"{a.case}: the loopback run differs from the CPU backend in {differing}")
        print(f"{a.case}: {len(files)} dump files identical through the module table")


if __name__ == "__main__":
    main()
