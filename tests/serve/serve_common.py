"""What the serve tests share: a small model written by `vitpipe init`, test images (PNG, JPEG, DICOM), a running
`vitpipe serve` on a free loopback port (stopped with SIGTERM, which must end it with exit 0), HTTP helpers, and
`vitpipe predict`'s answers to compare with."""

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

VITPIPE = os.environ.get("VITPIPE", "build/vitpipe")
SOURCE = os.environ.get("VITPIPE_SOURCE_DIR", ".")
sys.path.insert(0, os.path.join(SOURCE, "tests", "image"))
from dicom_files import write_dicom  # noqa: E402

FIXTURE_IMAGES = os.path.join(SOURCE, "tests", "fixtures", "images")


class Checks:
    def __init__(self):
        self.failures = []
        self.count = 0

    def check(self, ok, what, detail=""):
        self.count += 1
        if not ok:
            self.failures.append(what)
            print("FAIL:", what, f"({detail})" if detail else "", flush=True)
        return ok

    def finish(self):
        print(f"{self.count - len(self.failures)}/{self.count} checks passed", flush=True)
        sys.exit(1 if self.failures else 0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ready_port(output):
    """The port in serve's ready line ("serving MODEL on http://HOST:PORT (max batch N, ready)"), or None before it."""
    for line in output.splitlines():
        if line.startswith("serving ") and line.endswith(", ready)"):
            return int(line.rsplit(" (max batch", 1)[0].rsplit(":", 1)[1])
    return None


def make_model(root, preset="vit-mini", image_size=64, labels=None):
    out = os.path.join(root, "model")
    args = [VITPIPE, "init", "--preset", preset, "--image-size", str(image_size), "--out", out, "--seed", "7"]
    if labels:
        args += ["--labels", labels]
    subprocess.run(args, check=True, capture_output=True)
    return out


def make_images(root):
    """PNG fixtures (real radiographs at 64 px), a JPEG, a 16-bit DICOM DX and an 8-bit DICOM CR."""
    images = []
    for name in sorted(os.listdir(FIXTURE_IMAGES))[:6]:
        images.append(os.path.join(FIXTURE_IMAGES, name))
    jpeg = os.path.join(root, "radiograph.jpg")
    Image.open(images[0]).convert("RGB").save(jpeg, quality=90)
    images.append(jpeg)
    rng = np.random.default_rng(3)
    images.append(write_dicom(os.path.join(root, "dx.dcm"), rng.integers(0, 4096, (80, 72), dtype=np.uint16), 16, 12))
    images.append(write_dicom(os.path.join(root, "cr.dcm"), rng.integers(0, 256, (64, 64), dtype=np.uint8), 8, 8,
                              PatientName="Test^Patient"))
    return images


def predict_lines(model, images, *options):
    """`vitpipe predict`'s JSON line per image, keyed by path."""
    out = subprocess.run([VITPIPE, "predict", "--model", model, *options, *images], check=True, capture_output=True,
                         text=True).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return {line["image"]: line for line in lines}


def same_prediction(answer, expected, tolerance=1e-5):
    """Logits and probabilities equal within `tolerance` (an answer must not depend on the batch it rode in)."""
    if set(answer["probabilities"]) != set(expected["probabilities"]):
        return False
    a, e = np.array(answer["logits"]), np.array(expected["logits"])
    if a.shape != e.shape or np.max(np.abs(a - e)) > tolerance * max(1.0, np.max(np.abs(e))):
        return False
    return all(abs(answer["probabilities"][k] - v) <= tolerance for k, v in expected["probabilities"].items())


def request(port, method, path, body=None, headers=None, timeout=60):
    """(status, headers dict with lower-case names, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def form_data(files):
    """A multipart/form-data body of (filename, bytes) parts: (content type, body)."""
    boundary = "vitpipe-test-boundary-7MA4YWxkTrZu0gW"
    body = b""
    for i, (name, data) in enumerate(files):
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image{i}\"; filename=\"{name}\"\r\n"
                 f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", body


def related_dicom(parts, boundary="vitpipe-stow-boundary-1234567890"):
    """A STOW-RS body: (content type, body)."""
    body = b""
    for data in parts:
        body += f"--{boundary}\r\nContent-Type: application/dicom\r\n\r\n".encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return f'multipart/related; type="application/dicom"; boundary={boundary}', body


def metric(text, name, labels=None):
    """The value of one Prometheus sample, or None."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if labels is None and key == name:
            return float(value)
        if labels is not None and key.startswith(name + "{"):
            got = dict(item.split("=", 1) for item in key[len(name) + 1:-1].split(","))
            if all(got.get(k) == f'"{v}"' for k, v in labels.items()):
                return float(value)
    return None


class Server:
    """`vitpipe serve` on a port of the kernel's choosing (--port 0: no other test can take it between choosing and
    binding), read from its ready line; stops with SIGTERM and records the exit status and stderr."""

    def __init__(self, model, *options, env=None):
        self.port = None
        self.log = tempfile.NamedTemporaryFile(prefix="serve-", suffix=".log", delete=False)
        self.args = [VITPIPE, "serve", "--model", model, "--port", "0", "--threads", "2", *options]
        self.env = dict(os.environ, **(env or {}))
        self.process = None
        self.exit_code = None

    def __enter__(self):
        self.process = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vitpipe serve exited with {self.process.returncode}: {self.output()}")
            if self.port is None:
                self.port = ready_port(self.output())
            if self.port is not None:
                with contextlib.suppress(OSError):
                    if request(self.port, "GET", "/healthz", timeout=2)[0] == 200:
                        return self
            time.sleep(0.1)
        raise RuntimeError("vitpipe serve did not become ready in 60 s: " + self.output())

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.exit_code = self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.exit_code = "killed after 60 s"
        elif self.process:
            self.exit_code = self.process.returncode

    def __exit__(self, *exc):
        self.stop()
        os.unlink(self.log.name)


def temporary_root():
    root = tempfile.mkdtemp(prefix="vitpipe-serve-")
    return root, lambda: shutil.rmtree(root, ignore_errors=True)


def run_case(cases, skip_reason=None):
    """--case NAME: runs cases[NAME](root, checks) in a fresh temporary directory; exit 77 (skipped) with
    `skip_reason` when it is given, else 0 or 1 by the checks."""
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=sorted(cases))
    args = parser.parse_args()
    if skip_reason:
        print("SKIP:", skip_reason)
        sys.exit(77)
    root, cleanup = temporary_root()
    checks = Checks()
    try:
        cases[args.case](root, checks)
    finally:
        cleanup()
    checks.finish()
