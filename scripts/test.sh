#!/usr/bin/env bash
# The test command: set up + build, then run every test. Without a GPU the GPU suite reports
# "SKIPPED: no CUDA device visible" and ctest lists it as skipped (never as passed).
# The Python package's CPU tests (ctest python_cpu, python_torch_cpu_*) install it with its one
# install command into venvs cached under ${XDG_CACHE_HOME:-$HOME/.cache}/arfusion: the first run
# makes them (torch 2.10.0 and 2.15.0, numpy and transformers from PyPI, ~7 GB each), later runs reuse
# them; the package's own build (build-python/) is a ccache hit of this build's objects.
set -euo pipefail
cd "$(dirname "$0")/.."
# Those venvs are made in the background while setup.sh builds (downloads, not compilation: a
# first run would otherwise spend ~15 minutes on them after the build); ctest's Python tests then
# find them made, or make them again and report why not.
venv_log=$(mktemp)
torch_versions=$(sed -n 's/^set(ARF_TORCH_CPU_VERSIONS "\([^"]*\)".*/\1/p' cmake/python.cmake | tr ';' ' ')
(for v in none $torch_versions; do bash python/tests/run_venv_tests.sh "$v" --venv-only; done) \
  >"$venv_log" 2>&1 &
venvs=$!
trap 'kill "$venvs" 2>/dev/null || true; rm -f "$venv_log"' EXIT
bash scripts/setup.sh
if ! wait "$venvs"; then
  echo "test.sh: making the Python test venvs ahead failed (ctest's Python tests retry):"
  tail -5 "$venv_log"
fi
# The engines' venvs (vLLM and SGLang from PyPI, cached under ~/.cache/arfusion) for the ctest
# engine_*_cpu tests, only when asked (ARF_ENGINE_VENVS=1): a cold install downloads ~14 GB and
# took 31 minutes here; without the venvs those tests report "SKIPPED: <engine> not installed".
if [[ ${ARF_ENGINE_VENVS:-0} == 1 ]]; then
  for engine in vllm sglang; do
    bash python/tests/engines/engine_venv.sh "$engine" >/dev/null || (($? == 77))
  done
fi
ctest --test-dir build --output-on-failure "$@"
# The installed package: cmake --install, find_package and pkg-config consumers (examples/minimal).
bash scripts/check_package.sh
if ! ./build/arfusion_gpu_tests --gtest_list_tests >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "NOTE: no usable GPU here: the GPU suite (ctest label gpu) was SKIPPED, not run."
fi
