#!/usr/bin/env bash
# scripts/gpu_check.sh --pack DIR: gathers into DIR what must travel to a GPU machine that has CUDA 13 (pip wheels
# nvidia-*-cu13) and Python with PyTorch but none of Debian's packages: vitpipe and its CUDA module, the CUDA test
# binaries, every library ldd names outside glibc and CUDA, and the plugins ldd does not name (Open MPI's and PMIx's
# components, with their help texts), beside gpu_check.sh and its summary writer gpu_check_summary.py. The CUDA
# libraries do not travel: the target has its own. Nor does the PyTorch peer (../shared/peers/torch_vit_bench.py): the
# check takes it as --peer PATH on the target and records the peer's parts as skipped where it is absent.
#
# Debian's oneDNN alone is 39.6 MB, so even a build without DICOM, Hub, MPI, serve and ONNX could not fit 48 MiB
# uncompressed; the files therefore travel xz-compressed (DIR/payload/**.xz) beside a copy of gpu_check.sh, which
# unpacks them on first use (with xz, or Python's lzma where xz is missing).
#   BUILD=build                      the build folder to take vitpipe, the module and the tests from
#   PACK_CACHE=~/.cache/vitpipe/gpu_pack  compressed files by content, reused by later packs and other builds
set -euo pipefail
dest=$(realpath -m "${1:?usage: scripts/gpu_check.sh --pack DIR}")
build=$(realpath -m "${BUILD:-$(dirname "$0")/../build}")
cd "$(dirname "$0")/.."
limit_bytes=$((48 * 1024 * 1024))

for f in "$build/vitpipe" "$build/libvitpipe_cuda.so"; do
  [[ -f "$f" ]] || { echo "gpu_pack: $f is missing: build with the CUDA module first (scripts/setup.sh)" >&2; exit 1; }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage" "$stage.cache"' EXIT
mkdir -p "$stage"/{bin,lib,tests,openmpi,pmix,share}

# The binary and its module side by side (vitpipe looks for the module beside itself), and the CUDA tests.
cp "$build/vitpipe" "$build/libvitpipe_cuda.so" "$stage/bin/"
elves=("$stage/bin/vitpipe" "$stage/bin/libvitpipe_cuda.so")
for t in test_cuda test_cuda_executors test_cuda_gpu vit_gradient_probe; do
  if [[ -f "$build/tests/$t" ]]; then
    cp "$build/tests/$t" "$stage/tests/"
    elves+=("$stage/tests/$t")
  fi
done
# The golden cases on the GPU: the probe above, its float64 PyTorch references and their driver (plain text).
mkdir -p "$stage/golden"
cp tests/model/reference_vit.py tests/model/reference_families.py tests/cuda/gpu/golden_on_gpu.py "$stage/golden/"
# Symbols only help a debugger; the target has none of the sources.
strip --strip-unneeded "${elves[@]}"

# Plugins ldd does not name: Open MPI opens its MCA components and PMIx its own at MPI_Init.
multiarch=/usr/lib/x86_64-linux-gnu
if [[ "$(ldd "$build/vitpipe")" == *libmpi.so* ]]; then
  cp "$multiarch"/openmpi/lib/openmpi3/*.so "$stage/openmpi/"
  [[ -d "$multiarch/pmix2/lib/pmix" ]] && cp "$multiarch"/pmix2/lib/pmix/*.so "$stage/pmix/"
  cp -r /usr/share/openmpi "$stage/share/openmpi"
  [[ -d /usr/share/pmix ]] && cp -r /usr/share/pmix "$stage/share/pmix"
  elves+=("$stage"/openmpi/*.so "$stage"/pmix/*.so)
fi

# Libraries that stay behind: glibc's (every Linux has them, and they must match its ld.so) and CUDA's (the target's
# wheels, whose versions must match its driver).
system_re='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libmvec)\.so'
cuda_re='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvrtc[a-z-]*|nvJitLink|nvidia-ml)\.so'
declare -A copied=()
missing=()
# One ldd for all of them: a line "FILE:" starts each file's list.
while read -r name arrow path _; do
  [[ "$name" == *: ]] && { elf=${name%:}; continue; }
  [[ "$arrow" == "=>" ]] || continue
  [[ "$name" =~ $system_re || "$name" =~ $cuda_re ]] && continue
  if [[ "$path" == "not" ]]; then missing+=("$name (needed by ${elf#"$stage"/})"); continue; fi
  if [[ -z "${copied[$name]:-}" ]]; then
    cp -L "$path" "$stage/lib/$name"
    copied[$name]=$path
  fi
done < <(ldd "${elves[@]}" 2>/dev/null)
if ((${#missing[@]})); then
  printf 'gpu_pack: not found here: %s\n' "${missing[@]}" >&2
  exit 1
fi

# The newest glibc symbol version the packed files ask for: the target's glibc must be at least this. Debian 12's
# libstdc++ asks for 2.36 (arc4random), newer than vitpipe's own files, so those are reported apart.
newest_glibc() { objdump -T "$@" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' |
  sort -t. -k1,1n -k2,2n -u | tail -1; }
glibc=$(newest_glibc "${elves[@]}" "$stage"/lib/*)
own_glibc=$(newest_glibc "$stage"/bin/* "$stage"/tests/*)
echo "$glibc" >"$stage/glibc_required"
# Per library, for the packed gpu_check.sh to set aside those a target's older glibc cannot load.
for f in "$stage"/lib/*; do echo "$(basename "$f") $(newest_glibc "$f")"; done >"$stage/glibc_needs"
unpacked_bytes=$(du -sb "$stage" | cut -f1)

# Each file travels xz-compressed on its own, so that a file compressed for an earlier pack (the same bytes: Debian's
# libraries, mostly) comes from the cache instead of being compressed again (by content, so any build may share it).
cache=${PACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vitpipe/gpu_pack}
mkdir -p "$dest"
mkdir -p "$cache" 2>/dev/null || cache=$stage.cache  # an unwritable home: no reuse, still a pack
mkdir -p "$cache"
rm -rf "$dest/payload" "$dest/root" "$dest/root.part" "$dest/gpu_check.sh" "$dest/gpu_check_summary.py"
(cd "$stage" && find . -mindepth 1 -type d -printf '%P\0' | (mkdir -p "$dest/payload" && cd "$dest/payload" && xargs -0 mkdir -p))
while read -r sum rel; do
  if [[ ! -f "$cache/$sum.xz" ]]; then
    part=$(mktemp "$cache/$sum.xz.XXXXXX")  # another pack may be writing the same file
    xz -T2 -6 -c "$stage/$rel" >"$part"
    mv "$part" "$cache/$sum.xz"
  fi
  cp "$cache/$sum.xz" "$dest/payload/$rel.xz"
done < <(cd "$stage" && find . -type f -printf '%P\0' | xargs -0 sha1sum)
cp scripts/gpu_check.sh scripts/gpu_check_summary.py "$dest/"

packed_bytes=$(find "$dest" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu_pack: $dest: $(mib "$packed_bytes") (limit 48 MiB; $(mib "$unpacked_bytes") unpacked, ${#copied[@]} libraries," \
  "$(find "$stage/openmpi" "$stage/pmix" -name '*.so' | wc -l) MPI plugins; needs glibc >= $glibc, vitpipe itself $own_glibc)"
if ((packed_bytes > limit_bytes)); then
  echo "gpu_pack: $dest is over 48 MiB" >&2
  exit 1
fi
