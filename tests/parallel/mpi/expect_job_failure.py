"""Runs an mpirun command that must fail: exit non-zero within --seconds, its output containing --expect."""
import argparse
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, required=True)
parser.add_argument("--expect", default="")
parser.add_argument("command", nargs=argparse.REMAINDER)
args = parser.parse_args()
command = args.command[1:] if args.command[:1] == ["--"] else args.command

start = time.monotonic()
try:
    result = subprocess.run(command, capture_output=True, text=True, timeout=args.seconds + 20)
except subprocess.TimeoutExpired:
    sys.exit(f"FAIL: the job hangs: still running after {args.seconds + 20:.0f} s")
elapsed = time.monotonic() - start
output = result.stdout + result.stderr
print(output)
print(f"exit status {result.returncode} after {elapsed:.1f} s")
if result.returncode == 0:
    sys.exit("FAIL: the job exited 0")
if elapsed > args.seconds:
    sys.exit(f"FAIL: the job took {elapsed:.1f} s to go down, more than {args.seconds} s")
if args.expect and args.expect not in output:
    sys.exit(f"FAIL: the output does not contain {args.expect!r}")
print("ok")
