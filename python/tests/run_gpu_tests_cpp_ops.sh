#!/usr/bin/env bash
# The Python GPU tests again with the ops' C++ kernels (ctest: python_gpu_cpp_ops, label gpu):
# builds them (python3 -m arfusion.torch.build_ops into $ARFUSION_TORCH_OPS_DIR, default
# build/torch_ops) and runs gpu/run_gpu_tests.py with ARFUSION_TORCH_OPS=cpp, so every scenario
# goes through them where they exist (the quantized op stays Python unless ARF_TORCH_OPS_QUANT=1);
# the pass forms run once, in
# python_gpu. Options pass through (--worlds, --scenarios, --json).
# Exit 77 (skipped) without torch >= 2.10 (the stable ABI's string arguments) or a GPU, with a
# "SKIPPED: ..." line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${ARF_PYTHON:-python3}"
if ! command -v "$py" >/dev/null 2>&1; then
  echo "SKIPPED: no $py"
  exit 77
fi
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"
rc=0
"$py" - <<'PY' || rc=$?
import sys
try:
    import torch
except ImportError:
    print("SKIPPED: torch is not installed (the C++ op kernels need torch >= 2.10)", flush=True)
    sys.exit(77)
major, minor = (int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
if (major, minor) < (2, 10):
    print(f"SKIPPED: torch {torch.__version__} < 2.10 (the C++ op kernels need the stable ABI's "
          "string arguments)", flush=True)
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIPPED: no CUDA device visible", flush=True)
    sys.exit(77)
PY
if [[ $rc -ne 0 ]]; then exit "$rc"; fi
export ARFUSION_TORCH_OPS_DIR="${ARFUSION_TORCH_OPS_DIR:-$repo/build/torch_ops}"
# ARF_TORCH_OPS_QUANT=1: the quantized op's C++ kernel too (opt-in until it has run on a GPU)
quant=()
if [[ ${ARF_TORCH_OPS_QUANT:-0} == 1 ]]; then quant=(--with-quant); fi
"$py" -m arfusion.torch.build_ops "$ARFUSION_TORCH_OPS_DIR" ${quant[@]+"${quant[@]}"}
ARFUSION_TORCH_OPS=cpp exec "$py" "$here/gpu/run_gpu_tests.py" --no-forms "$@"
