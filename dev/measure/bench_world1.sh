#!/usr/bin/env bash
# World-1 epilogue (residual add + RMSNorm, no all-reduce) against torch.compile, in one run on one
# GPU: per hidden size and activation dtype, arfusion-bench --op epilogue and dev/measure/torch_baseline.py
# over tokens 1..16384, both timed with CUDA graphs; dev/measure/compare_world1.py then merges the two
# JSONs into one table with the targets' verdicts (>= 92% of copy bandwidth at >= 2048 tokens; at
# least as fast as torch.compile at every token count, within the measured noise). The target
# names hidden 8192 and 16384, bf16 and fp16: all four by default. Per hidden H and dtype D, in
# OUT_DIR: arfusion_epilogue_hH_D.{json,txt}, torch_baseline_hH_D.{json,txt},
# compare_world1_hH_D.{json,txt}. Usage: dev/measure/bench_world1.sh [OUT_DIR] (default
# bench/results/tmp). Needs ./build/arfusion-bench (scripts/setup.sh) and PyTorch.
# Knobs: ARF_BENCH (binary), ARF_WORLD1_HIDDENS (default "8192 16384"), ARF_WORLD1_DTYPES (default
# "bf16 fp16"), ARF_WORLD1_TMAX (largest token count, default 16384), ARF_TORCH_MODE
# (torch.compile mode, default max-autotune-no-cudagraphs), ARF_WORLD1_REPEATS (timed regions per
# cell on both sides, default 5: medians compared, ranges give the noise).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/tmp}
mkdir -p "$out"
bench=${ARF_BENCH:-build/arfusion-bench}
[[ -x $bench ]] || { echo "bench_world1: $bench is not built (run scripts/setup.sh)" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0
tmax=${ARF_WORLD1_TMAX:-16384}
hiddens=${ARF_WORLD1_HIDDENS:-8192 16384}
dtypes=${ARF_WORLD1_DTYPES:-bf16 fp16}
mode=${ARF_TORCH_MODE:-max-autotune-no-cudagraphs}
repeats=${ARF_WORLD1_REPEATS:-5}
# --verify: outside a git checkout plain rev-parse echoes "HEAD" before failing.
export ARF_GIT_COMMIT=${ARF_GIT_COMMIT:-$(git rev-parse --verify --quiet HEAD 2>/dev/null || true)}

rc=0
for hidden in $hiddens; do
  for dtype in $dtypes; do
    tag=h${hidden}_$dtype
    echo "=== hidden $hidden $dtype ($(date -u +%H:%M:%S))"
    # No stale JSON from an earlier run in OUT_DIR may stand in for one this run failed to write.
    rm -f "$out/arfusion_epilogue_$tag.json" "$out/torch_baseline_$tag.json" "$out/compare_world1_$tag.json"
    "$bench" --op epilogue --devices 0 --tmin 1 --tmax "$tmax" --hidden "$hidden" -d "$dtype" \
      -n 100 -w 10 -G 10 -R "$repeats" -c 1 -J "$out/arfusion_epilogue_$tag.json" | tee "$out/arfusion_epilogue_$tag.txt"
    bench_rc=${PIPESTATUS[0]}
    python3 dev/measure/torch_baseline.py --tmin 1 --tmax "$tmax" --hidden "$hidden" --dtype "$dtype" -n 100 -G 10 \
      --repeats "$repeats" --mode "$mode" --json "$out/torch_baseline_$tag.json" | tee "$out/torch_baseline_$tag.txt"
    torch_rc=${PIPESTATUS[0]}
    if [[ -s $out/arfusion_epilogue_$tag.json && -s $out/torch_baseline_$tag.json ]]; then
      python3 dev/measure/compare_world1.py "$out/arfusion_epilogue_$tag.json" "$out/torch_baseline_$tag.json" \
        --json "$out/compare_world1_$tag.json" | tee "$out/compare_world1_$tag.txt"
      ((PIPESTATUS[0] == 0)) || rc=1
    fi
    ((bench_rc == 0 && torch_rc == 0)) || rc=1
  done
done
echo "=== done ($(date -u +%H:%M:%S))"
# A failed check or measurement fails the script; a missed performance target does not (it is
# recorded in compare_world1_*.txt).
exit $rc
