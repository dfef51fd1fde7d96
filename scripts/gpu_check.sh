#!/usr/bin/env bash
# The GPU check of issue 24, for a machine with an NVIDIA GPU, CUDA 13 (the nvidia-*-cu13 pip wheels) and Python with
# PyTorch, at most 8 minutes on one H200. It has not yet run on a GPU. In order:
#   1. one line: the driver's version and the cuBLASLt, cuDNN and NCCL versions the CUDA module loaded (vitpipe info
#      --json; it reports cuBLASLt, not the plain cuBLAS), then `vitpipe info`;
#   2. from a pack, attention at the models' shapes (test_cuda_gpu's AttentionAtRealShape*, which print the
#      attention path);
#   3. ViT-B/16 at 224 px, bf16, training on random data: `vitpipe bench --device cuda --preset vit-base --precision
#      bf16 --mode train --batch B --steps S --json`; the bench's attention path is recorded;
#   4. the other CUDA tests: from a pack the rest of test_cuda_gpu, 8 golden cases on the GPU (the gradient probe on
#      the module, 1 to 3 stages sharing the GPU, against float64 PyTorch; tests/cuda/gpu/golden_on_gpu.py),
#      test_cuda and test_cuda_executors; in a checkout `ctest -L cuda` (without cuda.gpu_pack, which would pack and
#      run this check again);
#   5. the PyTorch peer with the same model, batch, steps and precision (bf16 autocast), `--device cuda` eager and
#      with `--compile`;
#   6. `vitpipe plan --device cuda` for ViT-Tiny/16 (GPU segment profiles, the GPU's free memory; recorded, never
#      the verdict);
#   7. a JSON summary (scripts/gpu_check_summary.py): versions, the GPU, each test part's status and counts, the three
#      images/s figures, vitpipe/eager and vitpipe/compile, and issue 24's 4,500 images/s target and 7,500 bound.
# Every part runs under `timeout` (the caps below sum at least 20 s below the 460 s deadline, so that no part is cut
# short by those before it; the script refuses to start otherwise); a part that fails or times
# out is recorded as failed and the check goes on. The summary is rewritten (whole, by rename) after every part, so a
# check stopped from outside leaves the parts it finished. Each part's output is kept in SUMMARY's folder as
# <summary>.logs/<part>.log; the last 30 lines are printed. Exit 0 when every test part and vitpipe's benchmark passed,
# 1 otherwise (the peer's parts are recorded, never the verdict); without a GPU: one line, exit 77 (skipped), before
# anything else runs.
#   scripts/gpu_check.sh [OPTIONS]   in a checkout: expects build/ (scripts/setup.sh --tests), or VITPIPE=path/to/vitpipe
#   scripts/gpu_check.sh --pack DIR  gathers what travels to a GPU machine into DIR (scripts/gpu_pack.sh); the peer
#                                    does not travel
#   DIR/gpu_check.sh [OPTIONS]       on the GPU machine: unpacks DIR/payload/ into DIR/root/ once, finds CUDA 13's pip
#                                    wheels (nvidia-*-cu13) through python3 and --python's Python, and runs the
#                                    check from the pack
#   DIR/gpu_check.sh --unpack        only unpacks, and prints the folder the pack unpacked into
# Options:
#   --peer PATH       the PyTorch peer, torch_vit_bench.py (default: ../shared/peers/ or shared/peers/, from the
#                     checkout's root, or from the current folder when run from a pack); where it is absent the
#                     peer's parts are recorded as skipped, with the reason
#   --python PATH     the Python that runs the peer (default python3), with this machine's library path, not the pack's
#   --summary FILE    the JSON summary (default gpu_check_summary.json in the current folder)
#   --batch N         images per step for all three benchmarks (default 128)
#   --steps N         timed steps after one warm-up step, for all three (default 30)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

if [[ "${1:-}" == "--pack" ]]; then
  exec "$here/gpu_pack.sh" "${@:2}"
fi

usage() { sed -n 's/^#   //p' "$here/gpu_check.sh" >&2; }
peer='' peer_python=python3 summary=gpu_check_summary.json batch=128 steps=30 unpack=''
while (($#)); do
  case "$1" in
    --unpack) unpack=1 ;;
    --peer | --python | --summary | --batch | --steps)
      (($# >= 2)) || { echo "gpu_check: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --peer) peer=$2 ;; --python) peer_python=$2 ;; --summary) summary=$2 ;;
        --batch) batch=$2 ;; --steps) steps=$2 ;;
      esac
      shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu_check: unknown option $1" >&2; usage; exit 2 ;;
  esac
  shift
