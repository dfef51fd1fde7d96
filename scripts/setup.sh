#!/usr/bin/env bash
# Installs vitpipe's Debian 12 packages (only the missing ones) and builds it into build/.
#   scripts/setup.sh            what the vitpipe binary needs
#   scripts/setup.sh --tests    plus the reference stack the tests compare against (PyTorch, Pillow, scikit-learn,
#                               pydicom, DCMTK's tools)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config ninja-build ccache  # ccache: rebuilds and CI reuse what was compiled
  libdnnl-dev                       # oneDNN: CPU GEMM kernels
  libopenmpi-dev openmpi-bin        # MPI: pipeline/data parallelism across processes
  libspng-dev libjpeg62-turbo-dev   # PNG and JPEG decoding
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev  # JSON, command line, YAML configs
  libcurl4-openssl-dev libssl-dev ca-certificates  # Hugging Face Hub downloads, sha256
  libzip-dev                        # reading pytorch_model.bin (a zip archive)
  libarchive-dev                    # `data prepare` reading NIH's images_0XX.tar.gz without unpacking them
  libdcmtk-dev libopenjp2-7-dev     # DICOM: DCMTK (parsing, JPEG / JPEG-LS / RLE codecs), OpenJPEG (JPEG 2000)
  zlib1g-dev                        # gzipped label files (.csv.gz)
  libfreetype-dev fonts-dejavu-core # text on heatmap overlays (finding, probability, colour bar)
  libonnx-dev libprotobuf-dev       # ONNX export: ONNX's protobuf classes, checker, shape inference
  libcpp-httplib-dev                # `serve`: HTTP/1.1 server (DICOM networking and SR come with libdcmtk-dev)
  libgtest-dev libbenchmark-dev)    # unit tests, micro-benchmarks
if [[ "${1:-}" == "--tests" ]]; then
  # Reference implementations the tests check against; OpenBLAS so the PyTorch peer runs at its real speed.
  packages+=(python3 python3-torch python3-pil python3-sklearn python3-numpy python3-yaml libopenblas0-pthread
    qemu-user)                      # runs the binary on an emulated AVX2-only and a pre-AVX2 CPU
  # DICOM references: pydicom reads the test files, DCMTK's tools compress them (dcmcjpeg, dcmcjpls, dcmcrle).
  packages+=(python3-pydicom dcmtk)
  # `serve` against a real PACS: Orthanc with its DICOMweb plugin, and dicom3tools' dciodvfy to validate the SR.
  packages+=(orthanc orthanc-dicomweb dicom3tools)
  # A real Slurm cluster in network namespaces (tests/slurm/): controller, compute daemon, clients, authentication.
  packages+=(slurmctld slurmd slurm-client munge)
  # A real browser opens the HTML report with networking off (tests/report/).
  packages+=(chromium)
  # The fuzz harnesses (tools/fuzz): clang, its libFuzzer and sanitizer runtimes, its OpenMP.
  packages+=(clang libclang-rt-14-dev libomp-dev)
  # ONNX exports: ONNX's Python checker; ONNX Runtime comes from npm (below), run by Node.js.
  packages+=(python3-onnx)
  command -v npm >/dev/null || packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ "${1:-}" == "--tests" ]]; then
  # ONNX Runtime for tests/onnx: its CPU library ships inside the npm package (the install script, skipped, would
  # fetch GPU parts from elsewhere).
  (cd tests/onnx && ONNXRUNTIME_NODE_INSTALL=skip npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

jobs=$(nproc)
# A build/ made by another generator (earlier versions used Make) cannot switch to Ninja in place.
if [[ -f build/CMakeCache.txt ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' build/CMakeCache.txt; then
  rm -rf build
fi
# ccache with paths relative to the checkout, so another clone of the same sources (CI's) hits the same cache.
launcher="env;CCACHE_BASEDIR=$PWD;ccache"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_C_COMPILER_LAUNCHER=$launcher" "-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher" \
  "-DCMAKE_CUDA_COMPILER_LAUNCHER=$launcher" >/dev/null  # CUDA: the module, where CUDA 13 is found
cmake --build build -j"$jobs"
