#!/usr/bin/env bash
# The end-to-end TP decoder benchmark and accuracy gate, one command (from anywhere):
#   bash bench/e2e/run.sh --quick        # smoke: gates (TP 2, L=8, 32 decode steps) + a short timing
#   bash bench/e2e/run.sh                # full: TP 1,2,4,8, all shapes, 200 replays
#   bash bench/e2e/run.sh --ctest        # what ctest e2e_gpu runs (2 layers, TP 2, gates only)
# Every option of tp_decoder.py passes through (bash bench/e2e/run.sh --help).
#
# Interpreter: $ARF_PYTHON (default python3; it needs torch >= 2.10 with CUDA). The package is
# installed first, as a user installs it (python/tests/install_package.sh), into
# $ARF_PY_INSTALL_DIR (default build-python/gpu-install), and PYTHONPATH names that directory: the
# op library is built against this interpreter's torch ($ARFUSION_BUILD_DIR: the CMake build to
# reuse, as ctest passes its own).
# Exit: 0 passed, 1 failed, 2 bad arguments, 77 skipped (no torch >= 2.10 / no GPU).
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

# (the driver checks torch and the GPU first: install only where it can run)
if "$py" -c 'import torch, sys; v = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(0 if v >= (2, 10) and torch.cuda.is_available() else 1)' 2>/dev/null; then
  dir=${ARF_PY_INSTALL_DIR:-$repo/build-python/gpu-install}
  bash "$repo/python/tests/install_package.sh" "$dir" >&2 || exit 1
  export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
fi
# NVLink multicast off for NCCL, more hardware queues for ranks sharing a GPU (both only if unset)
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export ARF_GIT_COMMIT="${ARF_GIT_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
cd "$repo"
exec "$py" "$here/tp_decoder.py" "$@"
