#!/usr/bin/env bash
# Checks the installed package the way a user meets it: `cmake --install` into a fresh temporary
# prefix, then examples/minimal built as a separate project with find_package(arfusion), and the C
# example compiled as C11 and linked with nothing but `pkg-config --cflags --libs arfusion`. Both
# examples are run: the C one needs no GPU; the C++ one runs 4 ranks where a GPU is visible and
# otherwise prints that it has nothing to run and exits 0.
#
# Usage: scripts/check_package.sh [build-dir]   (default: build, as scripts/setup.sh makes it)
# Any failure exits non-zero. The temporary prefix is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}
[[ -f "$build_dir/cmake_install.cmake" ]] || {
  echo "check_package: $build_dir is not a configured build (run scripts/setup.sh)" >&2
  exit 1
}
# find_dependency(CUDAToolkit) in the package finds nvcc the same way setup.sh does.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

step() { echo "check_package: $*"; }

step "cmake --install $build_dir --prefix <tmp>"
cmake --install "$build_dir" --prefix "$prefix" >"$tmp/install.log" || {
  cat "$tmp/install.log" >&2
  exit 1
}
# The library directory is lib/ unless the build chose another CMAKE_INSTALL_LIBDIR.
libdir=$(dirname "$(find "$prefix" -name libarfusion.a -print -quit)")
[[ $libdir != . ]] || { echo "check_package: libarfusion.a not installed" >&2; exit 1; }
expected=("$libdir/cmake/arfusion/arfusionConfig.cmake"
  "$libdir/cmake/arfusion/arfusionConfigVersion.cmake"
  "$libdir/cmake/arfusion/arfusionTargets.cmake" "$libdir/pkgconfig/arfusion.pc"
  "$prefix/include/arfusion/arfusion.h" "$prefix/include/arfusion/arfusion.hpp")
# Tools are installed when built (ARF_BUILD_BENCH=OFF builds none).
[[ -x "$build_dir/arfusion-bench" ]] && expected+=("$prefix/bin/arfusion-bench")
for f in "${expected[@]}"; do
  [[ -f $f ]] || { echo "check_package: not installed: ${f#"$prefix"/}" >&2; exit 1; }
done
# A relocatable package names no path of the source or build tree.
if grep -rlF -e "$PWD" "$libdir/cmake" "$libdir/pkgconfig"; then
  echo "check_package: the files above name the source/build tree ($PWD)" >&2
  exit 1
fi

step "examples/minimal with find_package(arfusion) (CMAKE_PREFIX_PATH=<tmp>)"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S examples/minimal -B "$tmp/example" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" || {
  cat "$tmp/configure.log" >&2
  exit 1
}
cmake --build "$tmp/example" -j "$(nproc)"

step "plain_c.c as C11 with pkg-config (PKG_CONFIG_PATH=<tmp>/${libdir#"$prefix"/}/pkgconfig)"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc=${CC:-cc}
read -r -a cflags <<<"$(pkg-config --cflags arfusion)"
read -r -a libs <<<"$(pkg-config --libs arfusion)"
"$cc" -std=c11 -Wall -Wextra -pedantic -Werror "${cflags[@]}" -c examples/minimal/plain_c.c \
  -o "$tmp/plain_c.o"
"$cc" "$tmp/plain_c.o" "${libs[@]}" -o "$tmp/plain_c"

step "run plain_c (pkg-config build), arfusion_plain_c and arfusion_minimal (CMake build)"
"$tmp/plain_c"
"$tmp/example/arfusion_plain_c" >/dev/null
"$tmp/example/arfusion_minimal"
step "OK"
