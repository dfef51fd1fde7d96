#!/usr/bin/env python3
"""vitpipe's command line with CUDA absent or partial, on a machine without a GPU: `info` and `info --json` report
the module, the driver and the GPUs; `--device cuda` gives one sentence naming what is missing and exits 1 on every
command that computes; `--device auto` falls back to the CPU and says so; the binary links no CUDA library.

Cases: no module; the module built here without a driver; with the toolkit's stub libcuda.so served as libcuda.so.1;
a fake driver with one GPU and a fake module without a backend (everything present but the CUDA backend). Cases that
need what this build or machine lacks are skipped with the reason printed."""
import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

VITPIPE = os.environ["VITPIPE"]
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def run(args, env_extra=None, drop=()):
    env = dict(os.environ)
    for name in drop:
        env.pop(name, None)
    env.update(env_extra or {})
    return subprocess.run([VITPIPE, *args], env=env, capture_output=True, text=True, timeout=300)


def info_json(env_extra=None, drop=()):
    result = run(["info", "--json"], env_extra, drop)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["cuda"]


# Each computing command with the least it needs to parse; --device is checked before any of it is read.
COMMANDS = {
    "train": ["train", "--model", "/nonexistent/model", "--data", "/nonexistent/data", "--output-dir", "/nonexistent/o"],
    "plan": ["plan", "--model", "/nonexistent/model"],
    "eval": ["eval", "--model", "/nonexistent/model", "--data", "/nonexistent/data"],
    "predict": ["predict", "--model", "/nonexistent/model", "/nonexistent/image.png"],
    "explain": ["explain", "--model", "/nonexistent/model", "--out", "/nonexistent/out", "/nonexistent/image.png"],
    "bench": ["bench", "--preset", "vit-micro", "--batch", "1", "--steps", "1"],
}


def check_device_cuda_refused(env_extra, expected, case):
    """--device cuda on every command: exit 1, nothing on stdout, one line on stderr holding `expected`."""
    for name, args in COMMANDS.items():
        result = run([*args, "--device", "cuda"], env_extra)
        lines = result.stderr.strip().splitlines()
        check(result.returncode == 1 and result.stdout == "" and len(lines) == 1
              and lines[0].startswith("error: --device cuda cannot run: ") and expected in lines[0]
              and lines[0].endswith("; use --device cpu"),
              f"{case}: {name} --device cuda refuses in one line holding {expected!r} "
              f"(exit {result.returncode}, stderr {result.stderr.strip()!r})")


