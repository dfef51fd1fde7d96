#!/usr/bin/env python3
"""scripts/gpu_check.sh's JSON side and its plumbing, without a GPU.

1. scripts/gpu_check_summary.py on its own, with made-up part results: nesting and types of the key=value lines, the
   ratios vitpipe/eager and vitpipe/compile (null where a side failed or was skipped), the 4,500 target and 7,500 bound
   as context, the verdict, the atomic write (a bad input leaves the previous summary whole and no temporary file),
   the test counts from gtest and ctest logs, the images/s of a benchmark's last JSON line.
2. gpu_check.sh itself, run from a made-up pack whose vitpipe, test binary and PyTorch peer are fakes (shell and
   Python scripts that say there is a GPU and print made-up figures): the order of the parts, the flags each benchmark
   gets, the compiled peer held past the check's deadline (GPU_CHECK_DEADLINE=30 standing for 460) recorded as failed
   while the check goes on and ends, an absent peer recorded as skipped, a failing test part failing the verdict and
   the exit status; the parts' caps summing below the 460 s deadline (a copy with one cap raised past it refuses to
   start), and CUDA's wheels looked for with --python's Python as well as python3. The fakes prove the script's
   plumbing only; nothing here says anything about a GPU.

Usage: check_gpu_check_summary.py SOURCE_DIR"""
import json
import lzma
import os
import stat
import subprocess
import sys
import tempfile
import time

source_dir = sys.argv[1]
helper = os.path.join(source_dir, "scripts", "gpu_check_summary.py")
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def run_helper(*args, stdin=""):
    return subprocess.run([sys.executable, helper, *args], input=stdin, capture_output=True, text=True, timeout=60)


def write_summary(path, lines):
    result = run_helper("write", path, stdin="\n".join(lines) + "\n")
    check(result.returncode == 0, f"write succeeds ({result.stderr.strip()})")
    with open(path) as f:
        return json.load(f)


PASSED_TESTS = ["tests.test_cuda.status=passed", "tests.test_cuda.passed:=76", "tests.test_cuda.failed:=0",
                "tests.test_cuda_gpu.status=passed"]


def part_lines(vitpipe, eager, compiled):
    lines = []
    for key, value in (("vitpipe", vitpipe), ("torch_eager", eager), ("torch_compile", compiled)):
        if isinstance(value, str):  # a status without a figure
            lines += [f"bench.{key}.status={value}", f"bench.{key}.reason=made up"]
        else:
            lines += [f"bench.{key}.status=passed", f"bench.{key}.images_per_s:={value}"]
    return lines


