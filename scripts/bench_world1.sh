#!/usr/bin/env bash
# World-1 epilogue (residual add + RMSNorm, no all-reduce) against torch.compile, in one run on one
# GPU: arfusion-bench --op epilogue and bench/torch_baseline.py over tokens 1..16384, hidden 8192,
# bf16, both timed with CUDA graphs; bench/compare_world1.py then merges the two JSONs into one
# table with the targets' verdicts (>= 92% of copy bandwidth at >= 2048 tokens; at least as fast as
# torch.compile at every token count, within the measured noise). Usage:
# scripts/bench_world1.sh [OUT_DIR] (default bench/results/tmp). Needs ./build/arfusion-bench
# (scripts/setup.sh) and PyTorch.
# Knobs for quick runs: ARF_BENCH (binary), ARF_WORLD1_TMAX (largest token count, default 16384),
# ARF_TORCH_MODE (torch.compile mode, default max-autotune-no-cudagraphs), ARF_WORLD1_REPEATS
# (timed regions per cell on both sides, default 5: medians compared, ranges give the noise).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/tmp}
mkdir -p "$out"
bench=${ARF_BENCH:-build/arfusion-bench}
[[ -x $bench ]] || { echo "bench_world1: $bench is not built (run scripts/setup.sh)" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0
tmax=${ARF_WORLD1_TMAX:-16384}
mode=${ARF_TORCH_MODE:-max-autotune-no-cudagraphs}
repeats=${ARF_WORLD1_REPEATS:-5}
# --verify: outside a git checkout plain rev-parse echoes "HEAD" before failing.
export ARF_GIT_COMMIT=${ARF_GIT_COMMIT:-$(git rev-parse --verify --quiet HEAD 2>/dev/null || true)}

"$bench" --op epilogue --devices 0 --tmin 1 --tmax "$tmax" --hidden 8192 -d bf16 \
  -n 100 -w 10 -G 10 -R "$repeats" -c 1 -J "$out/arfusion_epilogue.json" | tee "$out/arfusion_epilogue.txt"
bench_rc=${PIPESTATUS[0]}
python3 bench/torch_baseline.py --tmin 1 --tmax "$tmax" --hidden 8192 -n 100 -G 10 --repeats "$repeats" --mode "$mode" \
  --json "$out/torch_baseline.json" | tee "$out/torch_baseline.txt"
torch_rc=${PIPESTATUS[0]}
if [[ -s $out/arfusion_epilogue.json && -s $out/torch_baseline.json ]]; then
  python3 bench/compare_world1.py "$out/arfusion_epilogue.json" "$out/torch_baseline.json" \
    --json "$out/compare_world1.json" | tee "$out/compare_world1.txt"
fi
# A failed check or measurement fails the script; a missed performance target does not (it is
# recorded in compare_world1.txt).
((bench_rc == 0 && torch_rc == 0))
