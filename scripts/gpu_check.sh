#!/usr/bin/env bash
# The GPU check of issue 24, as far as it exists. On a machine with an NVIDIA GPU: prints the driver, the GPUs and the
# CUDA libraries the module loads (vitpipe info), then runs the CUDA tests (ctest -L cuda). Without a GPU it prints
# one line and exits 77 (skipped). Not yet here (later parts of issue 24, because the CUDA Backend's kernels do not
# exist yet): the golden tests on the GPU, ViT-B/16 bf16 training beside ../shared/peers/torch_vit_bench.py, the
# JSON summary, and --pack DIR.
#   scripts/gpu_check.sh          expects build/ (scripts/setup.sh --tests), or VITPIPE=path/to/vitpipe
set -euo pipefail
cd "$(dirname "$0")/.."
vitpipe=${VITPIPE:-build/vitpipe}

if [[ "${1:-}" == "--pack" ]]; then
  echo "gpu_check: --pack is not written yet (a later part of issue 24)" >&2
  exit 2
fi
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
if [[ -d build ]]; then
  ctest --test-dir build --output-on-failure -L cuda
fi
echo "gpu_check: the CUDA backend's own checks (golden tests on the GPU, ViT-B/16 bf16 training vs PyTorch) are not written yet"
