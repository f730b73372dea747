#!/usr/bin/env bash
# The Python package's CPU tests against the package as its one install command installs it, in a
# fresh virtual environment of their own (ctest python_cpu and python_torch_cpu_<major>_<minor>,
# label cpu; cmake/python.cmake):
#   bash python/tests/run_venv_tests.sh none      # no torch: python/tests/cpu (arfusion.torch's
#                                                 # ImportError included)
#   bash python/tests/run_venv_tests.sh 2.10.0    # torch==2.10.0 from PyPI with numpy and
#                                                 # transformers: python/tests/cpu and torch_cpu
# The venvs live under ${XDG_CACHE_HOME:-$HOME/.cache}/arfusion (made once and reused, never in
# the repository; isolated from the system's packages, so a distribution's torch is never the
# one). Every run reinstalls the package into its venv with `pip install --no-build-isolation
# ./python` (the build directory build-python/ is kept between runs: a reinstall rebuilds only
# what changed) and runs the tests from outside the source tree, without PYTHONPATH.
# Exit 77 with "SKIPPED: ..." (ctest: skipped) only where the venv's packages cannot be installed
# (no index reachable, no wheel for this platform or interpreter); any other failure is a failure.
# $ARF_PYTHON: the interpreter the venvs are made from (default python3).
# `run_venv_tests.sh VERSION --venv-only` makes (or checks) the venv and stops there: scripts/test.sh
# makes them while the build runs, so a first run's downloads do not wait for the build.
set -uo pipefail
version=${1:?usage: run_venv_tests.sh none|TORCH_VERSION [--venv-only]}
venv_only=${2:-}
repo="$(cd "$(dirname "$0")/../.." && pwd)"
py="${ARF_PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || { echo "FAILED: no $py on PATH"; exit 1; }
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || exit 1
cache="${XDG_CACHE_HOME:-$HOME/.cache}/arfusion"
venv="$cache/venv-py$pyver-torch-$version"
wants="numpy transformers"
[[ $version == none ]] || wants="torch==$version $wants"
[[ $version == none ]] && wants=""
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- the venv: made once per interpreter and torch version --------------------------------------
stamp="$venv/.arfusion-packages"
if [[ ! -x $venv/bin/python || $(cat "$stamp" 2>/dev/null) != "$wants" ]]; then
  echo "run_venv_tests: making $venv${wants:+ ($wants)}"
  rm -rf "$venv"
  mkdir -p "$cache"
  if ! "$py" -m venv "$venv" >"$work/venv.log" 2>&1; then
    cat "$work/venv.log"; echo "FAILED: $py -m venv $venv"; rm -rf "$venv"; exit 1
  fi
  if [[ -n $wants ]] && ! "$venv/bin/python" -m pip install --disable-pip-version-check -q $wants \
        >"$work/pip.log" 2>&1; then
    tail -5 "$work/pip.log"
    echo "SKIPPED: $wants cannot be installed here (pip failed: above)"
    rm -rf "$venv"
    exit 77
  fi
  echo "$wants" > "$stamp"
fi
[[ $venv_only == --venv-only ]] && { echo "run_venv_tests: $venv ready"; exit 0; }
"$venv/bin/python" -c 'import sys; print("run_venv_tests: python", sys.version.split()[0])'
[[ $version == none ]] || "$venv/bin/python" -c 'import torch; print("run_venv_tests: torch", torch.__version__, "from", torch.__file__)'

# ---- the one install command -------------------------------------------------------------------
start=$SECONDS
if ! (cd "$repo" && "$venv/bin/python" -m pip install --no-build-isolation --disable-pip-version-check \
        -v ./python) >"$work/install.log" 2>&1; then
  cat "$work/install.log"
  echo "FAILED: pip install --no-build-isolation ./python (into $venv)"
  exit 1
fi
sed -n 's/^ *\(arfusion_build: \)/\1/p' "$work/install.log" | grep -v "arfusion_build: \(configuring\|reusing\|building\)"
echo "run_venv_tests: installed in $((SECONDS - start)) s"

# ---- the tests, from outside the source tree -----------------------------------------------------
dirs=(cpu)
[[ $version == none ]] || dirs+=(torch_cpu)
status=0
for d in "${dirs[@]}"; do
  echo "=== python/tests/$d ==="
  (cd "$work" && env -u PYTHONPATH -u ARFUSION_LIBRARY ARFUSION_EXPECT_INSTALLED=1 \
      "$venv/bin/python" -m unittest discover -s "$repo/python/tests/$d" -t "$repo/python/tests/$d" -v) \
    || status=1
done
exit $status
