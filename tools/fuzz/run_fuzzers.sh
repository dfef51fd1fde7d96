#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, AddressSanitizer + UndefinedBehaviorSanitizer) into build-fuzz/ and runs
# each for a fixed time on its corpus: seeds made from the tests' fixtures (make_seeds.py) plus what earlier runs
# found (build-fuzz/corpus/<harness>/, kept between runs), after replaying tools/fuzz/regressions/<harness>/ (inputs
# that once found a bug, kept in git). A crash, a sanitizer report, a leak, an input slower than 10 s or an allocation
# over 2 GB stops the harness, leaves the input in build-fuzz/findings/<harness>/ and makes this script fail.
#   tools/fuzz/run_fuzzers.sh [SECONDS_PER_HARNESS (default 60)] [HARNESS ...]   (default: every harness)
# FUZZ_SEED=N makes the mutations repeatable (CI uses 1); unset, libFuzzer picks a new seed each run.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
out=build-fuzz
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then
  harnesses=(safetensors hf_config preprocessor_config weight_index unpickler pytorch_bin csv train_options
             packed_cache training_checkpoint png jpeg dicom multipart http_request)
fi
seed=()
[[ -n "${FUZZ_SEED:-}" ]] && seed=(-seed="$FUZZ_SEED")

tools/fuzz/build.sh fuzz_all
/usr/bin/python3 tools/fuzz/make_seeds.py "$out/seeds"

declare -A max_len=([png]=16384 [jpeg]=16384 [dicom]=16384 [pytorch_bin]=16384 [training_checkpoint]=16384)
failed=()
for harness in "${harnesses[@]}"; do
  mkdir -p "$out/corpus/$harness" "$out/findings/$harness"
  dictionary=()
  [[ -f "tools/fuzz/$harness.dict" ]] && dictionary=(-dict="tools/fuzz/$harness.dict")
  log="$out/findings/$harness/last_run.log"
  # -close_fd_mask=3: the readers' warnings would flood the log (libFuzzer keeps its own stderr).
  regressions=()
  [[ -d "tools/fuzz/regressions/$harness" ]] && regressions=("tools/fuzz/regressions/$harness")
  if "$out/tools/fuzz/fuzz_$harness" "${dictionary[@]}" "${seed[@]}" -max_total_time="$seconds" -max_len="${max_len[$harness]:-8192}" \
      -timeout=10 -rss_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1 \
      -artifact_prefix="$out/findings/$harness/" "$out/corpus/$harness" "$out/seeds/$harness" "${regressions[@]}" \
      >"$log" 2>&1; then
    executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    printf '%-20s %10s executions in %s s, no finding\n' "$harness" "$executions" "$seconds"
  else
    printf '%-20s FAILED: see %s\n' "$harness" "$log"
    # -close_fd_mask also closed the sanitizers' stderr: replay the input with it open, so that the report and the
    # stack up to the harness (what a CI log must show to fix it without the artifact) reach the log, and the input
    # itself, in hex, for a regression file.
    artifact=$(grep -o "Test unit written to [^ ]*" "$log" | tail -1 | cut -d' ' -f5 || true)
    if [[ -n "$artifact" && -f "$artifact" ]]; then
      "$out/tools/fuzz/fuzz_$harness" -runs=1 "$artifact" >"$log.replay" 2>&1 || true
      grep -E 'runtime error|ERROR|SUMMARY|^ +#[0-9]+ ' "$log.replay" | grep -v 'in fuzzer::' | head -40 || true
      echo "the input ($(stat -c %s "$artifact") bytes, hex):"
      od -An -tx1 -v "$artifact" | head -64
    fi
    grep -E 'ERROR|==[0-9]+==|fuzz:|Test unit written' "$log" | grep -v 'in fuzzer::' | head -10 || true
    failed+=("$harness")
  fi
done
if ((${#failed[@]})); then
  echo "fuzzing found problems in: ${failed[*]}"
  exit 1
fi
