#!/usr/bin/env bash
# The GPU check of issue 24, as far as it exists. On a machine with an NVIDIA GPU: prints the driver, the GPUs and the
# CUDA libraries the module loads (vitpipe info), then runs the CUDA tests. Without a GPU it prints one line and exits
# 77 (skipped). Not yet here (later parts of issue 24, because the CUDA Backend's kernels do not exist yet): the
# golden tests on the GPU, ViT-B/16 bf16 training beside ../shared/peers/torch_vit_bench.py, the JSON summary.
#   scripts/gpu_check.sh            in a checkout: expects build/ (scripts/setup.sh --tests), or VITPIPE=path/to/vitpipe
#   scripts/gpu_check.sh --pack DIR gathers what travels to a GPU machine into DIR (scripts/gpu_pack.sh)
#   DIR/gpu_check.sh                on the GPU machine: unpacks DIR/payload/ into DIR/root/ once, finds CUDA 13's pip wheels
#                                   (nvidia-*-cu13) through python3, and runs the check from the pack
#   DIR/gpu_check.sh --unpack       only unpacks, and prints the folder the pack unpacked into
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [[ "${1:-}" == "--pack" ]]; then
  exec "$here/gpu_pack.sh" "${@:2}"
fi

if [[ -d "$here/payload" ]]; then
  # Running from a pack: its own libraries first, then the CUDA libraries of the Python wheels.
  root=$here/root
  if [[ ! -d "$root" ]]; then
    # Into a folder of its own first, renamed when whole: an interrupted unpack is redone, not half used.
    rm -rf "$root.part"
    (cd "$here/payload" && find . -name '*.xz' -printf '%P\n') | while read -r packed; do
      mkdir -p "$(dirname "$root.part/$packed")"
      if command -v xz >/dev/null; then
        xz -dc "$here/payload/$packed" >"$root.part/${packed%.xz}"
      else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
          "$here/payload/$packed" "$root.part/${packed%.xz}"
      fi
    done
    chmod +x "$root.part"/bin/* "$root.part"/tests/*
    mv "$root.part" "$root"
  fi
  if [[ "${1:-}" == "--unpack" ]]; then
    echo "$root"
    exit 0
  fi
  # A packed library that asks for a newer glibc than this machine's (Debian 12's libstdc++ asks for 2.36, Ubuntu
  # 22.04 has 2.35) is set aside for the machine's own copy, where it has one. GPU_CHECK_GLIBC stands for this
  # machine's version in tests.
  machine_glibc=${GPU_CHECK_GLIBC:-$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)}
  machine_libraries=$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null || true)
  while read -r lib needs; do
    [[ -f "$root/lib/$lib" && "$needs" != "$machine_glibc" ]] || continue
    [[ "$(printf '%s\n' "$needs" "$machine_glibc" | sort -V | tail -1)" == "$needs" ]] || continue
    if [[ "$machine_libraries" == *"$lib "* ]]; then
      mkdir -p "$root/lib.set-aside"
      mv "$root/lib/$lib" "$root/lib.set-aside/"
      echo "gpu_check: the packed $lib needs glibc $needs, this machine has $machine_glibc: using its own $lib" >&2
    else
      echo "gpu_check: the packed $lib needs glibc $needs, this machine has $machine_glibc and no $lib of its own" >&2
      exit 1
    fi
  done <"$root/glibc_needs"
  # Every lib folder under the wheels' nvidia/ package (cuBLAS, cuDNN, NCCL, NVRTC for cuDNN's runtime-compiled
  # engines); a CUDA_LIB_DIRS given by hand comes first.
  wheels=$(python3 -c '
import os, sys
dirs = []
for base in sys.path:
    top = os.path.join(base, "nvidia")
    for folder, _, files in os.walk(top):
        if os.path.basename(folder) == "lib" and any(".so" in f for f in files) and folder not in dirs:
            dirs.append(folder)
print(":".join(dirs))' 2>/dev/null || true)
  export LD_LIBRARY_PATH="$root/lib${CUDA_LIB_DIRS:+:$CUDA_LIB_DIRS}${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Open MPI and PMIx look for their components and help texts where Debian put them; point them at the pack.
  export OPAL_PKGLIBDIR=$root/openmpi OPAL_PKGDATADIR=$root/share/openmpi PMIX_MCA_mca_base_component_path=$root/pmix
  export VITPIPE=$root/bin/vitpipe
  tests=$root/tests
else
  cd "$here/.."
  tests=build/tests
fi
vitpipe=${VITPIPE:-build/vitpipe}

if [[ ! -x "$vitpipe" ]]; then
  echo "gpu_check: no vitpipe binary at $vitpipe: run scripts/setup.sh first" >&2
  exit 1
fi

# What vitpipe itself finds: the driver through libcuda.so.1, the GPUs, the module and its libraries.
status=$("$vitpipe" info --json | python3 -c '
import json, sys
cuda = json.load(sys.stdin)["cuda"]
print("gpus" if cuda["devices"] else "none", cuda["error"] or "")')
if [[ "$status" == none* ]]; then
  echo "gpu_check: skipped: no NVIDIA GPU here (${status#none })"
  exit 77
fi
"$vitpipe" info
if [[ -z "${root:-}" && -d build ]]; then
  ctest --test-dir build --output-on-failure -L cuda
else
  # Loading tests name the build folder's fakes by path; vitpipe info above answered for the real module.
  "$tests/test_cuda" --gtest_filter='-CudaModule.*:CudaDriver.*:DeviceSelection.*'
  [[ -x "$tests/test_cuda_executors" ]] && "$tests/test_cuda_executors"
  # CudaBackend on this GPU against the CPU backend, op by op (tests/cuda/gpu).
  [[ -x "$tests/test_cuda_gpu" ]] && "$tests/test_cuda_gpu"
fi
echo "gpu_check: not written yet: golden model tests through the CUDA backend, ViT-B/16 bf16 training vs PyTorch"
