#!/usr/bin/env bash
# The end-to-end TP decoder benchmark and accuracy gate, one command (from anywhere):
#   bash bench/e2e/run.sh --quick        # smoke: gates (TP 2, L=8, 32 decode steps) + a short timing
#   bash bench/e2e/run.sh                # full: TP 1,2,4,8, all shapes, 200 replays
#   bash bench/e2e/run.sh --ctest        # what ctest e2e_gpu runs (2 layers, TP 2, gates only)
# Every option of tp_decoder.py passes through (bash bench/e2e/run.sh --help).
#
# Interpreter: $ARF_PYTHON (default python3; it needs torch >= 2.6 with CUDA). Library (the
# package's lookup, python/README.md): $ARFUSION_LIBRARY, else python/arfusion/libarfusion.so (pip
# install), else build/libarfusion.so; when none exists and ./build is configured, this builds the
# target arfusion_shared. PYTHONPATH gets python/ (the package from the source tree).
# Exit: 0 passed, 1 failed, 2 bad arguments, 77 skipped (no torch >= 2.6 / no GPU).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${ARF_PYTHON:-python3}"
if ! command -v "$py" >/dev/null 2>&1; then
  echo "SKIPPED: no $py on PATH"
  exit 77
fi
for arg in "$@"; do
  if [[ $arg == -h || $arg == --help ]]; then exec "$py" "$here/tp_decoder.py" --help; fi
done

# (the driver checks torch and the GPU first, then imports the package, which names the library it
# could not find; a missing library here is only built when ./build is configured)
if [[ -z ${ARFUSION_LIBRARY:-} && ! -e $repo/python/arfusion/libarfusion.so && ! -e $repo/build/libarfusion.so \
      && -f $repo/build/CMakeCache.txt ]]; then
  echo "run.sh: no libarfusion.so yet: cmake --build build --target arfusion_shared" >&2
  cmake --build "$repo/build" --target arfusion_shared >&2
fi

export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
# NVLink multicast off for NCCL, more hardware queues for ranks sharing a GPU (both only if unset)
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export ARF_GIT_COMMIT="${ARF_GIT_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
cd "$repo"
exec "$py" "$here/tp_decoder.py" "$@"
