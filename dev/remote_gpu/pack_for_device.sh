#!/usr/bin/env bash
# Packs what the GPU host needs from ./build into .devpack/build.tar.xz, small enough to copy
# there with the working tree (tens of MB): configure with -DARF_SHARED=ON first (one
# libarfusion.so holds the kernels; static linking would copy ~22 MB of them into every
# executable). Copy .devpack to the GPU host with the tree, then there:
#   tar -xJf .devpack/build.tar.xz && bash dev/remote_gpu/device_run.sh [stages]
# Extra build-relative paths can be named as arguments.
# --candidate NAME FILE instead packs a libarfusion.so built from another commit into
# .devpack-NAME/candidate.tar.xz (as NAME/libarfusion.so), for gpu_acceptance.sh's candidate stage;
# copy it with .devpack. A full library is ~23 MB (keep a copy small: one or two libraries); a
# candidate's arfusion_diag (bf16, unquantized patterns: what the A/B measures) is ~1 MB:
#   tar -xJf .devpack-NAME/candidate.tar.xz && mkdir base && cp build/libarfusion_diag.so base/libarfusion.so &&
#   ARF_CANDIDATES="NAME=$PWD/NAME" ARF_CANDIDATE_BASE=$PWD/base bash dev/remote_gpu/gpu_acceptance.sh candidate
set -euo pipefail
cd "$(dirname "$0")/../.."
# git's exclude file (in a worktree .git is a file, so ask git where it is)
exclude=$(git rev-parse --git-path info/exclude)
if [[ ${1:-} == --candidate ]]; then
  name=${2:-}; lib=${3:-}
  [[ $name =~ ^[a-z0-9_]+$ && -f $lib ]] || { echo "pack_for_device: --candidate NAME libarfusion.so" >&2; exit 1; }
  stage=$(mktemp -d); mkdir "$stage/$name"; cp "$lib" "$stage/$name/libarfusion.so"
  mkdir -p ".devpack-$name"
  grep -qx '/.devpack-\*/' "$exclude" 2>/dev/null || echo '/.devpack-*/' >> "$exclude"
  tar -C "$stage" -cf - "$name" | xz -T0 -6 > ".devpack-$name/candidate.tar.xz"
  rm -rf "$stage"; ls -la ".devpack-$name/candidate.tar.xz"
  exit 0
fi
[[ -f build/libarfusion.so ]] || { echo "pack_for_device: build/libarfusion.so missing: cmake -S . -B build -DARF_SHARED=ON && cmake --build build" >&2; exit 1; }
files=(build/libarfusion.so build/arfusion_gpu_tests build/arfusion_ipc_tests build/arfusion-run
       build/arfusion-bench build/arfusion-stress
       build/arfusion_cpu_tests build/CTestTestfile.cmake)
# Negative-control and debug-stall variants, when the build has them (-DARF_BUILD_NEGATIVE_CONTROLS=ON).
for f in build/libarfusion_nc_*.so build/libarfusion_debug_stall.so build/libarfusion_diag.so build/arfusion-stress-* \
         build/arfusion_gpu_tests_no_*; do
  [[ -e $f ]] && files+=("$f")
done
for f in "$@"; do files+=("build/$f"); done
existing=()
for f in "${files[@]}"; do [[ -e $f ]] && existing+=("$f"); done
mkdir -p .devpack
grep -qx '/.devpack/' "$exclude" 2>/dev/null || echo '/.devpack/' >> "$exclude"
tar -cf - "${existing[@]}" | xz -T0 -6 > .devpack/build.tar.xz
ls -la .devpack/build.tar.xz
