#!/usr/bin/env python3
"""scripts/gpu_check.sh --pack DIR, checked on this machine: DIR fits 48 MiB; it holds no glibc and no CUDA library;
the packed vitpipe runs `info --json` in an empty environment whose only library folder is the pack's, and every
library the loader opened came from the pack (glibc and, through the module, CUDA's libraries excepted); the packed
gpu_check.sh without a GPU prints one line and exits 77, also where glibc is older than Debian's libstdc++ asks.

Usage: check_gpu_pack.py SOURCE_DIR BUILD_DIR. Exits 77 (skipped) where the build has no CUDA module."""
import json
import os
import re
import subprocess
import sys
import tempfile

source_dir, build_dir = sys.argv[1], sys.argv[2]
LIMIT = 48 * 1024 * 1024
SYSTEM = re.compile(r"^(ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libmvec)\.so")
CUDA = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc[a-z-]*|nvJitLink|nvidia-ml)\.so")
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


if not os.path.exists(os.path.join(build_dir, "libvitpipe_cuda.so")):
    print("skipped: this build has no CUDA module, so there is nothing to pack")
    sys.exit(77)

with tempfile.TemporaryDirectory() as tmp:
    pack = os.path.join(tmp, "pack")
    made = subprocess.run([os.path.join(source_dir, "scripts", "gpu_check.sh"), "--pack", pack],
                          env={**os.environ, "BUILD": build_dir}, capture_output=True, text=True, timeout=600)
    print(made.stdout + made.stderr, end="")
    check(made.returncode == 0, "--pack succeeds")
    if made.returncode != 0:
        sys.exit(1)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(pack) for f in files)
    check(size <= LIMIT, f"the pack is {size / 2**20:.1f} MiB, within 48 MiB")
    check(re.search(r"gpu_pack: .*: [0-9.]+ MiB \(limit 48 MiB", made.stdout) is not None, "--pack prints the size")

    root = subprocess.run([os.path.join(pack, "gpu_check.sh"), "--unpack"], capture_output=True, text=True,
                          timeout=300).stdout.strip()
    libs = sorted(os.listdir(os.path.join(root, "lib")))
    check(any(name.startswith("libdnnl.so") for name in libs), "oneDNN travels")
    check(any(name.startswith("libstdc++.so") for name in libs), "libstdc++ travels")
    check(not [n for n in libs if SYSTEM.match(n) or CUDA.match(n)], "no glibc or CUDA library travels: " +
          " ".join(n for n in libs if SYSTEM.match(n) or CUDA.match(n)))
    for name in ["bin/vitpipe", "bin/libvitpipe_cuda.so", "tests/test_cuda"]:
        check(os.path.exists(os.path.join(root, name)), f"{name} travels")
    check(os.path.exists(os.path.join(pack, "gpu_check_summary.py")), "the summary writer travels beside gpu_check.sh")
    travelled = [os.path.join(d, f) for d, _, files in os.walk(pack) for f in files]
    check(not [p for p in travelled if "torch_vit_bench" in p], "the PyTorch peer does not travel")
    check(len(os.listdir(os.path.join(root, "openmpi"))) > 0, "Open MPI's components travel")

    # An empty environment: the pack's lib folder is the only one named; LD_DEBUG=libs names each library opened.
    env = {"LD_LIBRARY_PATH": os.path.join(root, "lib"), "LD_DEBUG": "libs", "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([os.path.join(root, "bin", "vitpipe"), "info", "--json"], env=env, capture_output=True,
                         text=True, timeout=120)
    check(ran.returncode == 0, "the packed vitpipe runs info --json")
    cuda = json.loads(ran.stdout)["cuda"] if ran.returncode == 0 else {}
    check(cuda.get("built") is True, "info --json: the module is built")
    check(cuda.get("module") == os.path.join(root, "bin", "libvitpipe_cuda.so"),
          f"info --json: the module beside the packed binary ({cuda.get('module')})")
    opened = re.findall(r"calling init: (\S+)", ran.stderr)
    outside = [p for p in opened if not p.startswith(root + os.sep) and not SYSTEM.match(os.path.basename(p))
               and not CUDA.match(os.path.basename(p))]
    check(len(opened) > 10 and not outside,
          f"all {len(opened)} libraries opened came from the pack, glibc or CUDA" + (": " + " ".join(outside)))

    # The packed check without a GPU (no driver here): one line, exit 77. On a machine with a GPU it would run the
    # whole check instead (tests, benchmarks): not here.
    if cuda.get("devices"):
        print("SKIP the packed gpu_check.sh without a GPU: this machine has one")
    else:
        gpu = subprocess.run([os.path.join(pack, "gpu_check.sh")], env={"PATH": "/usr/bin:/bin"}, capture_output=True,
                             text=True, timeout=120)
        lines = (gpu.stdout + gpu.stderr).strip().splitlines()
        check(gpu.returncode == 77 and len(lines) == 1 and lines[0].startswith("gpu_check: skipped: "),
              f"the packed gpu_check.sh skips with one line and 77 ({gpu.returncode}: {lines})")

        # On a machine with an older glibc (GPU_CHECK_GLIBC pretends 2.35, Ubuntu 22.04's), the packed libstdc++,
        # which asks for 2.36, is set aside for the machine's own, and the check still runs.
        old = subprocess.run([os.path.join(pack, "gpu_check.sh")],
                             env={"PATH": "/usr/bin:/bin", "GPU_CHECK_GLIBC": "2.35"}, capture_output=True, text=True,
                             timeout=120)
        check(old.returncode == 77
              and "the packed libstdc++.so.6 needs glibc 2.36, this machine has 2.35" in old.stderr
              and os.path.exists(os.path.join(root, "lib.set-aside", "libstdc++.so.6")),
              f"glibc 2.35: the packed libstdc++ is set aside and the check runs ({old.returncode}: "
              f"{old.stderr.strip()})")

if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
