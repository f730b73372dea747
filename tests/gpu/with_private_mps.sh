#!/usr/bin/env bash
# Runs a command with its CUDA processes under an MPS control daemon of its own, so that processes
# sharing one GPU run their kernels at once instead of time-slicing (what the shared-device gate must
# survive across processes: docs/protocol.md, "Ranks sharing a GPU").
#
#   with_private_mps.sh [--logs DIR] -- COMMAND [ARG ...]
#
# The daemon's pipe and log directories are fresh temporary ones, exported to COMMAND only, so no
# other process on the machine connects to it and no device setting (compute mode) is changed; it
# is stopped when COMMAND ends, however it ends. Exit: COMMAND's status; 77 (ctest: skipped), with
# a SKIPPED line, where there is no GPU or no nvidia-cuda-mps-control, or the daemon did not start.
# --logs DIR keeps the daemon's control and server logs there.
set -uo pipefail
logs=
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --logs) logs=$2; shift 2 ;;
    *) echo "with_private_mps: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ ${1:-} == -- ]] && shift
[[ $# -gt 0 ]] || { echo "usage: with_private_mps.sh [--logs DIR] -- COMMAND [ARG ...]" >&2; exit 2; }

skip() { echo "SKIPPED: $*"; exit 77; }
nvidia-smi -L > /dev/null 2>&1 || skip "no GPU (nvidia-smi -L failed)"
command -v nvidia-cuda-mps-control > /dev/null || skip "nvidia-cuda-mps-control is not on PATH"

CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d) CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
stop() {
  echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
  sleep 1  # the daemon writes its last log lines as it exits
  if [[ -n $logs ]]; then mkdir -p "$logs" && cp "$CUDA_MPS_LOG_DIRECTORY"/*.log "$logs"/ 2> /dev/null; fi
  rm -rf "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
}
if ! nvidia-cuda-mps-control -d; then
  rm -rf "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  skip "the MPS control daemon did not start"
fi
trap stop EXIT
trap 'exit 143' TERM INT  # (timeout signals the whole group): exit through the EXIT trap
echo "# MPS control daemon started (pipe directory $CUDA_MPS_PIPE_DIRECTORY)"
"$@"
