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
source "$here/package_env.sh"
arf_skip_without_interpreter
arf_skip_without_torch --cuda
arf_install_package
exec "$arf_py" "$here/gpu/run_gpu_tests.py" "$@"
