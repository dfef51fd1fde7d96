"""`vitpipe report` on JSON inputs holding a byte no terminal should get (\xff, DEL): the error is one line of strict
UTF-8 on stderr that names the file, the byte offset and the byte written \\xNN, and the exit status is non-zero. Each
of the report's JSON inputs is broken in turn: RUN/train_options.json, RUN/heatmaps/index.json, --localization FILE."""

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


def check(name, args, path, offset, byte, also=None):
    result = subprocess.run([VITPIPE, *args], capture_output=True, timeout=60)
    try:
        err = result.stderr.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        failures.append(f"{name}: stderr is not UTF-8 ({e}): {result.stderr!r}")
        return
    expected = f"{path}: not valid JSON at byte offset {offset} ({byte})"
    if result.returncode == 0:
        failures.append(f"{name}: exit status 0, expected non-zero")
    if expected not in err:
        failures.append(f"{name}: stderr lacks {expected!r}: {err!r}")
    if also is not None and also not in err:
        failures.append(f"{name}: stderr lacks {also!r}: {err!r}")
    if any(ord(c) < 0x20 and c != "\n" or ord(c) == 0x7f for c in err):
        failures.append(f"{name}: stderr holds a raw control character: {err!r}")
    print(f"{name}: {err.strip()}")


root = tempfile.mkdtemp(prefix="vitpipe_report_error_bytes_")
try:
    run = os.path.join(root, "run")
    os.makedirs(os.path.join(run, "heatmaps"))
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        f.write('{"step": 1, "loss": 0.5}\n')

    options = os.path.join(run, "train_options.json")
    with open(options, "wb") as f:
        f.write(b'{"lr": "a\xffb"}\n')  # \xff at byte offset 9
    check("train_options.json", ["report", run], options, 9, "\\xff")
    with open(options, "w") as f:
        f.write('{"lr": 0.001}\n')

    index = os.path.join(run, "heatmaps", "index.json")
    with open(index, "wb") as f:
        f.write(b'{"maps": [\x7f]}')  # DEL at byte offset 10
    check("heatmaps/index.json", ["report", run], index, 10, "\\x7f")
    os.remove(index)

    localization = os.path.join(root, "localization.json")
    with open(localization, "wb") as f:
        f.write(b'{"format": "vitpipe-localization", "version": 1, "\xc3(": 0}')
    # \xc3 at offset 50 starts a sequence that "(" at 51 breaks: the offset is the byte that made it ill-formed, and
    # the quoted input shows both, the lead byte escaped.
    check("--localization", ["report", run, "--localization", localization], localization, 51, "\\x28", "'\"\\xc3('")
finally:
    shutil.rmtree(root, ignore_errors=True)

for failure in failures:
    print("FAIL:", failure)
sys.exit(1 if failures else 0)
