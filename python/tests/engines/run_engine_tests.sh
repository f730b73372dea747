#!/usr/bin/env bash
# An engine's CPU tests (ctest engine_vllm_cpu / engine_sglang_cpu, label cpu):
#   bash python/tests/engines/run_engine_tests.sh vllm|sglang
# In the engine's cached venv (engine_venv.sh; never made here: without it this exits 77 with
# "SKIPPED: <engine> not installed ..."), installs this tree's arfusion package with its one
# install command (libarfusion.so and the op library built against the venv's torch, in
# $ARFUSION_BUILD_DIR, default build-python-<engine>/), then runs
# python/tests/engines/test_<engine>*.py from outside the source tree against the installed
# package (its entry points included).
set -uo pipefail
engine=${1:?usage: run_engine_tests.sh vllm|sglang}
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
venv=$(bash "$here/engine_venv.sh" --cached "$engine" | tail -1)
status=${PIPESTATUS[0]}
if ((status != 0)); then
  [[ $venv == SKIPPED:* ]] && echo "$venv"
  exit "$status"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A build directory per engine: each venv's torch differs from the others' (and from the torch
# venvs'), so a shared one would rebuild whatever is built against torch on every switch.
export ARFUSION_BUILD_DIR="${ARFUSION_BUILD_DIR:-$repo/build-python-$engine}"
if ! (cd "$repo" && "$venv/bin/python" -m pip install --no-build-isolation --no-deps \
        --force-reinstall --disable-pip-version-check -v ./python) >"$work/install.log" 2>&1; then
  cat "$work/install.log"
  echo "FAILED: pip install --no-build-isolation ./python (into $venv)"
  exit 1
fi
sed -n 's/^ *\(arfusion_build: \)/\1/p' "$work/install.log" | grep -v "arfusion_build: \(configuring\|reusing\|building\)"
"$venv/bin/python" -c "import $engine, torch; print('run_engine_tests: $engine', $engine.__version__, 'with torch', torch.__version__)"
cd "$work" && exec env -u PYTHONPATH -u ARFUSION_LIBRARY -u ARFUSION_VLLM \
  "$venv/bin/python" -m unittest discover -s "$here" -t "$here" -p "test_${engine}*.py" -v
