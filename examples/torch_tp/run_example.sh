#!/usr/bin/env bash
# The example as ctest torch_tp_example (label gpu) runs it: the package installed as a user
# installs it (python/tests/install_package.sh, into $ARF_PY_INSTALL_DIR, default
# build-python/gpu-install), then 2 ranks under torchrun (on one GPU the ranks share it,
# torch.distributed on gloo). Exit 77 (skipped) with a "SKIPPED: ..." line where there is no
# torch >= 2.10 with CUDA; otherwise the example's own exit status (0: every layer fused and the
# compiled outputs agree with the eager ones). $ARF_PYTHON: the interpreter (default python3).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../../python/tests/package_env.sh"
arf_skip_without_torch --cuda "examples/torch_tp not run"
arf_install_package
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
exec "$arf_py" -m torch.distributed.run --standalone --nproc-per-node "${ARF_EXAMPLE_RANKS:-2}" \
  "$here/tp_model.py" "$@"
