# Sourced, never run, by the scripts that run Python against the installed arfusion package
# (python/tests/run_gpu_tests.sh, run_hf_models_gpu.sh, examples/*/run_example.sh), so that they
# find the interpreter, skip, install and set PYTHONPATH the same way:
#   source "$repo/python/tests/package_env.sh"
# Defines arf_py: the interpreter, $ARF_PYTHON (default python3). Each function below either returns
# or ends the calling script with exit 77 (skipped; ctest's SKIP_RETURN_CODE) or exit 1 (failed).
#   arf_skip_without_interpreter    77 with "SKIPPED: no PY" where $arf_py is not a command.
#   arf_skip_without_torch [--cuda] [LABEL]
#                                   77 with "SKIPPED: WHY" ("SKIPPED: LABEL (WHY)" with LABEL) where
#                                   the interpreter has no torch >= 2.10 or, with --cuda, sees no
#                                   CUDA device; 1 with "FAILED: checking for torch: ..." where the
#                                   check itself fails (torch raises on import, no interpreter).
#   arf_install_package             installs the package as a user does (install_package.sh; it
#                                   honours $ARFUSION_BUILD_DIR) into $ARF_PY_INSTALL_DIR (default
#                                   build-python/gpu-install in the repository) and exports
#                                   PYTHONPATH as that directory alone, so that nothing from the
#                                   source tree is imported; 1 where the install fails.
arf_py="${ARF_PYTHON:-python3}"
arf_tests_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

arf_skip_without_interpreter() {
  if ! command -v "$arf_py" >/dev/null 2>&1; then
    echo "SKIPPED: no $arf_py"
    exit 77
  fi
}

arf_skip_without_torch() {
  local need_cuda=no label why rc
  if [[ ${1:-} == --cuda ]]; then need_cuda=yes; shift; fi
  label=${1:-}
  why=$("$arf_py" - "$need_cuda" <<'PY' 2>&1
try:
    import torch
except ImportError:
    print("torch is not installed"); raise SystemExit(77)
v = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
if v < (2, 10):
    print(f"torch {torch.__version__} < 2.10"); raise SystemExit(77)
import sys
if sys.argv[1] == "yes" and not torch.cuda.is_available():
    print("no CUDA device visible"); raise SystemExit(77)
PY
)
  rc=$?
  if ((rc == 77)); then
    if [[ -n $label ]]; then echo "SKIPPED: $label ($why)"; else echo "SKIPPED: $why"; fi
    exit 77
  elif ((rc != 0)); then
    echo "FAILED: checking for torch: $why"
    exit 1
  fi
}

arf_install_package() {
  local dir=${ARF_PY_INSTALL_DIR:-$(cd "$arf_tests_dir/../.." && pwd)/build-python/gpu-install}
  bash "$arf_tests_dir/install_package.sh" "$dir" || exit 1
  export PYTHONPATH="$dir"
}
