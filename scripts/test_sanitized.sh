#!/usr/bin/env bash
# The sanitizer builds and their tests, each in a build directory of its own (scripts/test.sh runs this after the
# main suite; it configures and builds what is missing, so a clean clone needs nothing more than setup.sh --tests):
#   build-asan  GCC, AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer too): every GoogleTest unit test
#               and the golden tests against PyTorch / Pillow / torch.save files (labels below), on the sanitized
#               vitpipe binary and probes
#   build-tsan  GCC, ThreadSanitizer: test_threads_tsan (ranks as threads, gradient buckets, loader, prepare) and
#               a deliberate race it must report (tsan.canary)
#   build-fuzz  clang, ASan + UBSan: part "readers" runs the unit tests of the layers that read untrusted input
#               (tests/{tensor,data,io,hub,image}, train's options and checkpoints, serve's multipart reader:
#               test_readers_sanitized, on the fuzzers' library; what CI can afford of ASan), part "fuzz" every
#               harness of tools/fuzz for FUZZ_SECONDS (default 5) each, with FUZZ_SEED (default 1: the same
#               mutations every run; FUZZ_SEED= for a fresh seed)
# Usage: scripts/test_sanitized.sh [asan] [tsan] [readers] [fuzz]   (default: all four)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
jobs=$(nproc)
parts=("$@")
((${#parts[@]})) || parts=(asan tsan readers fuzz)
status=0

elapsed() { printf '%d s' $((SECONDS - $1)); }

for part in "${parts[@]}"; do
  start=$SECONDS
  case "$part" in
    asan)
      sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
      # -Og: UndefinedBehaviorSanitizer makes -O1 take twice as long to compile as the -O3 build; -Og takes about
      # as long and still runs the golden tests briskly. -g1: file:line in reports. Asserts stay on (no -DNDEBUG).
      # VITPIPE_NATIVE: the kernels once, at this machine's level, instead of once per CPU level (a third of the
      # kernel compile time; the levels are build/'s tests).
      cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1" \
        -DCMAKE_C_FLAGS_RELWITHDEBINFO="-Og -g1" -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_C_FLAGS="$sanitize" \
        -DCMAKE_EXE_LINKER_FLAGS="$sanitize" -DCMAKE_SHARED_LINKER_FLAGS="$sanitize" -DVITPIPE_BENCHMARKS=OFF \
        -DVITPIPE_NATIVE=ON >/dev/null
      cmake --build build-asan -j"$jobs" >/dev/null
      # Unit tests of every layer and the golden tests; left out: MPI jobs (OpenMPI's own allocations are
      # reported as leaks), the Hub download emulator, the end-to-end and fault runs (LD_PRELOAD shims do not mix
      # with ASan's runtime), the predict goldens (minutes under ASan; predict runs the golden forward's code) and
      # the CPU-level tests (disassembly, QEMU, golden tests again per level: this build has one level) and
      # explain.finds_the_patch (it trains two models: its explain code is explain.families' too).
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900 \
          -L '^(tensor|backend|data|image|io|model|train|parallel|hub|explain)$' \
          -E '^(parallel_mpi_|hub\.download\.|hub\.model_dir\.|backend\.(isa_confinement|emulated_cpus|emulated_cpu_training)$|golden_vit\..*\.at-|explain\.finds_the_patch$)' || status=1
      ;;
    tsan)
      cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DVITPIPE_TSAN_TESTS=ON -DVITPIPE_BENCHMARKS=OFF >/dev/null
      cmake --build build-tsan --target test_threads_tsan tsan_race_canary -j"$jobs" >/dev/null
      ctest --test-dir build-tsan --output-on-failure -R '^tsan\.' || status=1
      ;;
    readers)
      tools/fuzz/build.sh test_readers_sanitized
      # The readers' warnings go to the log; a failure shows its tail (the sanitizer report and stack).
      log=build-fuzz/test_readers_sanitized.log
      if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 build-fuzz/tools/fuzz/test_readers_sanitized >"$log" 2>&1; then
        grep -E '^\[(==========|  PASSED  )\]' "$log"
      else
        tail -60 "$log"
        status=1
      fi
      ;;
    fuzz)
      FUZZ_SEED=${FUZZ_SEED-1} tools/fuzz/run_fuzzers.sh "${FUZZ_SECONDS:-5}" || status=1
      ;;
    *)
      echo "unknown part '$part' (asan, tsan, readers or fuzz)" >&2
      exit 2
      ;;
  esac
  echo "sanitized $part: $(elapsed "$start")"
done
exit $status
