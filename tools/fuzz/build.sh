#!/usr/bin/env bash
# Configures build-fuzz/ (clang, ASan + UBSan, libFuzzer) if it is not yet, then builds the targets named:
#   tools/fuzz/build.sh fuzz_all                  the harnesses (run_fuzzers.sh)
#   tools/fuzz/build.sh test_readers_sanitized    the readers' unit tests (scripts/test_sanitized.sh readers)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build-fuzz
if [[ ! -f "$out/CMakeCache.txt" ]]; then
  # -O1 and line tables only: a third less compile time than -O2 -g, and reports still name file and line.
  CC=clang CXX=clang++ cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DVITPIPE_FUZZ=ON -DVITPIPE_TESTS=OFF \
    -DVITPIPE_BENCHMARKS=OFF -DVITPIPE_NATIVE=OFF >/dev/null
fi
cmake --build "$out" --target "$@" -j"$(nproc)" >/dev/null
