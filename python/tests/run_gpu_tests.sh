#!/usr/bin/env bash
# The GPU tests of the Python package, one command (ctest: python_gpu, label gpu):
#   bash python/tests/run_gpu_tests.sh [--worlds 2,4,8] [--scenarios ...] [--json FILE]
# Interpreter: $ARF_PYTHON (default python3; it must have torch >= 2.6 with CUDA). Library:
# $ARFUSION_LIBRARY, else the package's lookup (python/arfusion/libarfusion.so, build/libarfusion.so).
# Then the graph dump and the op-overhead benchmark are separate tools (dev/python/).
# Exit 77 (skipped) without torch >= 2.6 or a GPU, with a "SKIPPED: ..." line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${ARF_PYTHON:-python3}"
if ! command -v "$py" >/dev/null 2>&1; then
  echo "SKIPPED: no $py"
  exit 77
fi
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$here/gpu/run_gpu_tests.py" "$@"
