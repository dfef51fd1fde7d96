#!/usr/bin/env bash
# Runs every test (unit, PyTorch/Pillow/scikit-learn references, mpirun, end to end). Expects scripts/setup.sh --tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@"
