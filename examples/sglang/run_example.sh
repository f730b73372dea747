#!/usr/bin/env bash
# examples/sglang/drop_in_check.py on a GPU (2 ranks under torchrun; on one GPU they share it),
# against the arfusion package installed as a user installs it (python/tests/install_package.sh,
# into $ARF_PY_INSTALL_DIR, default build-python/gpu-install). Exit 77 with "SKIPPED: ..." where
# there is no torch >= 2.10 with CUDA or no GPU; otherwise the check's exit status.
# $ARF_PYTHON: the interpreter (default python3).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${ARF_PYTHON:-python3}"
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
  echo "SKIPPED: examples/sglang not run ($why)"
  exit 77
elif ((rc != 0)); then
  echo "FAILED: checking for torch: $why"
  exit 1
fi
dir=${ARF_PY_INSTALL_DIR:-$here/../../build-python/gpu-install}
bash "$here/../../python/tests/install_package.sh" "$dir" || exit 1
export PYTHONPATH="$dir"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
exec "$py" -m torch.distributed.run --standalone --nproc-per-node "${ARF_EXAMPLE_RANKS:-2}" \
  "$here/drop_in_check.py" "$@"
