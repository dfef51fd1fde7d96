#!/usr/bin/env bash
# Builds the libFuzzer target for the safetensors reader with clang (AddressSanitizer + UndefinedBehaviorSanitizer)
# and runs it on the seed corpus. Usage: tools/fuzz/run_fuzz_safetensors.sh [seconds, default 60]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
out=build-fuzz
mkdir -p "$out/corpus"
cp tools/fuzz/seeds/*.safetensors "$out/corpus/"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc \
  tools/fuzz/fuzz_safetensors.cpp src/io/safetensors.cpp src/tensor/tensor.cpp src/tensor/dtype.cpp \
  src/util/mapped_file.cpp src/util/atomic_file.cpp -o "$out/fuzz_safetensors"
"$out/fuzz_safetensors" -dict=tools/fuzz/safetensors.dict -max_total_time="$seconds" -max_len=4096 "$out/corpus"
