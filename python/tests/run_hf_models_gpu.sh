#!/usr/bin/env bash
# The compile pass on the Hugging Face models on a GPU, one command (ctest: hf_models_gpu and,
# with --negative-controls, hf_models_gpu_controls; label gpu):
#   bash python/tests/run_hf_models_gpu.sh [--models Llama,...] [--negative-controls] [--json FILE]
# Interpreter: $ARF_PYTHON (default python3; torch >= 2.10 with CUDA, and transformers). The
# package is installed first, as a user installs it (python/tests/install_package.sh), into
# $ARF_PY_INSTALL_DIR (default build-python/gpu-install), and the ranks import it from there
# (PYTHONPATH). Exit 77 (skipped) with a "SKIPPED: ..." line without torch >= 2.10, transformers
# or a GPU (hf_models_gpu.py says which).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${ARF_PYTHON:-python3}"
if ! command -v "$py" >/dev/null 2>&1; then
  echo "SKIPPED: no $py"
  exit 77
fi
why=$("$py" - <<'PY' 2>&1
try:
    import torch
except ImportError:
    print("torch is not installed"); raise SystemExit(77)
v = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
if v < (2, 10):
    print(f"torch {torch.__version__} < 2.10"); raise SystemExit(77)
PY
)
rc=$?
if ((rc == 77)); then
  echo "SKIPPED: $why"
  exit 77
elif ((rc != 0)); then
  echo "FAILED: checking for torch: $why"
  exit 1
fi
dir=${ARF_PY_INSTALL_DIR:-$repo/build-python/gpu-install}
bash "$here/install_package.sh" "$dir" || exit 1
export PYTHONPATH="$dir"
exec "$py" "$here/gpu/hf_models_gpu.py" "$@"
