"""JSON files with a control or non-UTF-8 byte, as the command line meets them (a model's config.json, a train
--config file, a labels file): one "error:" line naming the file, the byte offset and the byte written \\xNN; stderr
strict UTF-8 with no control byte but the newline (before: nlohmann's message carried the byte raw).

Env: VITPIPE (the binary), VITPIPE_SOURCE_DIR (the bundled ChestX-ray14 sample)."""

import os
import shutil
import subprocess
import sys
import tempfile

VITPIPE = os.environ.get("VITPIPE", "vitpipe")
SAMPLE = "chestxray14:" + os.path.join(os.environ.get("VITPIPE_SOURCE_DIR", "."), "data", "chestxray14-sample")
failures = []


def check(ok, what, detail=""):
    print(("ok    " if ok else "FAIL  ") + what + (f"  [{detail}]" if detail else ""), flush=True)
    if not ok:
        failures.append(what)


def expect_named_byte(what, args, path, text):
    with open(path, "wb") as f:
        f.write(text)
    offset = min(i for i, b in enumerate(text) if b < 0x20 and b != 0x0a or b >= 0x7f)
    result = subprocess.run([VITPIPE, *args], capture_output=True, timeout=120)
    try:
        stderr = result.stderr.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        check(False, f"{what}: stderr is UTF-8", f"{e}: {result.stderr[-200:]!r}")
        return
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    line = lines[0] if lines else ""
    check(result.returncode != 0 and len(lines) == 1, f"{what}: refused with one error line",
          f"exit {result.returncode}: {stderr[-300:]!r}")
    check(path in line and f"byte offset {offset} (\\x{text[offset]:02x})" in line,
          f"{what}: names {os.path.basename(path)}, byte offset {offset} and \\x{text[offset]:02x}", repr(line))
    check(not any(ord(c) < 0x20 and c != "\n" or ord(c) == 0x7f for c in stderr), f"{what}: no raw control byte",
          repr(stderr[-300:]))


def main():
    root = tempfile.mkdtemp(prefix="vitpipe-json-bytes-")
    try:
        model = os.path.join(root, "model")
        subprocess.run([VITPIPE, "init", "--preset", "vit-micro", "--out", model], check=True, capture_output=True)
        image = os.path.join(root, "missing.png")
        config = open(os.path.join(model, "config.json"), "rb").read()
        expect_named_byte("config.json with \\xff", ["predict", "--model", model, image],
                          os.path.join(model, "config.json"), config.replace(b'"model_type"', b'"mod\xffel_type"', 1))
        expect_named_byte("config.json with DEL", ["predict", "--model", model, image],
                          os.path.join(model, "config.json"), config.replace(b'"model_type":', b'"model_type": \x7f', 1))
        options = os.path.join(root, "options.json")
        expect_named_byte("train --config with a cut UTF-8 sequence", ["train", "--config", options], options,
                          b'{"model": "' + model.encode() + b'", "lr": \xc3(}')
        labels = os.path.join(root, "labels.json")
        expect_named_byte("train --labels FILE with \\x01", ["train", "--model", model, "--data", SAMPLE,
                                                            "--labels", labels, "--max-steps", "1",
                                                            "--output-dir", os.path.join(root, "run")], labels,
                          b'{"labels": ["Effusion", \x01"Mass"]}')
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
