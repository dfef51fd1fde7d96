"""`vitpipe train --config FILE.yaml` on broken YAML: a control byte, a byte outside well-formed UTF-8, a syntax error,
and a clean file whose quoted scalar escapes to DEL. Each error is strict UTF-8 on stderr, names the file and the
line and column (from yaml-cpp's mark for a syntax error), writes any bad byte \\xNN, and the exit status is
non-zero. yaml-cpp on its own takes control and non-UTF-8 bytes into scalars as they are."""

import os
import shutil
import subprocess
import sys
import tempfile

VITPIPE = os.environ.get("VITPIPE")
if not VITPIPE or not os.access(VITPIPE, os.X_OK):
    print("SKIP: $VITPIPE (the vitpipe binary) is not set or not executable")
    sys.exit(77)

failures = []


def check(name, content, expected):
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        f.write(content)
    result = subprocess.run([VITPIPE, "train", "--config", path], capture_output=True, timeout=60)
    try:
        err = result.stderr.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        failures.append(f"{name}: stderr is not UTF-8 ({e}): {result.stderr!r}")
        return
    if result.returncode == 0:
        failures.append(f"{name}: exit status 0, expected non-zero")
    if f"{path}{expected}" not in err:
        failures.append(f"{name}: stderr lacks {path + expected!r}: {err!r}")
    if any(ord(c) < 0x20 and c != "\n" or ord(c) == 0x7f for c in err):
        failures.append(f"{name}: stderr holds a raw control character: {err!r}")
    print(f"{name}: {err.strip()}")


root = tempfile.mkdtemp(prefix="vitpipe_yaml_config_errors_")
try:
    check("control.yaml", b"lr: 0.001\nepochs: 2\x01\n", ": not valid YAML at line 2, column 10 (byte offset 19, \\x01)")
    check("latin1.yaml", b"lr: 0.001\n# caf\xe9\n", ": not valid YAML at line 2, column 6 (byte offset 15, \\xe9)")
    check("syntax.yaml", b"lr: 0.001\nepochs: [1, 2\n", ": not valid YAML at line 3, column 1: ")
    check("escaped.yaml", b'lr: 0.001\nepochs: "\\x7f"\n', ":2: epochs: expected an integer, got '\\x7f'")
finally:
    shutil.rmtree(root, ignore_errors=True)

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