done
# Each part's cap in seconds, in the order the parts run. Each path's caps sum at least 20 s below the deadline (the
# start: unpacking, vitpipe info), checked here and by tests/cuda/check_gpu_check_summary.py.
check_deadline=460  # 8 minutes less 10 s for a part that ignores timeout's TERM and 10 s for the summary
# plan_cuda's 15 s were cpu_scaling's (40 before): both are recorded, never the verdict.
declare -A cap=([attention_real_shapes]=45 [bench_vitpipe]=70 [test_cuda_gpu]=45 [golden_gpu]=50 [test_cuda]=10
  [test_cuda_executors]=10 [ctest_cuda]=160 [torch_eager]=55 [torch_compile]=115 [plan_cuda]=15 [cpu_scaling]=25)
pack_caps=$((cap[attention_real_shapes] + cap[bench_vitpipe] + cap[test_cuda_gpu] + cap[golden_gpu] + cap[test_cuda] +
  cap[test_cuda_executors] + cap[torch_eager] + cap[torch_compile] + cap[plan_cuda] + cap[cpu_scaling]))
checkout_caps=$((cap[bench_vitpipe] + cap[ctest_cuda] + cap[torch_eager] + cap[torch_compile] + cap[plan_cuda] +
  cap[cpu_scaling]))
