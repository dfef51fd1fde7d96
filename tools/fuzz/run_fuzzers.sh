#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, AddressSanitizer + UndefinedBehaviorSanitizer) into build-fuzz/ and runs
# each for a fixed time on its corpus: seeds made from the tests' fixtures (make_seeds.py) plus what earlier runs
# found (build-fuzz/corpus/<harness>/, kept between runs). A crash, a sanitizer report, a leak, an input slower
# than 10 s or an allocation over 2 GB stops the harness, leaves the input in build-fuzz/findings/<harness>/ and
# makes this script fail.
#   tools/fuzz/run_fuzzers.sh [SECONDS_PER_HARNESS (default 60)] [HARNESS ...]   (default: every harness)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
out=build-fuzz
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  # dicom is left out of the default list until its open finding is fixed: a DICOM file whose meta header declares
  # an element of ~4 GB makes DCMTK (DcmElement::newValueField, under DcmFileFormat::read) allocate it before it
  # notices the file is a few hundred bytes (libFuzzer: out-of-memory, malloc(4294967292)). Run it by name.
  harnesses=(safetensors hf_config preprocessor_config weight_index unpickler pytorch_bin csv train_options
             packed_cache training_checkpoint png jpeg)
fi

if [[ ! -f "$out/CMakeCache.txt" ]]; then
  # -O1 and line tables only: a third less compile time than -O2 -g, and reports still name file and line.
  CC=clang CXX=clang++ cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DVITPIPE_FUZZ=ON -DVITPIPE_TESTS=OFF \
    -DVITPIPE_BENCHMARKS=OFF -DVITPIPE_NATIVE=OFF >/dev/null
fi
cmake --build "$out" --target fuzz_all -j"$(nproc)" >/dev/null
/usr/bin/python3 tools/fuzz/make_seeds.py "$out/seeds"

declare -A max_len=([png]=16384 [jpeg]=16384 [dicom]=16384 [pytorch_bin]=16384 [training_checkpoint]=16384)
failed=()
for harness in "${harnesses[@]}"; do
  mkdir -p "$out/corpus/$harness" "$out/findings/$harness"
  dictionary=()
  [[ -f "tools/fuzz/$harness.dict" ]] && dictionary=(-dict="tools/fuzz/$harness.dict")
  log="$out/findings/$harness/last_run.log"
  # -close_fd_mask=3: the readers' warnings would flood the log (libFuzzer keeps its own stderr).
  if "$out/tools/fuzz/fuzz_$harness" "${dictionary[@]}" -max_total_time="$seconds" -max_len="${max_len[$harness]:-8192}" \
      -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
      -artifact_prefix="$out/findings/$harness/" "$out/corpus/$harness" "$out/seeds/$harness" >"$log" 2>&1; then
    executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    printf '%-20s %10s executions in %s s, no finding\n' "$harness" "$executions" "$seconds"
  else
    printf '%-20s FAILED: see %s\n' "$harness" "$log"
    grep -E 'ERROR|==[0-9]+==|fuzz:|Test unit written' "$log" | head -5 || true
    failed+=("$harness")
  fi
done
if ((${#failed[@]})); then
  echo "fuzzing found problems in: ${failed[*]}"
  exit 1
fi
