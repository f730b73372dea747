#!/usr/bin/env bash
# World-1 quantized epilogues (residual add + RMSNorm + FP8/FP4 quant, no all-reduce) against
# torch.compile of the same function, in one run on one GPU. The targets: (A) the 1-kernel
# call at least as fast as torch.compile at every token count, per pattern; (B) per-group FP8 at
# >= 85% of the copy bandwidth at >= 4096 tokens. Per hidden size (8192, then 7168): arfusion-bench
# --op quant on device 0 (fp8_tensor, fp8_token, fp8_group, nvfp4, mxfp4; row-major fp32 scales),
# dev/measure/torch_quant_baseline.py over the same tokens, then dev/measure/compare_world1_quant.py merges the
# two JSONs into per-pattern tables and the verdicts. Per hidden H, in OUT_DIR:
#   quant_w1_hH.{json,txt}  torch_quant_hH.{json,txt}  compare_world1_quant_hH.{json,txt}
# Usage: dev/measure/bench_world1_quant.sh [OUT_DIR] (default bench/results/tmp). Needs
# ./build/arfusion-bench (scripts/setup.sh) and PyTorch.
# Knobs: ARF_BENCH (binary); ARF_WORLD1_TMAX (largest token count, default 4096);
# ARF_WORLD1_HIDDENS (default "8192 7168"); ARF_WORLD1_QUANT (patterns, default all five);
# ARF_WORLD1_ITERS, ARF_WORLD1_REPLAYS (calls per CUDA graph, replays; default 50, 4; both sides);
# ARF_WORLD1_REPEATS (timed regions per cell, both sides, default 3: medians compared, the ranges
# give the noise the verdict allows, dev/measure/timing_noise.py);
# ARF_WORLD1_CHECK (arfusion's CPU check, default 1); ARF_TORCH_MODE (torch.compile mode, default
# max-autotune-no-cudagraphs); ARF_TORCH_BUDGET_S (per hidden size: the torch script starts no
# new row after so many seconds; default none); ARF_TORCH_SHAPES:
#   dynamic (default)  token dim marked dynamic: one compile + autotune per pattern at tmax tokens,
#                      plus dynamo's own 1-token specialisation (10 compiles per hidden size);
#   static             dynamic=False, one compile + autotune per token count as bench_world1.sh
#                      (65 per hidden size): the strongest baseline, several times slower.
# Compile and autotune time is not measured yet on the GPU machine: the torch JSON records it
# (header dynamic_compile_seconds, rows first_call_s) and each stage prints its start time.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${1:-bench/results/tmp}
mkdir -p "$out"
bench=${ARF_BENCH:-build/arfusion-bench}
if [[ ! -x $bench ]]; then
  echo "bench_world1_quant: $bench is not built (run scripts/setup.sh)" >&2
  exit 2
fi
export NCCL_NVLS_ENABLE=0
tmax=${ARF_WORLD1_TMAX:-4096}
hiddens=${ARF_WORLD1_HIDDENS:-8192 7168}
patterns=${ARF_WORLD1_QUANT:-fp8_tensor,fp8_token,fp8_group,nvfp4,mxfp4}
iters=${ARF_WORLD1_ITERS:-50}
replays=${ARF_WORLD1_REPLAYS:-4}
repeats=${ARF_WORLD1_REPEATS:-3}
check=${ARF_WORLD1_CHECK:-1}
mode=${ARF_TORCH_MODE:-max-autotune-no-cudagraphs}
shapes=${ARF_TORCH_SHAPES:-dynamic}
budget=()
[[ -n ${ARF_TORCH_BUDGET_S:-} ]] && budget=(--budget-s "$ARF_TORCH_BUDGET_S")
# --verify: outside a git checkout plain rev-parse echoes "HEAD" before failing.
export ARF_GIT_COMMIT=${ARF_GIT_COMMIT:-$(git rev-parse --verify --quiet HEAD 2>/dev/null || true)}

rc=0
for hidden in $hiddens; do
  echo "=== hidden $hidden ($(date -u +%H:%M:%S))"
  # No stale JSON from an earlier run in OUT_DIR may stand in for one this run failed to write.
  rm -f "$out/quant_w1_h$hidden.json" "$out/torch_quant_h$hidden.json" \
    "$out/compare_world1_quant_h$hidden.json"
  "$bench" --op quant --devices 0 --tmin 1 --tmax "$tmax" --hidden "$hidden" -d bf16 \
    --quant "$patterns" --scale-layout row --scale-format fp32 \
    -n "$iters" -w 5 -G "$replays" -R "$repeats" -c "$check" -J "$out/quant_w1_h$hidden.json" \
    | tee "$out/quant_w1_h$hidden.txt"
  bench_rc=${PIPESTATUS[0]}
  echo "=== torch.compile, hidden $hidden ($(date -u +%H:%M:%S))"
  python3 dev/measure/torch_quant_baseline.py --tmin 1 --tmax "$tmax" --hidden "$hidden" \
    --patterns "$patterns" -n "$iters" -G "$replays" --repeats "$repeats" --mode "$mode" --shapes "$shapes" \
    "${budget[@]}" --json "$out/torch_quant_h$hidden.json" | tee "$out/torch_quant_h$hidden.txt"
  torch_rc=${PIPESTATUS[0]}
  if [[ -s $out/quant_w1_h$hidden.json && -s $out/torch_quant_h$hidden.json ]]; then
    python3 dev/measure/compare_world1_quant.py "$out/quant_w1_h$hidden.json" \
      "$out/torch_quant_h$hidden.json" --json "$out/compare_world1_quant_h$hidden.json" \
      | tee "$out/compare_world1_quant_h$hidden.txt"
  fi
  ((bench_rc == 0 && torch_rc == 0)) || rc=1
done
echo "=== done ($(date -u +%H:%M:%S))"
# A failed check or measurement fails the script; a missed performance target does not (it is
# recorded in compare_world1_quant_h*.txt).
exit $rc