for caps in "from a pack:$pack_caps" "in a checkout:$checkout_caps"; do
  if ((${caps#*:} > check_deadline - 20)); then
    echo "gpu_check: the parts' caps ${caps%:*} sum to ${caps#*:} s, over the $((check_deadline - 20)) s that the" \
      "$check_deadline s deadline leaves them" >&2
    exit 2
  fi
done
if ! [[ "$batch" =~ ^[1-9][0-9]*$ && "$steps" =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu_check: --batch and --steps take positive whole numbers" >&2
  exit 2
fi
# Paths given are the caller's, resolved before the checkout's cd below.
summary=$(realpath -m "$summary")
[[ -z "$peer" ]] || peer=$(realpath -m "$peer")
# This machine's own library path, for the Python processes (the peer with its PyTorch, the summary writer): the
# pack's libraries (Debian's libstdc++, OpenSSL, zlib, ...) are vitpipe's, not theirs.
host_env=(env -u LD_LIBRARY_PATH)
[[ -z "${LD_LIBRARY_PATH+set}" ]] || host_env=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH")

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
  if [[ -n "$unpack" ]]; then
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
  # engines), as python3 and --python's Python see them (the wheels may sit in the peer's environment only); a
  # CUDA_LIB_DIRS given by hand comes first.
  wheels=''
  for python in python3 "$peer_python"; do
    found=$("$python" -c '
import os, sys
dirs = []
for base in sys.path:
    top = os.path.join(base, "nvidia")
    for folder, _, files in os.walk(top):
        if os.path.basename(folder) == "lib" and any(".so" in f for f in files) and folder not in dirs:
            dirs.append(folder)
print(":".join(dirs))' 2>/dev/null || true)
    IFS=: read -ra folders <<<"$found"
    for folder in ${folders[@]+"${folders[@]}"}; do
      if [[ -n "$folder" && ":$wheels:" != *":$folder:"* ]]; then wheels=${wheels:+$wheels:}$folder; fi
    done
  done
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

helper=$here/gpu_check_summary.py
if [[ -z "$peer" ]]; then
  for candidate in ../shared/peers/torch_vit_bench.py shared/peers/torch_vit_bench.py; do
    if [[ -f "$candidate" ]]; then peer=$(realpath "$candidate"); break; fi
  done
fi

# 1. What vitpipe itself finds: the driver through libcuda.so.1, the GPUs, the module and its libraries. No GPU: the
# one line, exit 77, nothing else run.
info=$("$vitpipe" info --json)
facts=$("${host_env[@]}" python3 "$helper" info <<<"$info")
"${host_env[@]}" python3 "$helper" headline <<<"$info"
if grep -qx 'device.count:=0' <<<"$facts"; then
  exit 77
fi
"$vitpipe" info

# GPU_CHECK_DEADLINE stands for the 460 in tests (tests/cuda/check_gpu_check_summary.py).
deadline=${GPU_CHECK_DEADLINE:-$check_deadline}
logs=${summary%.json}.logs
mkdir -p "$(dirname "$summary")" "$logs"  # each part's log is rewritten, an earlier run's others stay
lines=$logs/summary_lines
{
  echo "check=scripts/gpu_check.sh"
  echo "from=$([[ -n "${root:-}" ]] && echo "pack $here" || echo "checkout $PWD")"
  echo "logs=$logs"
  echo "deadline_s:=$deadline"
  echo "caps_s:=$([[ -n "${root:-}" ]] && echo "$pack_caps" || echo "$checkout_caps")"
  printf '%s\n' "$facts"
} >"$lines"
record() { printf '%s\n' "$@" >>"$lines"; }
write_summary() {
  "${host_env[@]}" python3 "$helper" write "$summary" <"$lines" || echo "gpu_check: the summary could not be written" >&2
}
write_summary

# run_part KEY CAP_S COMMAND...: runs COMMAND under timeout (CAP_S, or less where the deadline is nearer) into
# $logs/<name>.log; sets part_rc (124: timed out), part_seconds, part_log, part_reason (for a failure) and records
# KEY.{status,exit,seconds,limit_s,log,reason}.
run_part() {
  local key=$1 cap=$2 left
  shift 2
  part_log=$logs/${key#*.}.log part_reason=''
  left=$((deadline - SECONDS))
  local limit=$((cap < left ? cap : left))
  if ((limit < 10)); then
    echo "no time left before the check's 8 minutes" >"$part_log"
    part_rc=124 part_seconds=0 part_reason="not run: no time left before the check's 8 minutes"
  else
    echo "gpu_check: ${key#*.} (at most $limit s): $*"
    local start=$SECONDS
    part_rc=0
    timeout -k 10 "$limit" "$@" >"$part_log" 2>&1 || part_rc=$?
    part_seconds=$((SECONDS - start))
    tail -n 30 "$part_log" | sed 's/^/  | /'
    if ((part_rc == 124 || part_rc == 137)); then
      part_reason="timed out after $limit s"
    elif ((part_rc != 0)); then
      part_reason="exit $part_rc: $(grep -v '^[[:space:]]*$' "$part_log" | tail -n 1 | cut -c1-300)"
    fi
  fi
  record "$key.exit:=$part_rc" "$key.seconds:=$part_seconds" "$key.limit_s:=$limit" "$key.log=$part_log"
}

finish_test_part() {  # finish_test_part KEY gtest|ctest: the counts, and the status
  local key=$1 kind=$2 counted failed
  counted=$("${host_env[@]}" python3 "$helper" counts "$kind" "$part_log" || true)
  while IFS='=' read -r name value; do [[ -n "$name" ]] && record "$key.$name:=$value"; done <<<"$counted"
  failed=$(sed -n 's/^failed=//p' <<<"$counted")
  if ((part_rc == 0 && ${failed:-0} > 0)); then part_reason="exit 0, but $failed tests failed"; fi
  if [[ -z "$part_reason" ]]; then
    record "$key.status=passed"
  else
    record "$key.status=failed" "$key.reason=$part_reason"
  fi
  echo "gpu_check: ${key#*.}: $([[ -z "$part_reason" ]] && echo passed || echo "FAILED ($part_reason)");" \
    "$(tr '\n' ' ' <<<"$counted")"
  write_summary
}

# 2. From a pack: attention at the models' shapes first (ViT-B/16 T=197 12x64, DINOv2 at 518 px T=1370, DINOv2-S
# with registers T=261; full and classifier-token, fp32 and bf16, forward and backward): each test prints the path
# bf16 attention took, and fails where it is not cuDNN's SDPA.
from_checkout=''
if [[ -z "${root:-}" && -d build ]]; then from_checkout=1; fi
if [[ -z "$from_checkout" && -x "$tests/test_cuda_gpu" ]]; then
  run_part tests.attention_real_shapes "${cap[attention_real_shapes]}" "$tests/test_cuda_gpu" \
    --gtest_filter='*AttentionAtRealShape*'
  finish_test_part tests.attention_real_shapes gtest
fi

# 3. ViT-B/16 (vit-base: 224 px, patch 16), bf16, training, the same batch and steps on each side; each side warms up
# one step first. The peer's bf16 is autocast over fp32 weights, AdamW with weight decay 0.05 as vitpipe bench's.
record "bench.config.model=vit-base (ViT-B/16, 224 px)" "bench.config.precision=bf16" "bench.config.mode=train" \
  "bench.config.batch:=$batch" "bench.config.steps:=$steps"
finish_bench_part() {  # finish_bench_part KEY: the figure and the status
  local key=$1 figure
  if [[ -z "$part_reason" ]] && ! figure=$("${host_env[@]}" python3 "$helper" images-per-s "$part_log" 2>&1); then
    part_reason="exit 0 but no figure: ${figure#gpu_check_summary: }"
  fi
  if [[ -z "$part_reason" ]]; then
    record "$key.status=passed" "$key.images_per_s:=$figure"
    echo "gpu_check: ${key#*.}: $figure images/s"
  else
    record "$key.status=failed" "$key.reason=$part_reason"
    echo "gpu_check: ${key#*.}: FAILED ($part_reason)"
  fi
  write_summary
}
run_part bench.vitpipe "${cap[bench_vitpipe]}" "$vitpipe" bench --device cuda --preset vit-base --precision bf16 \
  --mode train --batch "$batch" --steps "$steps" --json
finish_bench_part bench.vitpipe
# Which path its bf16 attention took ("cudnn", or "fallback..." and why): a figure on the fallback is no figure.
if path=$("${host_env[@]}" python3 "$helper" field "$part_log" attention_path 2>/dev/null); then
  record "bench.vitpipe.attention_path=$path"
  echo "gpu_check: vitpipe's attention: $path"
  write_summary
fi

# 4. The other CUDA tests.
if [[ -n "$from_checkout" ]]; then
  # cuda.gpu_pack would pack this build and run the packed check, this check, again.
  run_part tests.ctest_cuda "${cap[ctest_cuda]}" ctest --test-dir build --output-on-failure -L cuda \
    -E '^cuda\.gpu_pack$'
  finish_test_part tests.ctest_cuda ctest
else
  # CudaBackend on this GPU against the CPU backend, op by op (tests/cuda/gpu).
  if [[ -x "$tests/test_cuda_gpu" ]]; then
    run_part tests.test_cuda_gpu "${cap[test_cuda_gpu]}" "$tests/test_cuda_gpu" --gtest_filter='-*AttentionAtRealShape*'
    finish_test_part tests.test_cuda_gpu gtest
  fi
  # The golden cases with every stage on this GPU (2 and 3 stages sharing it) against their float64 PyTorch
  # references: this machine's Python and PyTorch run the references, the pack's libraries the probe.
  if [[ -x "$tests/vit_gradient_probe" && -f "$root/golden/golden_on_gpu.py" ]]; then
    golden_cases=()
    for c in vit:fp32-basic vit:fp32-stages-and-accumulation vit:bf16-stages-recompute-single \
      vit:fp32-split-backward-stages families:dinov2-registers-interpolated families:deit-distilled-teacher \
      families:lora-dinov2-all-recompute families:bf16-dinov2-swiglu; do golden_cases+=(--case "$c"); done
    run_part tests.golden_gpu "${cap[golden_gpu]}" "${host_env[@]}" VITPIPE="$vitpipe" \
      VITPIPE_CUDA_MODULE="$(dirname "$vitpipe")/libvitpipe_cuda.so" "$peer_python" "$root/golden/golden_on_gpu.py" \
      --reference-dir "$root/golden" --probe "$tests/vit_gradient_probe" \
      --probe-library-path "${LD_LIBRARY_PATH:-}" "${golden_cases[@]}"
    finish_test_part tests.golden_gpu ctest
  fi
  # Loading tests name the build folder's fakes by path; vitpipe info above answered for the real module.
  run_part tests.test_cuda "${cap[test_cuda]}" "$tests/test_cuda" \
    --gtest_filter='-CudaModule.*:CudaDriver.*:DeviceSelection.*'
  finish_test_part tests.test_cuda gtest
  if [[ -x "$tests/test_cuda_executors" ]]; then
    run_part tests.test_cuda_executors "${cap[test_cuda_executors]}" "$tests/test_cuda_executors"
    finish_test_part tests.test_cuda_executors gtest
  fi
fi

# 5. The PyTorch peer, eager and compiled.
peer_args=(--preset vit-base --precision bf16 --mode train --batch "$batch" --steps "$steps" --device cuda)
record "bench.peer=${peer:-none found}"
for variant in eager compile; do
  key=bench.torch_$variant
  if [[ -z "$peer" || ! -f "$peer" ]]; then
    record "$key.status=skipped" "$key.reason=no peer at ${peer:-../shared/peers/ or shared/peers/} (--peer PATH)"
    echo "gpu_check: torch_$variant: skipped (no peer: --peer PATH)"
    continue
  fi
  extra=()
  [[ "$variant" == compile ]] && extra=(--compile)
  # torch.compile compiles the forward and backward graphs in its warm-up step: its cap is the largest.
  run_part "$key" "${cap[torch_$variant]}" "${host_env[@]}" "$peer_python" "$peer" "${peer_args[@]}" "${extra[@]}"
  finish_bench_part "$key"
  if [[ "$variant" == eager ]] && torch=$("${host_env[@]}" python3 "$helper" field "$part_log" torch 2>/dev/null); then
    record "versions.torch=$torch"
  fi
done

# 6. The planner on this GPU (issue 42): `vitpipe plan --device cuda` profiles ViT-Tiny/16's segments at 224 px on
# the GPU (bf16, one micro-batch size: --micro-batch-size fixes it), reads the GPU's free memory through the driver
# and plans one rank; its JSON is kept as <summary>.logs/plan_cuda/plan.json and the chosen layout, the budget and the
# profile's key go into the summary. Recorded, never the verdict.
plan_dir=$logs/plan_cuda
rm -rf "$plan_dir"
mkdir -p "$plan_dir"
# shellcheck disable=SC2016 # $1 and $2 are the inner bash's arguments
run_part plan.cuda "${cap[plan_cuda]}" bash -c '"$1" init --preset vit-tiny --out "$2/model" >/dev/null &&
  "$1" plan --device cuda --model "$2/model" --precision bf16 --batch-size 64 --micro-batch-size 16 \
    --profile-cache "$2/cache" --json >"$2/plan.json"' plan_cuda "$vitpipe" "$plan_dir"
if [[ -z "$part_reason" ]] && planned=$("${host_env[@]}" python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
assert j["device"] == "cuda" and j["layouts"], "no cuda plan"
x = j["layouts"][0]
print(json.dumps({"chosen": x["train_flags"], "step_seconds": x["step_seconds"],
                  "memory_per_rank_bytes": x["memory_per_rank_bytes"], "gpu_memory": j.get("gpu_memory"),
                  "link": j["link"]["source"], "profile_key": j["profile"]["key"]}))' \
  "$plan_dir/plan.json" 2>&1); then
  record "plan.cuda.status=passed" "plan.cuda.json=$plan_dir/plan.json" "plan.cuda.plan:=$planned"
  echo "gpu_check: plan --device cuda: $planned"
else
  planned=${planned:-no plan}
  plan_reason=${part_reason:-${planned##*$'\n'}}  # the error's last line: one line per record
  record "plan.cuda.status=failed" "plan.cuda.reason=$plan_reason"
  echo "gpu_check: plan --device cuda: FAILED ($plan_reason)"
fi
rm -rf "$plan_dir/model"  # its random weights: only config.json was read
write_summary

# 7. CPU scaling (issue 46; a block of its own, after the GPU parts): `vitpipe bench --scaling` at 1, 2, 4, 8 and 16
# threads (as many as the machine has), ViT-Tiny/16, batch 16, 2 steps, fp32, on this machine's cores, the only
# ones here beyond 2; at most its cap, and only in what is left of the deadline. Its JSON line (what `vitpipe plan
# --scaling` reads) is kept as <summary>.logs/cpu_scaling.json and the best node splits go into the summary.
# Recorded, never the verdict.
scaling_counts=1
for n in 2 4 8 16; do ((n <= $(nproc))) && scaling_counts+=",$n"; done
record "cpu_scaling.threads=$scaling_counts"
run_part cpu_scaling.bench "${cap[cpu_scaling]}" "$vitpipe" bench --preset vit-tiny --batch 16 --steps 2 --scaling "$scaling_counts" \
  --json
if [[ -z "$part_reason" ]] && grep '^{' "$part_log" | tail -n 1 >"$logs/cpu_scaling.json" &&
  splits=$("${host_env[@]}" python3 -c 'import json, sys
print(json.dumps(json.load(open(sys.argv[1]))["predictions"]["best_node_split"]))' "$logs/cpu_scaling.json"); then
  record "cpu_scaling.bench.status=passed" "cpu_scaling.profile=$logs/cpu_scaling.json" \
    "cpu_scaling.best_node_split:=$splits"
else
  record "cpu_scaling.bench.status=failed" "cpu_scaling.bench.reason=${part_reason:-no JSON line in its log}"
fi
write_summary

# 8. The summary, written whole once more (it was after every part), and its line.
record "seconds:=$SECONDS"
write_summary
echo "gpu_check: $("${host_env[@]}" python3 "$helper" digest "$summary") -> $summary"
passed=$("${host_env[@]}" python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["passed"])' "$summary")
[[ "$passed" == True ]]
