#!/usr/bin/env bash
# examples/sglang/drop_in_check.py on a GPU (2 ranks under torchrun; on one GPU they share it),
# against the installed arfusion package. Exit 77 with "SKIPPED: ..." where there is no torch with
# CUDA or no GPU; otherwise the check's exit status. $ARF_PYTHON: the interpreter (default python3).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${ARF_PYTHON:-python3}"
why=$("$py" -c 'import torch, sys
sys.exit(0) if torch.cuda.is_available() else (print("no CUDA device visible"), sys.exit(77))' 2>&1)
rc=$?
if ((rc == 77)); then echo "SKIPPED: examples/sglang not run ($why)"; exit 77; fi
if ((rc != 0)); then echo "SKIPPED: examples/sglang not run (no torch: $why)"; exit 77; fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
exec "$py" -m torch.distributed.run --standalone --nproc-per-node "${ARF_EXAMPLE_RANKS:-2}" \
  "$here/drop_in_check.py" "$@"
