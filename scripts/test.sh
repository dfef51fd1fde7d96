#!/usr/bin/env bash
# Runs every test (unit, PyTorch/Pillow/scikit-learn references, mpirun, end to end, disk faults, chaos), then
# sanitizer builds and their tests (scripts/test_sanitized.sh: ThreadSanitizer, the readers' unit tests under ASan +
# UBSan, fuzzing; every unit and golden test under ASan + UBSan is a second full build that would take CI past 30
# minutes, so it runs only when asked). Expects scripts/setup.sh --tests.
#   scripts/test.sh               everything: what CI runs
#   scripts/test.sh -R REGEX ...  only build/'s tests that ctest's arguments select, no sanitizer builds
# VITPIPE_SANITIZERS="tsan readers fuzz" (default) names the parts; "asan tsan readers fuzz" all four; 0 none.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@" || status=$?
parts=${VITPIPE_SANITIZERS:-tsan readers fuzz}
if (($# == 0)) && [[ "$parts" != 0 ]]; then
  # shellcheck disable=SC2086 # the parts are words
  scripts/test_sanitized.sh $parts || status=1
fi
exit "$status"
