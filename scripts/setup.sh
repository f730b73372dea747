#!/usr/bin/env bash
# Makes ./build: checks what the build needs by what is usable here — a command on PATH (cmake >=
# 3.25, ninja or else make, a C++20 compiler, nvcc, pkg-config, git) and the CMake packages the
# build finds (GTest, CLI11, nlohmann_json) — wherever they came from (Debian packages, pip, conda,
# a source build). Installs only what is missing, with apt-get where it exists and reaches an
# archive; where nothing can be installed it names what to install and exits 1. Then configures
# and builds. Idempotent, and silent until the configure step when everything is present.
#
# ccache, when present (an optional package, installed with apt-get on the first setup of a build
# directory), compiles a new build directory: setup.sh configures one with ccache as the compiler
# launcher unless ARF_CMAKE_ARGS names a launcher, and CCACHE_BASEDIR defaults to the repository,
# so another build directory of the same sources (the Python package's build-python/, which
# `pip install ./python` makes with ccache too) is a cache hit rather than a second full build.
#
# Knobs: ARF_BUILD_TYPE (default Release); ARF_CMAKE_ARGS (extra configure arguments, also used
# when looking for the packages, e.g. -DCMAKE_PREFIX_PATH=/opt/deps); CXX (the C++ compiler);
# CUDA_HOME (where to look for nvcc); ARF_SETUP_NO_INSTALL=1 (report what is missing, never
# install); ARF_BUILD_DIR (default build: test.sh and bench.sh expect that one) and
# ARF_BUILD_TARGETS (default: everything) for partial builds.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "setup: $*" >&2; }
read -r -a extra_args <<<"${ARF_CMAKE_ARGS:-}"
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT

# ---- what is usable now ---------------------------------------------------------------------
# missing: Debian package per missing item; hint: what to install where apt-get cannot.
declare -A missing=() hint=()
want() { missing[$1]=$2; hint[$1]=$3; }

find_nvcc() {
  command -v nvcc >/dev/null 2>&1 && return 0
  local d
  for d in ${CUDA_HOME:+"$CUDA_HOME/bin"} /usr/local/cuda/bin $(ls -d /usr/local/cuda-*/bin 2>/dev/null | sort -rV); do
    if [[ -x $d/nvcc ]]; then export PATH="$d:$PATH"; return 0; fi
  done
  return 1
}

find_cxx() {  # the compiler CMake will pick: $CXX, else c++ / g++ / clang++ on PATH
  local c
  if [[ -n ${CXX:-} ]]; then
    command -v "$CXX" >/dev/null 2>&1 || return 1
    cxx=$(command -v "$CXX"); return 0
  fi
  for c in c++ g++ clang++; do
    if command -v "$c" >/dev/null 2>&1; then cxx=$(command -v "$c"); return 0; fi
  done
  return 1
}

# A throwaway CMake project: can this compiler build C++20, and can find_package() see the
# libraries exactly as the build asks for them?
probe_cmake_packages() {
  mkdir -p "$probe_dir/src"
  cat >"$probe_dir/src/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(arfusion_setup_probe LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
include(CheckCXXSourceCompiles)
check_cxx_source_compiles("#include <concepts>
#include <span>
template <std::integral T> int f(std::span<const T> s) { return static_cast<int>(s.size()); }
int main() { const int a[2] = {1, 2}; return f(std::span<const int>(a)) - 2; }" ARF_PROBE_CXX20)
if(ARF_PROBE_CXX20)
  message(STATUS "probe cxx20 yes")
endif()
find_package(Threads)
find_package(GTest QUIET)
find_package(CLI11 CONFIG QUIET)
find_package(nlohmann_json QUIET)
foreach(p GTest CLI11 nlohmann_json)
  if(${p}_FOUND)
    message(STATUS "probe package ${p} found")
  endif()
endforeach()
EOF
  rm -rf "$probe_dir/build"
  cmake -S "$probe_dir/src" -B "$probe_dir/build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
    "${extra_args[@]}" >"$probe_dir/probe.log" 2>&1
}

pick_generator() {  # Ninja when present, else Make; $CMAKE_GENERATOR when the user set one
  generator=()
  if [[ -n ${CMAKE_GENERATOR:-} ]]; then return 0; fi
  if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); return 0; fi
  if command -v make >/dev/null 2>&1; then generator=(-G "Unix Makefiles"); return 0; fi
  return 1
}

