#!/usr/bin/env bash
# Installs the arfusion package as a user does, with its one install command (pip install
# --no-build-isolation, python/README.md), into DIR; the GPU tests, the torch example and the e2e
# benchmark then run with PYTHONPATH=DIR, never against the source tree (which has no op library).
#   bash python/tests/install_package.sh DIR
# Interpreter: $ARF_PYTHON (default python3): its torch (>= 2.10, a CUDA build) is the one the op
# library is built against. The CMake build reuses $ARFUSION_BUILD_DIR when set (ctest passes its
# own build directory, so libarfusion.so is the one its other tests ran), else build-python/.
# Prints the build's summary lines; on failure pip's whole output, and exits 1.
set -uo pipefail
dir=${1:?usage: install_package.sh DIR}
repo="$(cd "$(dirname "$0")/../.." && pwd)"
py="${ARF_PYTHON:-python3}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! (cd "$repo" && "$py" -m pip install --no-build-isolation --disable-pip-version-check -v \
        --no-deps --upgrade --target "$dir" ./python) >"$log" 2>&1; then
  cat "$log"
  echo "FAILED: pip install --no-build-isolation ./python (into $dir) with $py"
  exit 1
fi
grep -h "^arfusion_build: " "$log" | grep -v "^arfusion_build: \(configuring\|reusing\|building\)" || true
