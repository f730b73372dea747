#!/usr/bin/env bash
# The main job: set up + build, then the default benchmark sweep — fused residual_rmsnorm, hidden
# 8192, bf16, tokens 1..4096, CUDA graphs, checked against the CPU reference, on all visible GPUs
# (8 virtual ranks when only one is visible). Results (JSON and text, bench/results/SCHEMA.md) go to
# build/bench-results/<date>-fused-default-<commit>/, or to the folder given as the first argument.
# The default stays out of bench/results/, which holds only the files behind current figures of
# docs/performance.md (bench/results/README.md says how a run is filed there).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-build/bench-results/$(date -u +%Y-%m-%d)-fused-default-$(git rev-parse --short HEAD 2>/dev/null || echo nogit)}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
ARF_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || true) \
  ./build/arfusion-bench -J "$out/fused_default.json" | tee "$out/fused_default.txt"
