#!/usr/bin/env python3
"""bench/matrix_unit_check.py refuses bad input with one line and exit status 1, before running any benchmark: a
missing peer, vitpipe or --instruction-peak, --repeat, --steps or --threads below 1, and a vitpipe that fails (named
with its last error).
Also the arithmetic of what a peer target asks of the CPU (needed_speed)."""
import importlib.util, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "matrix_unit_check.py")


def refused(args, expected):
    proc = subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    ok = proc.returncode == 1 and len(lines) == 1 and expected in lines[0] and "Traceback" not in proc.stderr
    print(("ok  " if ok else "BAD ") + " ".join(args) + f" -> {proc.returncode}: {proc.stderr.strip()}")
    return ok


with tempfile.TemporaryDirectory() as tmp:
    peer = os.path.join(tmp, "torch_vit_bench.py")
    open(peer, "w").write("# stands in for the peer: never run here\n")
    failing = os.path.join(tmp, "vitpipe")
    open(failing, "w").write("#!/bin/sh\necho 'vitpipe: broken on purpose' >&2\nexit 3\n")
    os.chmod(failing, 0o755)
    missing = os.path.join(tmp, "nothing")
    results = [
        refused(["--peer", missing], f"--peer {missing}: no such file"),
        refused(["--peer", peer, "--vitpipe", missing], f"--vitpipe {missing}: no such file"),
        refused(["--peer", peer, "--vitpipe", failing, "--repeat", "0"], "--repeat and --steps must be at least 1"),
        refused(["--peer", peer, "--vitpipe", failing, "--steps", "0"], "--repeat and --steps must be at least 1"),
        refused(["--peer", peer, "--vitpipe", failing, "--threads", "0"], "--threads must be at least 1"),
        refused(["--peer", peer, "--vitpipe", failing, "--instruction-peak", missing],
                f"--instruction-peak {missing}: no such file"),
        refused(["--peer", peer, "--vitpipe", failing], "failed (3): vitpipe: broken on purpose"),
    ]

# 2x a peer at 10 and 20 images/s, 7 GFLOP an image (70 GFLOP/s at 10 images/s): 140 and 280 GFLOP/s, half and all
# of a 280 GFLOP/s peak.
spec = importlib.util.spec_from_file_location("matrix_unit_check", SCRIPT)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)
runs = [{"peer_images_per_s": 20.0}, {"peer_images_per_s": 10.0}]
for peak, expected in ((280e9, "140-280 GFLOP/s = 50%-100% of 280"), (None, "140-280 GFLOP/s")):
    got = check.needed_speed(runs, 2.0, {"gflops_per_s": 70.0, "images_per_s": 10.0}, peak)
    print(("ok  " if got == expected else "BAD ") + f"needed_speed -> {got!r} (expected {expected!r})")
    results.append(got == expected)
sys.exit(0 if all(results) else 1)
