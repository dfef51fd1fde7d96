#!/usr/bin/env bash
# Runs every test (unit, PyTorch/Pillow/scikit-learn references, mpirun, end to end, disk faults, chaos), then the
# sanitizer builds and their tests (scripts/test_sanitized.sh: ASan + UBSan, ThreadSanitizer, fuzzing). Expects
# scripts/setup.sh --tests.
#   scripts/test.sh               everything: what CI runs
#   scripts/test.sh -R REGEX ...  only build/'s tests that ctest's arguments select, no sanitizer builds
# VITPIPE_SANITIZERS=0 skips the sanitizer builds.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@" || status=$?
if (($# == 0)) && [[ "${VITPIPE_SANITIZERS:-1}" != 0 ]]; then
  scripts/test_sanitized.sh || status=1
fi
exit "$status"
