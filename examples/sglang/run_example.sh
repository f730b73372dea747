#!/usr/bin/env bash
# examples/sglang/drop_in_check.py on a GPU (2 ranks under torchrun; on one GPU they share it),
# against the arfusion package installed as a user installs it (python/tests/install_package.sh,
# into $ARF_PY_INSTALL_DIR, default build-python/gpu-install). Exit 77 with "SKIPPED: ..." where
# there is no torch >= 2.10 with CUDA or no GPU; otherwise the check's exit status.
# $ARF_PYTHON: the interpreter (default python3).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../python/tests/package_env.sh"
arf_skip_without_torch --cuda "examples/sglang not run"
arf_install_package
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
exec "$arf_py" -m torch.distributed.run --standalone --nproc-per-node "${ARF_EXAMPLE_RANKS:-2}" \
  "$here/drop_in_check.py" "$@"