with tempfile.TemporaryDirectory() as tmp:
    # 1. The helper on its own.
    path = os.path.join(tmp, "summary.json")
    s = write_summary(path, ["versions.cudnn=9.19.0", "versions.driver:=\"13.0\"", "versions.nccl:=null",
                             "device.name=NVIDIA H200", "device.memory_bytes:=150754820096", "note=a=b c",
                             *PASSED_TESTS, *part_lines(3000, 1500, 2400)])
    check(s["versions"] == {"cudnn": "9.19.0", "driver": "13.0", "nccl": None} and s["note"] == "a=b c"
          and s["device"] == {"name": "NVIDIA H200", "memory_bytes": 150754820096},
          "key=value stays a string, key:=value is JSON, dotted keys nest")
    check(s["tests"]["test_cuda"] == {"status": "passed", "passed": 76, "failed": 0}, "a test part's fields")
    check(s["ratios"] == {"vitpipe_over_eager": 2.0, "vitpipe_over_compile": 1.25},
          f"ratios 3000/1500 and 3000/2400 ({s['ratios']})")
    c = s["context"]
    check(c["target_images_per_s"] == 4500 and c["bound_images_per_s"] == 7500 and c["ahead_of_compile"] is True
          and c["vitpipe_fraction_of_target"] == 0.6667 and c["vitpipe_fraction_of_bound"] == 0.4,
          f"context: the 4,500 target, the 7,500 bound, ahead of compile ({c})")
    check(s["passed"] is True, "every test part and vitpipe's benchmark passed: passed")
    check(run_helper("digest", path).stdout.strip() ==
          "passed: vitpipe 3000.0 img/s, eager 1500.0 img/s, compile 2400.0 img/s; vitpipe/eager 2.00, "
          "vitpipe/compile 1.25 (target 4500, bound 7500)", "the digest line")

    s = write_summary(path, [*PASSED_TESTS, *part_lines(2000, 2500, "failed")])
    check(s["ratios"] == {"vitpipe_over_eager": 0.8, "vitpipe_over_compile": None}
          and s["context"]["ahead_of_compile"] is None and s["passed"] is True,
          f"the compiled peer failed: its ratio is null, the verdict stands ({s['ratios']})")
    s = write_summary(path, [*PASSED_TESTS, *part_lines("failed", 2500, "skipped")])
    check(s["ratios"] == {"vitpipe_over_eager": None, "vitpipe_over_compile": None} and s["passed"] is False,
          "vitpipe's benchmark failed: no ratios, not passed")
    s = write_summary(path, ["tests.test_cuda.status=failed", *part_lines(2000, 1000, 1000)])
    check(s["passed"] is False and s["ratios"]["vitpipe_over_eager"] == 2.0, "a test part failed: not passed")
    s = write_summary(path, [*PASSED_TESTS, "bench.vitpipe.status=passed", "bench.vitpipe.images_per_s:=-3"])
    check(s["ratios"]["vitpipe_over_eager"] is None, "a figure that is not positive gives no ratio")

    # Atomic: a bad line fails the write, and the summary already there stays as it was, with no temporary beside it.
    before = open(path).read()
    for bad in ["no equals sign", "bench.vitpipe.images_per_s:=not json", "tests=flat", "a..b=1"]:
        result = run_helper("write", path, stdin="\n".join([*PASSED_TESTS, bad]) + "\n")
        check(result.returncode != 0 and "gpu_check_summary:" in result.stderr, f"{bad!r} is refused")
    check(open(path).read() == before, "the refused writes left the summary as it was")
    check(sorted(os.listdir(tmp)) == ["summary.json"], f"no temporary file left ({sorted(os.listdir(tmp))})")
    result = run_helper("write", os.path.join(tmp, "no-such-folder", "s.json"), stdin="\n".join(PASSED_TESTS))
    check(result.returncode != 0, "a folder that does not exist: refused")

    # Counts from the logs the test parts leave.
    gtest_log = os.path.join(tmp, "gtest.log")
    with open(gtest_log, "w") as f:
        f.write("[ RUN      ] A.One\n[       OK ] A.One (3 ms)\n[ RUN      ] A.Two\n[  FAILED  ] A.Two (1 ms)\n"
                "[ RUN      ] P/B.Three/0\n[  FAILED  ] P/B.Three/0, where GetParam() = 4 (0 ms)\n"
                "[ RUN      ] A.Four\n[  SKIPPED ] A.Four (0 ms)\n[ RUN      ] A.Five\n[       OK ] A.Five (10 ms)\n"
                "[==========] 5 tests from 2 test suites ran. (14 ms total)\n[  PASSED  ] 2 tests.\n"
                "[  SKIPPED ] 1 test, listed below:\n[  SKIPPED ] A.Four\n[  FAILED  ] 2 tests, listed below:\n"
                "[  FAILED  ] A.Two\n[  FAILED  ] P/B.Three/0, where GetParam() = 4\n")
    check(run_helper("counts", "gtest", gtest_log).stdout.split() == ["passed=2", "failed=2", "skipped=1"],
          "gtest counts: each test once, the closing lists not again")
    ctest_log = os.path.join(tmp, "ctest.log")
    with open(ctest_log, "w") as f:
        f.write("90% tests passed, 2 tests failed out of 20\n\nLabel Time Summary:\ncuda = 30 sec\n\n"
                "The following tests did not run:\n\t 14 - cuda.gpu_pack (Skipped)\n\n"
                "The following tests FAILED:\n\t  3 - cuda.cli (Failed)\n\t  5 - cuda.seam (Failed)\n")
    check(run_helper("counts", "ctest", ctest_log).stdout.split() == ["passed=17", "failed=2", "skipped=1"],
          "ctest counts")
    bench_log = os.path.join(tmp, "bench.log")
    with open(bench_log, "w") as f:
        f.write('{"images_per_s": 1}\nwarning: something\n{"peer": "x", "torch": "2.11.0", "images_per_s": 1234.5}\n'
                "done\n")
    check(run_helper("images-per-s", bench_log).stdout.strip() == "1234.5", "images/s of the last JSON line")
    check(run_helper("field", bench_log, "torch").stdout.strip() == "2.11.0", "a field of the last JSON line")
    with open(bench_log, "w") as f:
        f.write("Traceback ...\nModuleNotFoundError: No module named 'torch'\n")
    result = run_helper("images-per-s", bench_log)
    check(result.returncode != 0 and "no JSON line" in result.stderr, "no JSON line: refused with the reason")

    # 2. gpu_check.sh from a made-up pack of fakes.
    pack = os.path.join(tmp, "pack")
    calls = os.path.join(tmp, "calls")
    fakes = {
        "bin/vitpipe": r'''#!/bin/sh
echo "vitpipe $*" >>"$FAKE_CALLS"
case "$1" in
  info) if [ "$2" = --json ]; then
          echo '{"version": "0.1.0", "cuda": {"built": true, "loaded": true, "driver": "13.0", "usable": true,
            "error": null, "built_with": "CUDA 13.0", "libraries": {"cuda_runtime": "13.0", "cublaslt": "13.1.0",
            "cudnn": "9.19.0", "nccl": "2.28.9"}, "devices": [{"index": 0, "name": "Fake H200",
            "compute_capability": "9.0", "memory_bytes": 150754820096}]}}' | tr -d '\n'; echo
        else echo "(fake) vitpipe info"; fi ;;
  bench) echo "$LD_LIBRARY_PATH" >"$FAKE_CALLS.library_path"
         echo "(fake) bench"; echo '{"images_per_s": 3000.5, "batch": 128}' ;;
esac
''',
        "tests/test_cuda": r'''#!/bin/sh
echo "test_cuda $*" >>"$FAKE_CALLS"
echo "[       OK ] A.One (1 ms)"; echo "[  SKIPPED ] A.Two (0 ms)"
if [ -n "$FAKE_TEST_FAILS" ]; then echo "[  FAILED  ] A.Three (0 ms)"; exit 1; fi
echo "[       OK ] A.Three (1 ms)"
''',
        "glibc_needs": "",
    }
    for rel, text in fakes.items():
        os.makedirs(os.path.dirname(os.path.join(pack, "payload", rel)), exist_ok=True)
        with lzma.open(os.path.join(pack, "payload", rel + ".xz"), "wb") as f:
            f.write(text.encode())
    for script in ["gpu_check.sh", "gpu_check_summary.py"]:
        with open(os.path.join(source_dir, "scripts", script)) as f, open(os.path.join(pack, script), "w") as g:
            g.write(f.read())
        os.chmod(os.path.join(pack, script), stat.S_IRWXU)
    peer = os.path.join(tmp, "fake_peer.py")
    with open(peer, "w") as f:
        f.write(r'''import json, os, sys, time
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write("peer " + " ".join(sys.argv[1:]) + "\n")
if "--compile" in sys.argv:
    time.sleep(120)  # past the deadline: timed out
print(json.dumps({"peer": "pytorch-eager", "torch": "2.11.0+fake", "images_per_s": 1500.25}))
''')

    # A --python whose sys.path holds CUDA's wheels (as a venv with the nvidia-*-cu13 wheels would); it runs the peer
    # with this Python otherwise.
    wheels_python = os.path.join(tmp, "wheels_python")
    with open(wheels_python, "w") as f:
        f.write(f'#!/bin/sh\nif [ "$1" = -c ]; then echo /peer-env/site-packages/nvidia/cudnn/lib; exit 0; fi\n'
                f'exec {sys.executable} "$@"\n')
    os.chmod(wheels_python, stat.S_IRWXU)

    def gpu_check(*args, **env):
        open(calls, "w").close()
        start = time.monotonic()
        result = subprocess.run([os.path.join(pack, "gpu_check.sh"), *args], cwd=tmp, capture_output=True, text=True,
                                timeout=120, env={"PATH": os.environ["PATH"], "FAKE_CALLS": calls, **env})
        print("\n".join("    " + line for line in (result.stdout + result.stderr).splitlines()))
        return result, time.monotonic() - start, open(calls).read().splitlines()

    result, seconds, called = gpu_check("--peer", peer, "--python", wheels_python, GPU_CHECK_DEADLINE="30")
    out = result.stdout.splitlines()
    check(out[0] == "gpu_check: NVIDIA driver 13.0; cuBLASLt 13.1.0, cuDNN 9.19.0, NCCL 2.28.9, CUDA runtime 13.0",
          f"the first line: the driver's and the libraries' versions ({out[0] if out else ''})")
    # Issue #42's order: versions, (attention at the real shapes: no such fake), the benchmark, the tests, the peer.
    check(called[:2] == ["vitpipe info --json", "vitpipe info"]
          and called[2] == "vitpipe bench --device cuda --preset vit-base --precision bf16 --mode train "
                           "--batch 128 --steps 30 --json"
          and called[3].startswith("test_cuda ")
          and called[4] == "peer --preset vit-base --precision bf16 --mode train --batch 128 --steps 30 --device cuda"
          and called[5:] in ([called[4] + " --compile"], []),
          "the parts in order, with the benchmark flags: " + " | ".join(called))
    library_path = open(calls + ".library_path").read().strip().split(":")
    check("/peer-env/site-packages/nvidia/cudnn/lib" in library_path,
          f"the wheels --python's Python sees are on vitpipe's library path ({library_path})")
    s = json.load(open(os.path.join(tmp, "gpu_check_summary.json")))
    check(isinstance(s.get("caps_s"), int) and s["caps_s"] <= 460 - 20,
          f"the parts' caps sum at least 20 s below the 460 s deadline ({s.get('caps_s')})")
    # Timed out, or on a slow machine not started: too little time left before the deadline.
    check(s["bench"]["torch_compile"]["status"] == "failed" and seconds < 60
          and s["bench"]["torch_compile"]["reason"].startswith(("timed out after ", "not run: no time left")),
          f"the compiled peer, past the deadline, is recorded as failed ({s['bench']['torch_compile']}, "
          f"{seconds:.0f} s)")
    check(s["bench"]["vitpipe"]["images_per_s"] == 3000.5 and s["bench"]["torch_eager"]["images_per_s"] == 1500.25
          and s["ratios"] == {"vitpipe_over_eager": 2.0, "vitpipe_over_compile": None},
          f"the figures and ratios in the summary ({s['ratios']})")
    check(s["tests"]["test_cuda"]["status"] == "passed" and s["tests"]["test_cuda"]["passed"] == 2
          and s["tests"]["test_cuda"]["skipped"] == 1 and s["device"]["name"] == "Fake H200"
          and s["versions"]["cudnn"] == "9.19.0" and s["versions"]["torch"] == "2.11.0+fake"
          and s["bench"]["config"]["batch"] == 128,
          "the test part's counts, the device, the versions (the peer's torch too), the configuration")
    check(result.returncode == 0 and s["passed"] is True, f"exit 0, passed ({result.returncode})")
    check(os.path.exists(os.path.join(tmp, "gpu_check_summary.logs", "torch_compile.log")), "each part's log is kept")

    result, _, called = gpu_check("--peer", os.path.join(tmp, "absent.py"), "--summary", "out/s.json",
                                  "--batch", "64", "--steps", "3", FAKE_TEST_FAILS="1")
    s = json.load(open(os.path.join(tmp, "out", "s.json")))
    check(s["bench"]["torch_eager"]["status"] == "skipped" and "absent.py" in s["bench"]["torch_eager"]["reason"]
          and s["bench"]["torch_compile"]["status"] == "skipped" and not any(c.startswith("peer") for c in called),
          "an absent peer: both peer parts skipped, with the reason")
    check(s["tests"]["test_cuda"]["status"] == "failed" and s["tests"]["test_cuda"]["failed"] == 1
          and s["bench"]["vitpipe"]["status"] == "passed" and "--batch 64 --steps 3" in called[2],
          "a failing test part is recorded, the benchmark (before it) ran with --batch and --steps")
    check(result.returncode == 1 and s["passed"] is False, f"a failed test part: exit 1, not passed "
                                                           f"({result.returncode})")
    result = subprocess.run([os.path.join(pack, "gpu_check.sh"), "--bogus"], capture_output=True, text=True,
                            timeout=60)
    check(result.returncode == 2 and "unknown option --bogus" in result.stderr, "an unknown option: exit 2")
    # The caps are checked before anything runs: a copy with the compiled peer's cap raised by 60 s refuses to start.
    with open(os.path.join(pack, "gpu_check.sh")) as f:
        text = f.read()
    check("[torch_compile]=115" in text, "the compiled peer's cap is where this test raises it")
    raised = os.path.join(pack, "gpu_check_raised.sh")
    with open(raised, "w") as f:
        f.write(text.replace("[torch_compile]=115", "[torch_compile]=175"))
    os.chmod(raised, stat.S_IRWXU)
    result = subprocess.run([raised], cwd=tmp, capture_output=True, text=True, timeout=60,
                            env={"PATH": os.environ["PATH"], "FAKE_CALLS": calls})
    check(result.returncode == 2 and "caps from a pack sum to 500 s, over the 440 s" in result.stderr,
          f"caps past the deadline: refused before anything runs ({result.returncode}, {result.stderr.strip()})")

if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