def driver_present():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", default="", help="the module this build made ('' when none)")
    parser.add_argument("--stub-driver", default="", help="the toolkit's stubs/libcuda.so ('' when none)")
    parser.add_argument("--library", required=True, help="libvitpipe.a")
    parser.add_argument("--fake-driver", required=True)
    parser.add_argument("--fake-module", required=True)
    a = parser.parse_args()
    built = bool(a.module)
    missing = {"VITPIPE_CUDA_MODULE": "/nonexistent/libvitpipe_cuda.so"}

    # The binary and the library link no CUDA library, directly or through another (ldd follows NEEDED).
    cuda_library = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cudnn\w*|nccl)\.so")
    needed = subprocess.run(["readelf", "-d", VITPIPE], capture_output=True, text=True, check=True).stdout
    check("NEEDED" in needed and not cuda_library.search(needed), "readelf -d vitpipe: no CUDA library is NEEDED")
    ldd = subprocess.run(["ldd", VITPIPE], capture_output=True, text=True).stdout
    check(ldd and not cuda_library.search(ldd), "ldd vitpipe: no CUDA library is loaded with the binary")
    undefined = subprocess.run(["nm", "-u", "--quiet", a.library], capture_output=True, text=True).stdout
    cuda_symbols = re.findall(r"^\s+U ((?:cuda|cublas|cudnn|nccl|cu[A-Z])\w*)$", undefined, re.M)
    check(undefined and not cuda_symbols, f"nm -u libvitpipe.a: no CUDA symbol is referenced {cuda_symbols[:5]}")
    if built:
        module_needed = subprocess.run(["readelf", "-d", a.module], capture_output=True, text=True, check=True).stdout
        check(all(f"[{lib}" in module_needed for lib in ("libcublasLt.so", "libcudnn.so", "libnccl.so"))
              and "libcudart" not in module_needed and "[libcuda.so" not in module_needed,
              "readelf -d libvitpipe_cuda.so: cuBLASLt, cuDNN and NCCL, the runtime static, the driver not linked")

    # Case 1: no module.
    cuda = info_json(missing)
    check(cuda["built"] == built and cuda["module"] is None and cuda["loaded"] is False
          and cuda["libraries"] is None and not cuda["usable"]
          and "the CUDA module is missing: no /nonexistent/libvitpipe_cuda.so" in cuda["error"],
          f"no module: info --json says so ({cuda})")
    text = run(["info"], missing).stdout
    check("CUDA module: not found" in text and "--device cuda: " in text and "the CUDA module is missing" in text,
          "no module: info's text says so")
    check_device_cuda_refused(missing, "the CUDA module is missing: no /nonexistent/libvitpipe_cuda.so", "no module")
    result = run([*COMMANDS["bench"], "--device", "auto"], missing)
    check(result.returncode == 0 and "--device auto: running on the CPU (" in result.stderr
          and "the CUDA module is missing" in result.stderr,
          f"no module: bench --device auto runs on the CPU and says why ({result.stderr.strip()[:300]!r})")
    result = run([*COMMANDS["bench"], "--device", "gpu"])
    check(result.returncode == 1 and result.stderr.strip() == "error: --device must be cpu, cuda or auto (got 'gpu')",
          f"--device gpu: one line, exit 1 ({result.stderr.strip()!r})")
    result = run([*COMMANDS["train"], "--device", "gpu"])
    check(result.returncode == 1 and "--device" in result.stderr and "gpu" in result.stderr,
          f"train --device gpu: refused, exit 1 ({result.stderr.strip()!r})")

    # Case 1b: a build without the module, nothing named: the sentence says the build has none.
    if not built:
        cuda = info_json(drop=["VITPIPE_CUDA_MODULE"])
        check(cuda["built"] is False and cuda["module"] is None
              and "this vitpipe was built without its CUDA module (VITPIPE_CUDA=off" in cuda["error"],
              f"built without the module: info says so ({cuda['error']})")

    # Case 2: the module built here, found beside the binary, and no driver on this machine.
    if not built:
        print("SKIP module present: this build has no CUDA module (VITPIPE_CUDA=off, or CUDA 13 not found)")
    elif driver_present():
        print("SKIP module present without a driver: this machine has libcuda.so.1")
    else:
        cuda = info_json(drop=["VITPIPE_CUDA_MODULE"])
        check(cuda["module"] and os.path.realpath(cuda["module"]) == os.path.realpath(a.module),
              f"module present: found beside the binary ({cuda['module']})")
        check(cuda["loaded"] is True and cuda["libraries"]["cudnn"].startswith("9.")
              and cuda["libraries"]["cuda_runtime"].startswith("13.") and "sm_80 sm_90" in cuda["built_with"],
              f"module present: loaded, its libraries answer ({cuda['libraries']}, {cuda['built_with']})")
        check(cuda["driver"] is None and cuda["devices"] == [] and not cuda["usable"]
              and cuda["error"].startswith("no NVIDIA driver: libcuda.so.1 could not be opened")
              and "insufficient" not in cuda["error"] and "module" not in cuda["error"],
              f"module present, no driver: the driver is named missing ({cuda['error']})")
        check_device_cuda_refused({}, "no NVIDIA driver: libcuda.so.1 could not be opened", "no driver")

    # Case 2b: the installed layout, bin/vitpipe and lib/vitpipe/libvitpipe_cuda.so (a copy: /proc/self/exe of a
    # symbolic link is its target).
    if built:
        with tempfile.TemporaryDirectory() as prefix:
            os.makedirs(os.path.join(prefix, "bin"))
            os.makedirs(os.path.join(prefix, "lib", "vitpipe"))
            shutil.copy2(VITPIPE, os.path.join(prefix, "bin", "vitpipe"))
            installed_module = os.path.join(prefix, "lib", "vitpipe", "libvitpipe_cuda.so")
            shutil.copy2(a.module, installed_module)
            result = subprocess.run([os.path.join(prefix, "bin", "vitpipe"), "info", "--json"], capture_output=True,
                                    text=True, env={k: v for k, v in os.environ.items() if k != "VITPIPE_CUDA_MODULE"})
            cuda = json.loads(result.stdout)["cuda"]
            check(cuda["module"] == installed_module and cuda["loaded"],
                  f"installed layout: the module is found in ../lib/vitpipe/ ({cuda['module']})")

    # Case 3: the toolkit's stub served as libcuda.so.1.
    if not a.stub_driver:
        print("SKIP stub driver: no CUDA toolkit here")
    else:
        with tempfile.TemporaryDirectory() as folder:
            os.symlink(a.stub_driver, os.path.join(folder, "libcuda.so.1"))
            stub = {"LD_LIBRARY_PATH": folder + ":" + os.environ.get("LD_LIBRARY_PATH", "")}
            if not built:
                stub.update(missing)
            cuda = info_json(stub)
            expected = "the NVIDIA driver is not usable: cuDriverGetVersion failed with CUDA_ERROR_STUB_LIBRARY"
            check(cuda["driver"] is None and not cuda["usable"] and cuda["error"].startswith(expected)
                  and cuda["loaded"] == built, f"stub driver: info says the driver is not usable ({cuda['error']})")
            check_device_cuda_refused(stub, expected, "stub driver")

    # Case 4: everything present (a fake driver with one sm_90 GPU, a fake module that sees it).
    fake = {"LD_LIBRARY_PATH": os.path.dirname(a.fake_driver), "VITPIPE_CUDA_MODULE": a.fake_module}
    cuda = info_json(fake)
    check(cuda["driver"] == "13.0" and cuda["devices"][0]["name"] == "Fake GPU" and cuda["loaded"]
          and cuda["error"].startswith("the CUDA backend is not built into the module "),
          f"fake driver and module: info says the module has no backend ({cuda['error']})")
    text = run(["info"], fake).stdout
    check("GPU 0: Fake GPU, compute capability 9.0, 80.0 GiB" in text and "NVIDIA driver: 13.0" in text,
          "fake driver and module: info's text lists the GPU")
    check_device_cuda_refused(fake, "the CUDA backend is not built into the module ", "everything present")
    result = run([*COMMANDS["bench"], "--device", "auto"], fake)
    check(result.returncode == 0 and "--device auto: running on the CPU (the CUDA backend is not built into the module" in
          result.stderr, "everything present: bench --device auto runs on the CPU and says why")
    # --device cpu never opens the module: a broken module path does not matter.
    result = run([*COMMANDS["bench"], "--device", "cpu"], missing)
    check(result.returncode == 0 and "CUDA" not in result.stderr, "--device cpu never looks for CUDA")

    # Case 5: this machine's own driver and GPUs (a GPU machine): the module has its backend and --device cuda runs.
    real = info_json(drop=["VITPIPE_CUDA_MODULE"])
    if not (built and real["devices"] and real["driver"]):
        print("SKIP a real GPU: no usable driver and GPU here, or no module in this build")
    else:
        check(real["loaded"] and real["usable"] and real["error"] is None,
              f"real GPU: the module sees it and its backend can run ({real['error']})")
        result = run([*COMMANDS["bench"], "--device", "cuda"], {})
        check(result.returncode == 0 and "device: cuda" in result.stdout,
              f"real GPU: bench --device cuda runs ({result.stderr[-500:]})")

    # The GPU check without a GPU: one line, exit 77.
    if info_json()["devices"]:
        print("SKIP gpu_check.sh without a GPU: this machine has one")
    else:
        script = os.path.join(os.environ["VITPIPE_SOURCE_DIR"], "scripts", "gpu_check.sh")
        result = subprocess.run([script], env=dict(os.environ), capture_output=True, text=True, timeout=120)
        lines = (result.stdout + result.stderr).strip().splitlines()
        check(result.returncode == 77 and len(lines) == 1 and lines[0].startswith("gpu_check: skipped: no NVIDIA GPU"),
              f"gpu_check.sh without a GPU: one line, exit 77 (exit {result.returncode}, {lines})")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
