#!/usr/bin/env bash
# The GPU tests of the Python package, one command (ctest: python_gpu, label gpu):
#   bash python/tests/run_gpu_tests.sh [--worlds 2,4,8] [--scenarios ...] [--json FILE]
# Interpreter: $ARF_PYTHON (default python3; it must have torch >= 2.10 with CUDA). The package is
# installed first, as a user installs it (python/tests/install_package.sh), into
# $ARF_PY_INSTALL_DIR (default build-python/gpu-install), and the tests import it from there
# (PYTHONPATH), with the op library built against this interpreter's torch. ctest passes its
# build directory as $ARFUSION_BUILD_DIR, so the library is the one its other tests ran.
# Then the graph dump and the op-overhead benchmark are separate tools (dev/python/).
# Exit 77 (skipped) without torch >= 2.10 with CUDA or a GPU, with a "SKIPPED: ..." line.
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
if not torch.cuda.is_available():
    print("no CUDA device visible"); raise SystemExit(77)
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
exec "$py" "$here/gpu/run_gpu_tests.py" "$@"