check() {
  missing=() hint=()
  local v
  if ! command -v cmake >/dev/null 2>&1; then
    want cmake cmake "cmake >= 3.25 (pip install 'cmake>=3.25', or https://cmake.org/download)"
  else
    v=$(cmake --version | sed -n '1s/[^0-9]*\([0-9][0-9.]*\).*/\1/p')
    if [[ $(printf '%s\n' 3.25 "$v" | sort -V | head -1) != 3.25 ]]; then
      want cmake cmake "cmake >= 3.25, found $v at $(command -v cmake) (pip install 'cmake>=3.25')"
    fi
  fi
  # ninja is preferred; make is the fallback generator.
  pick_generator || true
  if ! command -v ninja >/dev/null 2>&1; then
    if command -v make >/dev/null 2>&1; then
      want ninja ninja-build "ninja (pip install ninja), optional: the Make generator is used without it"
    else
      want ninja ninja-build "ninja (pip install ninja) or make"
    fi
  fi
  cxx=""
  find_cxx || want cxx g++ "a C++20 compiler (g++ >= 10 or clang++ >= 12; CXX=... to name it)"
  find_nvcc || want nvcc "" "the CUDA toolkit 12.8+ (nvcc on PATH, or CUDA_HOME=...; not an apt package here)"
  command -v pkg-config >/dev/null 2>&1 || want pkg-config pkg-config "pkg-config or pkgconf (the package check uses it)"
  command -v git >/dev/null 2>&1 || want git git "git (only names the commit in results)"
  command -v spin >/dev/null 2>&1 ||
    want spin spin "spin, the model checker of the protocol model tests (ctest lists them as skipped without it)"
  command -v ccache >/dev/null 2>&1 ||
    want ccache ccache "ccache (optional: a second build directory of the same sources, e.g. the Python package's, is a cache hit)"
  if [[ -n $cxx && -z ${missing[cmake]:-} ]] && { ((${#generator[@]})) || [[ -n ${CMAKE_GENERATOR:-} ]]; }; then
    if ! probe_cmake_packages; then
      want probe "" "a CMake configuration that works: a test project with $cxx failed:
$(grep -iE -A2 'error' "$probe_dir/probe.log" | grep -v 'See also' | head -8)"
      return
    fi
    grep -q 'probe cxx20 yes' "$probe_dir/probe.log" ||
      want cxx g++ "a C++20 compiler: $cxx cannot build C++20 (g++ >= 10 or clang++ >= 12; CXX=...)"
    grep -q 'probe package GTest found' "$probe_dir/probe.log" ||
      want GTest libgtest-dev "GoogleTest with its CMake files (or -DCMAKE_PREFIX_PATH=... in ARF_CMAKE_ARGS)"
    grep -q 'probe package CLI11 found' "$probe_dir/probe.log" ||
      want CLI11 libcli11-dev "CLI11 with its CMake config (or -DCLI11_DIR=... in ARF_CMAKE_ARGS)"
    grep -q 'probe package nlohmann_json found' "$probe_dir/probe.log" ||
      want nlohmann_json nlohmann-json3-dev "nlohmann_json with its CMake config (or -Dnlohmann_json_DIR=...)"
  fi
}

# Needed to build and test; git, spin (its tests skip), ccache (optional), and ninja while make
# exists, are not.
blocking() {
  local k
  for k in "${!missing[@]}"; do
    [[ $k == git || $k == spin || $k == ccache ]] && continue
    [[ $k == ninja ]] && command -v make >/dev/null 2>&1 && continue
    echo "$k"
  done
}

apt_install() {  # Debian package names; fails when apt-get is absent, not allowed, or cannot install
  [[ ${ARF_SETUP_NO_INSTALL:-0} == 1 ]] && return 1
  command -v apt-get >/dev/null 2>&1 || return 1
  local as_root=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || return 1
    if [[ -t 0 ]]; then as_root=(sudo); elif sudo -n true 2>/dev/null; then as_root=(sudo -n); else return 1; fi
  fi
  say "installing $* (apt-get)"
  tried_apt=1
  # A failed update (no network) may still leave usable package lists.
  "${as_root[@]}" apt-get update -qq || say "apt-get update failed; trying the cached package lists"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

tried_apt=0
check
# apt-get only when something needed is missing (the optional ones come along then), or when
# ccache is missing on the first setup of the build directory, so a machine that only lacks git or
# ninja does not ask a package archive on every run.
build_dir=${ARF_BUILD_DIR:-build}
if [[ -n $(blocking) || ( -n ${missing[ccache]:-} && ! -f $build_dir/CMakeCache.txt ) ]]; then
  packages=()
  for k in "${!missing[@]}"; do [[ $k != spin && -n ${missing[$k]} ]] && packages+=("${missing[$k]}"); done
  if ((${#packages[@]})) && apt_install "${packages[@]}"; then
    hash -r
    check
  fi
fi
# spin, which the CPU tests need, on its own: an archive without it must not keep the build's
# packages from installing.
if [[ -n ${missing[spin]:-} ]] && apt_install spin; then
  hash -r
  check
fi
if ((${#missing[@]})); then
  mapfile -t fatal < <(blocking | sort)
  for k in $(printf '%s\n' "${!missing[@]}" | sort); do
    if printf '%s\n' "${fatal[@]}" | grep -qx "$k"; then
      say "MISSING: ${hint[$k]}${missing[$k]:+ — Debian/Ubuntu: apt-get install ${missing[$k]}}"
    else
      say "note: not found: ${hint[$k]}"
    fi
  done
  if ((${#fatal[@]})); then
    if ((tried_apt)); then
      say "cannot build until the above is installed (apt-get could not install it)"
    else
      say "cannot build until the above is installed (no apt-get usable here: not present, not root, or ARF_SETUP_NO_INSTALL=1)"
    fi
    exit 1
  fi
fi

# ---- configure and build ----------------------------------------------------------------------
# An existing build keeps its generator (CMake refuses to switch one).
pick_generator || true
cached=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
if [[ -n $cached ]]; then
  generator=()
  if [[ $cached == Ninja ]] && ! command -v ninja >/dev/null 2>&1; then
    say "$build_dir/ was configured with Ninja, which is not on PATH now: put ninja on PATH or remove $build_dir/"
    exit 1
  fi
elif [[ ${generator[*]:-} == "-G Unix Makefiles" ]]; then
  say "ninja not found: configuring $build_dir/ with the Make generator"
fi
build_type=${ARF_BUILD_TYPE:-Release}
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  if [[ -z $cached && ${ARF_CMAKE_ARGS:-} != *COMPILER_LAUNCHER* ]]; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
fi
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type" \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" "${launcher[@]}" "${extra_args[@]}"
read -r -a targets <<<"${ARF_BUILD_TARGETS:-}"
cmake --build "$build_dir" -j "$(nproc)" ${targets[0]:+--target "${targets[@]}"}
