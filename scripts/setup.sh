#!/usr/bin/env bash
# Installs what a fresh Debian machine with CUDA lacks (build tools and the Debian -dev packages we
# depend on), then configures and builds arfusion into ./build. Idempotent; installs nothing that is
# already present, so it also runs on machines without network access once the packages are there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ libgtest-dev libcli11-dev nlohmann-json3-dev git pkg-config)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
    [[ -x "$d/nvcc" ]] && export PATH="$d:$PATH" && break
  done
fi
command -v nvcc >/dev/null 2>&1 || { echo "setup: nvcc not found: install the CUDA toolkit (12.8+)"; exit 1; }

build_type=${ARF_BUILD_TYPE:-Release}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
  ${ARF_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
